#include "gpu/gpu_suite.h"

#include <cstdlib>
#include <fstream>
#include <iostream>

namespace segtrain::test {

std::string device_under_test() {
  const char* v = std::getenv("SEGTRAIN_GPU_TEST_DEVICE");
  return v && *v ? v : "cuda";
}

// With the CPU as the device, a bf16 run's matmul dtype is measured by each process
// (trainer/runtime/cpu_matmul.h), and two runs a test compares byte for byte can measure
// differently on a loaded machine: one of 8 such runs at once on 2 cores took fp32 beside the
// others' bf16. The suite fixes it for itself and every run it starts (unless set already).
static const bool kCpuMatmulFixed = [] {
  if (device_under_test() == "cpu") setenv("SEGTRAIN_CPU_MATMUL", "fp32", /*overwrite=*/0);
  return true;
}();

void record(const std::string& line) {
  std::cout << line << "\n";
  if (const char* file = std::getenv("SEGTRAIN_GPU_TEST_REPORT"); file && *file)
    std::ofstream(file, std::ios::app) << line << "\n";
}

}  // namespace segtrain::test
