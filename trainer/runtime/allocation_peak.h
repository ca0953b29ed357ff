#pragma once
// The most bytes a piece of work's tensors held on a device at once, above what was held
// when it began: how train.micro_batch_size auto measures a step (trainer/train/batch_size.h).
// On CUDA the caching allocator's own peak, reset at the start. On the CPU, where PyTorch
// keeps no statistics, every allocation goes through a counting allocator wrapped around
// PyTorch's for the watch's lifetime (one watch at a time); what the work frees of tensors
// made before it is not subtracted. Not counted on the CPU: oneDNN's own scratch memory, and a
// storage made before the watch that the work resizes (it keeps the allocator it was made with).
#include <c10/core/Device.h>

#include <cstdint>

namespace c10 {
struct Allocator;
}

namespace segtrain::trainer {

class AllocationPeak {
 public:
  explicit AllocationPeak(const c10::Device& device);
  ~AllocationPeak();
  AllocationPeak(const AllocationPeak&) = delete;
  AllocationPeak& operator=(const AllocationPeak&) = delete;

  // The peak so far, in bytes above the start.
  int64_t bytes() const;
  // The bytes held as the watch began, as the watch counts them (CUDA: allocated; CPU: live
  // through the counter, from earlier watches): differences between watches say what one left.
  int64_t start_bytes() const { return start_; }

 private:
  c10::Device device_;
  int64_t start_ = 0;                    // the bytes held when the watch began (on the CPU, through the counter)
  c10::Allocator* replaced_ = nullptr;   // CPU: PyTorch's allocator, put back at the end
};

}  // namespace segtrain::trainer
