#include "trainer/runtime/device.h"

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#if SEGTRAIN_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/error.h"
#include "trainer/runtime/cpu_matmul.h"

namespace segtrain::trainer {

c10::Device pick_device(Device wanted, int64_t local_rank, const std::string& what) {
  const bool cuda = torch::cuda::is_available();
  if (wanted == Device::cuda && !cuda)
    throw InputError(what + ": cuda requested but " +
                     (SEGTRAIN_WITH_CUDA ? "no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
                                         : "this build has no CUDA (build it with SEGTRAIN_CUDA=1 make build)"));
  if (wanted == Device::cpu || (wanted == Device::auto_select && !cuda)) return c10::Device(c10::kCPU);
  const bool restricted = std::getenv("CUDA_VISIBLE_DEVICES") != nullptr;
  const int64_t index = cuda_index_for(local_rank, torch::cuda::device_count(), restricted);
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
#if SEGTRAIN_WITH_CUDA
  c10::cuda::set_device(device.index());  // NCCL and new CUDA tensors use the current device
#endif
  return device;
}

int64_t cuda_index_for(int64_t local_rank, int64_t visible, bool restricted) {
  // One device left by CUDA_VISIBLE_DEVICES is this rank's own, whatever its LOCAL_RANK.
  // Without the variable, one device is the machine's only GPU: ranks past 0 have none.
  if (visible == 1 && restricted) return 0;
  if (local_rank < visible) return local_rank;
  throw InputError("LOCAL_RANK=" + std::to_string(local_rank) + ": only " + std::to_string(visible) +
                   " CUDA device" + (visible == 1 ? " is" : "s are") +
                   " visible to this process; give each rank one device (CUDA_VISIBLE_DEVICES, SLURM "
                   "--gpus-per-task=1) or every rank the node's devices (--gpus-per-node with one task per GPU)");
}

at::Tensor to_device(const at::Tensor& host, const c10::Device& device) {
  if (!device.is_cuda()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

int64_t thread_count(int64_t configured) {
  if (configured > 0) return configured;
  return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
}

Autocast::Autocast(bool enabled, at::DeviceType device) : enabled_(enabled), device_(device) {
  if (!enabled_) return;
  // On a CPU without a fast bf16 GEMM, "bf16" autocasts to fp32 (cpu_matmul.h).
  at::autocast::set_autocast_dtype(device_, device_ == at::kCPU ? cpu_matmul().dtype : at::kBFloat16);
  at::autocast::set_autocast_enabled(device_, true);
}

Autocast::~Autocast() {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(device_, false);
  at::autocast::clear_cache();
}

}  // namespace segtrain::trainer
