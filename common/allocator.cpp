#include "common/allocator.h"

#include <climits>  // also brings in <features.h>, which defines __GLIBC__
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace segtrain {

// LibTorch's CPU tensors come straight from malloc. With glibc's defaults free
// space above 128 KiB at the top of the heap is given back to the kernel, and
// blocks above a dynamic threshold are mmapped and unmapped, so each training
// step page-faults its activations in again and the kernel zeroes every page
// (perf: exc_page_fault, clear_page, memcg charge): 6% of the CPU time of a
// quickstart-sized step. A heap that is never trimmed, with blocks up to 16 MiB
// served from it, keeps those pages for the next step (quickstart model, 1
// thread: 175 -> 160 ms CPU per step, system time 11 -> 0 ms). Setting the trim
// threshold alone is worse than the default: it also freezes the mmap
// threshold at 128 KiB. Larger thresholds, or no mmap at all, save a little more
// system time on GPT-2-sized logits but fragment the heap: peak RSS of a d512 x 8
// model rose 10-20% and moved by 9% between two runs of the same config, while
// 16 MiB stays within 1% of glibc's default (bench/train_bench.py memory).
void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 16 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

}  // namespace segtrain
