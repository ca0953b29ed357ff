#pragma once
// What bf16 autocast computes its matmuls in on the CPU. Some CPUs' PyTorch has a
// fast bf16 GEMM (AMX, AVX512-BF16: about 3x fp32 on this project's machine), others
// none (an AMD CPU with torch 2.13: a bf16 linear at 2.2 GFLOP/s against 15 in fp32,
// its input-gradient 50x slower), where a bf16 run would take minutes a step. So the
// first bf16 autocast on the CPU times one bf16 and one fp32 GEMM of a projection's
// shape (forward and input-gradient) and, when bf16 is clearly the slower, autocasts to fp32
// instead: the weights stay as stored (a bf16 base stays bf16 in memory) and are cast
// to fp32 where a matmul reads them. The choice is logged once and said in the plan.
//
// SEGTRAIN_CPU_MATMUL=bf16|fp32 forces it (auto, the default, measures).
#include <ATen/ATen.h>

#include <string>

namespace segtrain::trainer {

struct CpuGemmTimes {
  double bf16_gflops = 0;  // forward and input-gradient GEMMs together
  double fp32_gflops = 0;
};

struct CpuMatmul {
  at::ScalarType dtype = at::kBFloat16;  // what CPU autocast casts matmul inputs to
  bool forced = false;                   // by SEGTRAIN_CPU_MATMUL rather than measured
  CpuGemmTimes measured;                 // zero when forced
};

// Times the two GEMMs at the current intra-op thread count; gives up on bf16 early
// once it is clearly the slower (a slow bf16 input-gradient would otherwise take seconds).
CpuGemmTimes time_cpu_gemms();

// bf16 unless its GEMMs are more than twice as slow as fp32's.
at::ScalarType faster_cpu_matmul_dtype(const CpuGemmTimes& times);

// The process's choice, made on the first call (measured, or from SEGTRAIN_CPU_MATMUL,
// whose bad value is an InputError naming it) and logged then unless `log_choice` is false
// (a training run's plan line says it instead).
const CpuMatmul& cpu_matmul(bool log_choice = true);

// "bf16 matmuls on the CPU (bf16 38.8 GFLOP/s, fp32 12.4)" or the fp32 fallback's line.
std::string describe(const CpuMatmul& choice);

}  // namespace segtrain::trainer
