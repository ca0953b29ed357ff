#include "trainer/runtime/memory.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#if SEGTRAIN_WITH_CUDA
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace segtrain::trainer {
namespace {

double round_tenth(double mb) { return std::round(mb * 10.0) / 10.0; }

#if SEGTRAIN_WITH_CUDA
// The caching allocator exists once CUDA is initialised, which PyTorch does lazily at the first
// tensor on the device; asked before that (a run resets its peak before its first step), LibTorch
// 2.11 throws "Invalid device argument 0: did you call init?". Initialising is idempotent.
void init_cuda_allocator() { at::globalContext().lazyInitDevice(c10::DeviceType::CUDA); }
#endif

// A line of /proc/self/status ("VmRSS:  1234 kB"), in bytes; nullopt where there is none.
std::optional<int64_t> own_status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  return std::nullopt;
}

// This process's own peak resident memory, MiB: /proc/self/status's VmHWM (the high-water
// mark of its address space). Not getrusage's ru_maxrss: Linux carries that over exec from the
// parent's copy at fork, so a run started by a 1 GB Python process reported 1 GB whatever it held.
double own_peak_rss_mb() {
  if (const auto peak = own_status_bytes("VmHWM")) return static_cast<double>(*peak) / (1024.0 * 1024.0);
  rusage usage{};  // no procfs: the closest there is
  return getrusage(RUSAGE_SELF, &usage) == 0 ? static_cast<double>(usage.ru_maxrss) / 1024.0 : 0.0;
}

#if SEGTRAIN_WITH_CUDA
// cudaMemGetInfo of `device`: {free, total} bytes, nullopt where it fails.
std::optional<std::pair<int64_t, int64_t>> cuda_memory_info(const c10::Device& device) {
  init_cuda_allocator();
  const c10::cuda::CUDAGuard guard(device.index());
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return std::nullopt;
  return std::pair{static_cast<int64_t>(free), static_cast<int64_t>(total)};
}
#endif

}  // namespace

PeakMemory peak_memory(const c10::Device& device) {
  PeakMemory peak;
  peak.rss_mb = own_peak_rss_mb();
#if SEGTRAIN_WITH_CUDA
  if (device.is_cuda()) {
    using c10::CachingAllocator::StatType;
    constexpr double kMiB = 1024.0 * 1024.0;
    init_cuda_allocator();
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto aggregate = static_cast<size_t>(StatType::AGGREGATE);
    peak.gpu_allocated_mb = static_cast<double>(stats.allocated_bytes[aggregate].peak) / kMiB;
    peak.gpu_reserved_mb = static_cast<double>(stats.reserved_bytes[aggregate].peak) / kMiB;
  }
#else
  (void)device;
#endif
  return peak;
}

void reset_peak_memory(const c10::Device& device) {
#if SEGTRAIN_WITH_CUDA
  if (device.is_cuda()) {
    init_cuda_allocator();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  }
#else
  (void)device;
#endif
}

std::optional<int64_t> available_memory_bytes(const c10::Device& device) {
#if SEGTRAIN_WITH_CUDA
  if (device.is_cuda()) {
    const auto info = cuda_memory_info(device);
    if (!info) return std::nullopt;
    return info->first;
  }
#else
  (void)device;
#endif
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return std::nullopt;
}

int64_t held_memory_bytes(const c10::Device& device) {
#if SEGTRAIN_WITH_CUDA
  if (device.is_cuda()) {
    init_cuda_allocator();
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  }
#else
  (void)device;
#endif
  return own_status_bytes("VmRSS").value_or(0);
}

std::optional<int64_t> device_memory_bytes(const c10::Device& device, int64_t ranks_on_host) {
#if SEGTRAIN_WITH_CUDA
  if (device.is_cuda()) {
    const auto info = cuda_memory_info(device);
    if (!info) return std::nullopt;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const int64_t reserved = stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
    return std::min(info->first + reserved, info->second);
  }
#endif
  const auto available = available_memory_bytes(device);
  if (!available) return std::nullopt;
  return *available / std::max<int64_t>(ranks_on_host, 1) + held_memory_bytes(device);
}

void release_cached_memory(const c10::Device& device) {
#if SEGTRAIN_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)device;
#endif
}

nlohmann::json peak_memory_json(const PeakMemory& peak) {
  nlohmann::json out = {{"peak_rss_mb", round_tenth(peak.rss_mb)}};
  if (peak.gpu_allocated_mb) out["peak_gpu_mb"] = round_tenth(*peak.gpu_allocated_mb);
  if (peak.gpu_reserved_mb) out["peak_gpu_reserved_mb"] = round_tenth(*peak.gpu_reserved_mb);
  return out;
}

}  // namespace segtrain::trainer
