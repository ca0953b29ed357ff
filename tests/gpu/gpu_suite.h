#pragma once
// The GPU suite, one binary (gpu_test) of a file a concept: one_step_test.cpp (an optimizer step of
// each architecture on the device against the CPU), fused_kernels_test.cpp (the project's CUDA kernels
// against ATen's composites), long_attention_test.cpp, device_run_test.cpp (whole runs of the binary),
// captured_step_test.cpp (SEGTRAIN_CUDA_GRAPH's runs against the ordinary step's) and two_ranks_test.cpp. ctest label `gpu`; `make gpu-check` runs it. Every test needs the device under
// test, SEGTRAIN_GPU_TEST_DEVICE (default cuda); without a visible CUDA device each test reports itself
// SKIPPED, which ctest shows as "Skipped", never as passed. With SEGTRAIN_GPU_TEST_DEVICE=cpu the same
// tests run on the CPU (ctest `gpu_suite_on_cpu`, in `make test`): that proves the tests themselves work
// on machines without a GPU.
#include <torch/cuda.h>

#include <string>

#include "test_util.h"

namespace segtrain::test {

// "cuda" or "cpu": the device the tests put against the CPU reference.
std::string device_under_test();

// A figure a test measured (a difference from the CPU, a count): printed, and
// appended as one line to the file SEGTRAIN_GPU_TEST_REPORT names when it is set
// (scripts/gpu_check.sh puts them in its report; ctest shows a passed test's
// output only with -V).
void record(const std::string& line);

}  // namespace segtrain::test

// Skips the calling test unless the device under test (and `gpus` of them) is there.
#define REQUIRE_DEVICE(gpus)                                                                                    \
  do {                                                                                                          \
    if (segtrain::test::device_under_test() == "cuda") {                                                        \
      if (!SEGTRAIN_WITH_CUDA) SKIP_NOT_APPLICABLE("this build has no CUDA");                                   \
      if (!torch::cuda::is_available()) SKIP_NOT_APPLICABLE("no CUDA device is visible to this process");       \
      if (static_cast<int64_t>(torch::cuda::device_count()) < (gpus))                                           \
        SKIP_NOT_APPLICABLE("needs " << (gpus) << " CUDA devices, " /* an int8 DeviceIndex streams as a char */ \
                            << static_cast<int>(torch::cuda::device_count()) << " visible");                    \
    }                                                                                                           \
  } while (0)
