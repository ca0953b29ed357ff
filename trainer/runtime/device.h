#pragma once
// Where a command computes: the device of this rank, its CPU threads, bf16
// autocast, and host tensors staged for the device. Every device-specific path
// stays behind c10::Device and the SEGTRAIN_WITH_CUDA switch CMake sets.
#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "trainer/config/config.h"

namespace segtrain::trainer {

// run.device for the rank with this LOCAL_RANK (each process of a node takes
// its own GPU: cuda_index_for). InputError naming `what` (the key or flag) when
// CUDA is asked for and not there.
c10::Device pick_device(Device wanted, int64_t local_rank, const std::string& what = "run.device");

// The CUDA device a rank computes on, from what it sees: device LOCAL_RANK when
// it sees the node's devices (torchrun, segtrain-launch), device 0 when
// CUDA_VISIBLE_DEVICES leaves it exactly one (SLURM --gpus-per-task=1 gives each
// task one GPU and LOCAL_RANK 0..n-1). InputError when LOCAL_RANK has no device.
int64_t cuda_index_for(int64_t local_rank, int64_t visible_devices, bool visible_devices_restricted);

// A host tensor on `device`. For CUDA it goes through pinned (page-locked)
// memory with a non-blocking copy, so the CPU builds the next batch while the
// copy and the step's kernels run; the caching host allocator keeps the pinned
// buffer alive until the copy is done.
at::Tensor to_device(const at::Tensor& host, const c10::Device& device);

// run.threads, with 0 meaning every core of this process's share.
int64_t thread_count(int64_t configured);

// bf16 autocast for the forward pass while alive; positional math inside the
// model stays fp32 (the ALiBi precision study). On a CPU whose bf16 GEMM is slower than fp32 the
// matmuls run in fp32 instead (cpu_matmul.h).
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
