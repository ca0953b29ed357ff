// A CUPTI injection library: every kernel, memcpy and memset a process runs on its GPUs, written as CSV when
// the process exits, with no change to the program. bench/gpu_profile.py builds it (g++, against the CUPTI of
// the CUDA toolkit or of torch's nvidia-cuda-cupti wheel) and profiles `segtrain train` with it where nsys is
// absent: segtrain has no profiler hook of its own (trainer/ is not touched for a benchmark), and the CUDA
// driver loads a library named by CUDA_INJECTION64_PATH into any process at cuInit and calls its
// InitializeInjection(), as nsys does with its own.
//
//   CUDA_INJECTION64_PATH=libcupti_kernel_trace.so SEGTRAIN_KERNEL_TRACE=trace.csv segtrain train ...
//
// trace.csv: kind,start_ns,end_ns,name (kind: kernel, memcpy, memset; the kernel's demangled name; a memcpy
// named by its direction); a last row "dropped,0,0,N" when CUPTI dropped N records (its buffers were full).
#include <cupti.h>
#include <cxxabi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

#if CUPTI_API_VERSION >= 130000
using KernelRecord = CUpti_ActivityKernel10;
using MemcpyRecord = CUpti_ActivityMemcpy6;
using MemsetRecord = CUpti_ActivityMemset4;
#else  // CUDA 12 (not tried: the GPU images this project is lent have CUDA 13)
using KernelRecord = CUpti_ActivityKernel9;
using MemcpyRecord = CUpti_ActivityMemcpy5;
using MemsetRecord = CUpti_ActivityMemset4;
#endif

struct Row {
  const char* kind;
  uint64_t start;
  uint64_t end;
  std::string name;
};

constexpr size_t kBufferBytes = size_t{8} << 20;
std::mutex rows_mutex;
std::vector<Row> rows;
size_t dropped = 0;

std::string demangle(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  char* readable = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && readable != nullptr ? readable : name;
  std::free(readable);
  return out;
}

const char* memcpy_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "Memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "Memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "Memcpy DtoD";
    default: return "Memcpy";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  std::vector<Row> got;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const KernelRecord*>(record);
      got.push_back({"kernel", k->start, k->end, demangle(k->name)});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const MemcpyRecord*>(record);
      got.push_back({"memcpy", m->start, m->end, memcpy_name(m->copyKind)});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const MemsetRecord*>(record);
      got.push_back({"memset", m->start, m->end, "Memset"});
    }
  }
  size_t lost = 0;
  cuptiActivityGetNumDroppedRecords(context, stream, &lost);
  std::free(buffer);
  const std::lock_guard<std::mutex> lock(rows_mutex);
  dropped += lost;
  for (auto& row : got) rows.push_back(std::move(row));
}

void write_trace() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const char* path = std::getenv("SEGTRAIN_KERNEL_TRACE");
  std::FILE* out = std::fopen(path != nullptr ? path : "kernel_trace.csv", "w");
  if (out == nullptr) {
    std::fprintf(stderr, "cupti_kernel_trace: cannot write %s\n", path != nullptr ? path : "kernel_trace.csv");
    return;
  }
  const std::lock_guard<std::mutex> lock(rows_mutex);
  std::fprintf(out, "kind,start_ns,end_ns,name\n");
  for (const auto& row : rows) {
    std::string name;  // CSV: the name quoted, its quotes doubled
    for (const char c : row.name) name += c == '"' ? std::string("\"\"") : std::string(1, c);
    std::fprintf(out, "%s,%llu,%llu,\"%s\"\n", row.kind, static_cast<unsigned long long>(row.start),
                 static_cast<unsigned long long>(row.end), name.c_str());
  }
  if (dropped > 0) std::fprintf(out, "dropped,0,0,%zu\n", dropped);
  std::fclose(out);
}

}  // namespace

extern "C" int InitializeInjection(void) {
  static std::once_flag once;
  static int ok = 0;
  std::call_once(once, [] {
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return;
    if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return;
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    std::atexit(write_trace);
    ok = 1;
  });
  return ok;
}
