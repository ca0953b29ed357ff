#include "common/allocator.h"

#include <climits>  // also brings in <features.h>, which defines __GLIBC__
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace segtrain {

// LibTorch's CPU tensors come straight from malloc. With glibc's defaults a
// block above the (dynamic) mmap threshold goes back to the kernel on free, and
// free space above 128 KiB at the top of the heap is trimmed, so each training
// step page-faults its activations in again and the kernel zeroes every page:
// about 6% of the CPU time of a small model's step (perf: exc_page_fault,
// clear_page, memcg charge). A fixed 32 MiB mmap threshold (glibc's largest) and
// a trim threshold that is never reached keep those pages for the next step.
// Peak resident memory does not grow: the next step needs the same blocks.
void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

}  // namespace segtrain
