#pragma once
// Where a run computes: the device of this rank, its CPU threads, and bf16
// autocast. Every device-specific path stays behind torch::Device and the
// SEGTRAIN_WITH_CUDA switch CMake sets.
#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include <cstdint>

#include "trainer/config/config.h"

namespace segtrain::trainer {

// run.device for the rank with this LOCAL_RANK (each process of a node takes
// its own GPU). InputError when CUDA is asked for and not there.
c10::Device pick_device(Device wanted, int64_t local_rank);

// run.threads, with 0 meaning every core of this process's share.
int64_t thread_count(int64_t configured);

// bf16 autocast for the forward pass while alive; positional math inside the
// model stays fp32 (seed 002).
class Autocast {
 public:
  Autocast(bool enabled, at::DeviceType device);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool enabled_;
  at::DeviceType device_;
};

}  // namespace segtrain::trainer
