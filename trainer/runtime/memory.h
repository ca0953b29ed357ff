#pragma once
// Peak memory of this process, as metrics.jsonl, eval.json and the benchmarks
// report it: the resident set on every device, and on CUDA the caching
// allocator's peaks (what torch.cuda.max_memory_allocated/reserved report).
#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>

namespace segtrain::trainer {

struct PeakMemory {
  double rss_mb = 0;                           // peak resident set of the process (VmHWM), MiB
  std::optional<double> gpu_allocated_mb;      // CUDA: peak bytes held by tensors since the last reset
  std::optional<double> gpu_reserved_mb;       // CUDA: peak bytes the allocator reserved from the driver
};

PeakMemory peak_memory(const c10::Device& device);

// Starts the CUDA peaks afresh (a run's own peak, not an earlier command's); no-op on CPU.
void reset_peak_memory(const c10::Device& device);

// The bytes a command can still take on `device` before it runs out: the system's
// MemAvailable (/proc/meminfo) on the CPU, the GPU's free memory on CUDA;
// nullopt where neither can be read.
std::optional<int64_t> available_memory_bytes(const c10::Device& device);

// What this process holds on `device` now: the bytes its tensors take on a GPU (the caching
// allocator's count), its resident set (VmRSS) on the CPU.
int64_t held_memory_bytes(const c10::Device& device);

// The memory a process may fill on `device`: on a GPU what is free now plus what this process's
// allocator already reserved (its total where nothing else uses it); on the CPU this process's
// share of what the host has available now (`ranks_on_host` processes share it) plus what it
// already holds; nullopt where it cannot be read.
std::optional<int64_t> device_memory_bytes(const c10::Device& device, int64_t ranks_on_host = 1);

// Hands the caching allocator's unused blocks back to the driver (after an out-of-memory
// that a caller recovers from); no-op on the CPU.
void release_cached_memory(const c10::Device& device);

// {"peak_rss_mb", and on CUDA "peak_gpu_mb", "peak_gpu_reserved_mb"}, rounded to 0.1 MiB.
nlohmann::json peak_memory_json(const PeakMemory& peak);

}  // namespace segtrain::trainer
