#include "common/allocator.h"

#include <climits>  // also brings in <features.h>, which defines __GLIBC__
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace segtrain {

// LibTorch's CPU tensors come straight from malloc. With glibc's defaults a
// block above the (dynamic, at most 32 MiB) mmap threshold goes back to the
// kernel on free, and free space above 128 KiB at the top of the heap is
// trimmed, so each training step page-faults its activations, logits and
// gradients in again and the kernel zeroes every page (perf: exc_page_fault,
// clear_page, memcg charge): 6% of the CPU time of a quickstart-sized step and
// 1 s of system time per GPT-2-small step on 2 threads. Serving every block
// from the heap and never trimming it keeps those pages for the next step.
// The heap then holds the largest working set any step (or checkpoint write)
// had: peak RSS is within a few percent for GPT-2 small (2815 -> 2845 MB, 2
// threads) and about 10% higher for a d512 x 8 model (1070 -> 1173 MB), while
// a fixed 32 MiB mmap threshold cost 20% and a trim threshold alone (which also
// freezes glibc's dynamic mmap threshold at 128 KiB) made steps 40% slower.
// Threads other than the main one still get mmap for blocks larger than their
// 64 MiB arena heaps.
void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

}  // namespace segtrain
