#include "trainer/runtime/device.h"

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#if SEGTRAIN_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <algorithm>
#include <string>
#include <thread>

#include "common/error.h"

namespace segtrain::trainer {

c10::Device pick_device(Device wanted, int64_t local_rank, const std::string& what) {
  const bool cuda = torch::cuda::is_available();
  if (wanted == Device::cuda && !cuda)
    throw InputError(what + ": cuda requested but " +
                     (SEGTRAIN_WITH_CUDA ? "no CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
                                         : "this build has no CUDA (build it with SEGTRAIN_CUDA=1 make build)"));
  if (wanted == Device::cpu || (wanted == Device::auto_select && !cuda)) return c10::Device(c10::kCPU);
  const int64_t visible = torch::cuda::device_count();
  if (local_rank >= visible)
    throw InputError("LOCAL_RANK=" + std::to_string(local_rank) + ": only " + std::to_string(visible) +
                     " CUDA devices are visible to this process");
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
#if SEGTRAIN_WITH_CUDA
  c10::cuda::set_device(device.index());  // NCCL and new CUDA tensors use the current device
#endif
  return device;
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
  at::autocast::set_autocast_dtype(device_, at::kBFloat16);
  at::autocast::set_autocast_enabled(device_, true);
}

Autocast::~Autocast() {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(device_, false);
  at::autocast::clear_cache();
}

}  // namespace segtrain::trainer
