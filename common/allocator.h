#pragma once
// Process-wide heap settings for commands that run a model (see allocator.cpp).

namespace segtrain {

// Keeps freed memory in the process instead of giving it back to the kernel
// after every tensor, so a training step reuses the pages of the previous one.
// Call once at start-up, before any thread is created. No-op off glibc.
void keep_freed_memory();

}  // namespace segtrain
