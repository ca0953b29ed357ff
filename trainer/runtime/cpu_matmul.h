#pragma once
// What bf16 autocast computes its matmuls in on the CPU. Some CPUs' PyTorch has a
// fast bf16 GEMM (AMX, AVX512-BF16: about 3x fp32 on the Xeon this project ran on until
// 2026-11), others none (an AMD CPU with torch 2.13: a bf16 linear at 2.2 GFLOP/s against
// 15 in fp32, its input-gradient 50x slower), where a bf16 run would take minutes a step. So the
// first bf16 autocast on the CPU times one bf16 and one fp32 GEMM of a projection's
// shape (forward and input-gradient) and, when bf16 is clearly the slower, autocasts to fp32
// instead: the weights stay as stored (a bf16 base stays bf16 in memory) and are cast
// to fp32 where a matmul reads them. The choice is logged once and said in the plan.
// A training run settles one choice for all its ranks and resumptions (rank 0's, recorded
// in trainer_state.json: Trainer::settle_cpu_matmul), since a loaded machine may measure
// otherwise on another rank or a later day, and a run must not change its arithmetic midway.
//
// SEGTRAIN_CPU_MATMUL=bf16|fp32 forces it (auto, the default, measures).
#include <ATen/ATen.h>

#include <optional>
#include <string>

namespace segtrain::trainer {

struct CpuGemmTimes {
  double bf16_gflops = 0;  // forward and input-gradient GEMMs together
  double fp32_gflops = 0;
};

// Where a process's choice came from.
enum class CpuMatmulSource {
  measured,     // timed here (auto)
  environment,  // SEGTRAIN_CPU_MATMUL
  resumed,      // what the run it resumes computed in (its trainer_state.json)
  rank0,        // rank 0's, which every rank of a run takes
};

struct CpuMatmul {
  at::ScalarType dtype = at::kBFloat16;  // what CPU autocast casts matmul inputs to
  CpuMatmulSource source = CpuMatmulSource::measured;
  CpuGemmTimes measured;                 // zero unless measured
};

// Times the two GEMMs at the current intra-op thread count; gives up on bf16 early
// once it is clearly the slower (a slow bf16 input-gradient would otherwise take seconds).
CpuGemmTimes time_cpu_gemms();

// bf16 unless its GEMMs are more than twice as slow as fp32's.
at::ScalarType faster_cpu_matmul_dtype(const CpuGemmTimes& times);

// SEGTRAIN_CPU_MATMUL's dtype where it forces one; nullopt where it is auto or unset;
// an InputError naming the variable for any other value.
std::optional<at::ScalarType> forced_cpu_matmul();

// The process's choice: the one set (set_cpu_matmul), else its own, made on the first call
// (measured, or from SEGTRAIN_CPU_MATMUL) and logged then unless `log_choice` is false (a
// training run's plan line says it instead).
const CpuMatmul& cpu_matmul(bool log_choice = true);

// Makes `choice` the process's (Autocast reads it each time it begins); nullopt gives it
// back its own (one process trains the experiment grid's runs one after another).
void set_cpu_matmul(const std::optional<CpuMatmul>& choice);

// "bf16" or "fp32", as trainer_state.json records the choice; and back (nullopt for
// any other name).
std::string cpu_matmul_name(at::ScalarType dtype);
std::optional<at::ScalarType> cpu_matmul_dtype(const std::string& name);

// "bf16 matmuls on the CPU (bf16 38.8 GFLOP/s, fp32 12.4)" or the fp32 fallback's line.
std::string describe(const CpuMatmul& choice);

}  // namespace segtrain::trainer
