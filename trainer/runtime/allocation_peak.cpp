#include "trainer/runtime/allocation_peak.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <stdexcept>
#include <utility>
#if SEGTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "trainer/runtime/memory.h"

namespace segtrain::trainer {
namespace {

// Passes every request to PyTorch's CPU allocator and counts the bytes live through it. Its
// pointers are their own context, as PyTorch's are, so that raw_allocate and raw_deallocate
// work through it too (c10d's and Gloo's threads allocate that way while a watch runs). A
// tensor made during the watch may outlive it (a gradient): its release still finds the
// counter, which lives as long as the program.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  std::atomic<c10::Allocator*> inner{nullptr};
  std::atomic<int64_t> live{0}, peak{0};

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr memory = inner.load()->allocate(n);
    void* data = memory.get();
    if (!data) return memory;  // nothing to count
    const c10::Device device = memory.device();
    const auto bytes = static_cast<int64_t>(n);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto [it, fresh] = allocations_.try_emplace(data, Allocation{std::move(memory), bytes});
      if (!fresh) {
        // The address was ours once and was freed past us (raw_deallocate through PyTorch's
        // allocator after the watch): forget it without freeing it again.
        live.fetch_sub(it->second.bytes);
        it->second.memory.release_context();
        it->second = Allocation{std::move(memory), bytes};
      }
    }
    const int64_t now = live.fetch_add(bytes) + bytes;
    for (int64_t seen = peak.load(); now > seen && !peak.compare_exchange_weak(seen, now);) {
    }
    return {data, data, &release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  struct Allocation {
    c10::DataPtr memory;  // PyTorch's own, freed when the entry goes
    int64_t bytes = 0;
  };

  static void release(void* data);

  std::mutex mutex_;
  std::unordered_map<void*, Allocation> allocations_;
};

CountingCpuAllocator& counting_cpu_allocator() {
  static auto* allocator = new CountingCpuAllocator();  // never destroyed: late releases reach it
  return *allocator;
}

void CountingCpuAllocator::release(void* data) {
  CountingCpuAllocator& counter = counting_cpu_allocator();
  c10::DataPtr memory;
  {
    std::lock_guard<std::mutex> lock(counter.mutex_);
    if (auto it = counter.allocations_.find(data); it != counter.allocations_.end()) {
      counter.live.fetch_sub(it->second.bytes);
      memory = std::move(it->second.memory);
      counter.allocations_.erase(it);
    }
  }
  // Freed outside the lock (a deleter may allocate). Not found: PyTorch's own allocation, handed
  // back raw while the watch runs, PyTorch's to free.
  if (!memory) {
    if (const auto deleter = counter.inner.load()->raw_deleter()) deleter(data);
  }
}

// The highest priority, so that the swap takes whatever priority the allocator in place had.
constexpr uint8_t kSwapPriority = 255;

}  // namespace

AllocationPeak::AllocationPeak(const c10::Device& device) : device_(device) {
#if SEGTRAIN_WITH_CUDA
  if (device.is_cuda()) {
    start_ = held_memory_bytes(device);
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
    return;
  }
#endif
  CountingCpuAllocator& counter = counting_cpu_allocator();
  if (c10::GetCPUAllocator() == &counter) throw std::logic_error("AllocationPeak: one CPU watch at a time");
  replaced_ = c10::GetCPUAllocator();
  counter.inner.store(replaced_);
  // Tensors of an earlier watch may still be live (and released during this one): counted from here.
  start_ = counter.live.load();
  counter.peak.store(start_);
  c10::SetCPUAllocator(&counter, kSwapPriority);
}

AllocationPeak::~AllocationPeak() {
  if (replaced_) c10::SetCPUAllocator(replaced_, kSwapPriority);
}

int64_t AllocationPeak::bytes() const {
#if SEGTRAIN_WITH_CUDA
  if (device_.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
    const int64_t peak = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
    return std::max<int64_t>(peak - start_, 0);
  }
#endif
  return std::max<int64_t>(counting_cpu_allocator().peak.load() - start_, 0);
}

}  // namespace segtrain::trainer
