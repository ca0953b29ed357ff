#include "trainer/runtime/allocation_peak.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <utility>
#if SEGTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "trainer/runtime/memory.h"

namespace segtrain::trainer {
namespace {

// Passes every request to PyTorch's CPU allocator and counts the bytes live through it. A
// tensor made during the watch may outlive it (a gradient): its release still finds the
// counter, which lives as long as the program.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::Allocator* inner = nullptr;
  std::atomic<int64_t> live{0}, peak{0};

  c10::DataPtr allocate(size_t n) override {
    auto* record = new Allocation{inner->allocate(n), static_cast<int64_t>(n), this};
    const int64_t now = live.fetch_add(record->bytes) + record->bytes;
    for (int64_t seen = peak.load(); now > seen && !peak.compare_exchange_weak(seen, now);) {
    }
    void* data = record->memory.get();
    const c10::Device device = record->memory.device();
    return {data, record, &release, device};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  struct Allocation {
    c10::DataPtr memory;  // PyTorch's own, freed with the record
    int64_t bytes;
    CountingCpuAllocator* owner;
  };

  static void release(void* context) {
    auto* record = static_cast<Allocation*>(context);
    record->owner->live.fetch_sub(record->bytes);
    delete record;
  }
};

CountingCpuAllocator& counting_cpu_allocator() {
  static auto* allocator = new CountingCpuAllocator();  // never destroyed: late releases reach it
  return *allocator;
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
  counter.inner = replaced_;
  counter.peak.store(0);
  counter.live.store(0);
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
  return counting_cpu_allocator().peak.load();
}

}  // namespace segtrain::trainer
