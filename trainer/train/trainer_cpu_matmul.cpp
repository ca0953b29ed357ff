// The Trainer's CPU matmul dtype (trainer_class.h): what bf16 autocast on the CPU computes its
// matmuls in (trainer/runtime/cpu_matmul.h), one choice for a run's ranks and its resumptions.
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "trainer/runtime/cpu_matmul.h"
#include "trainer/train/rank_failure.h"
#include "trainer/train/trainer_class.h"

namespace segtrain::trainer {

// One matmul dtype for bf16 autocast on the CPU (cpu_matmul.h; training's or evaluation's), on every
// rank and across resumptions: rank 0's (SEGTRAIN_CPU_MATMUL's, else what the run it resumes recorded,
// else measured), recorded with each checkpoint. Before the batch is sized: its measuring pass autocasts.
void Trainer::settle_cpu_matmul() {
  const std::string recorded = std::exchange(state_.cpu_matmul, "");
  set_cpu_matmul(std::nullopt);  // not an earlier grid run's
  const bool autocasts = c_.train.precision == Precision::bf16 || evaluates_in_bf16(c_.eval, c_.train.precision);
  if (!device_.is_cpu() || !autocasts) return;
  std::optional<at::ScalarType> forced;
  at::ScalarType chosen = at::kBFloat16;
  // An unknown SEGTRAIN_CPU_MATMUL on any rank stops every rank, none waiting in the agreement below.
  const RankFailure failure = kept_failure(group_ != nullptr, [&] {
    forced = forced_cpu_matmul();
    if (dist_.rank != 0) return;
    if (forced) set_cpu_matmul(CpuMatmul{*forced, CpuMatmulSource::environment, {}});
    else if (const auto resumed = cpu_matmul_dtype(recorded))  // state_from_json took only bf16 or fp32
      set_cpu_matmul(CpuMatmul{*resumed, CpuMatmulSource::resumed, {}});
    chosen = cpu_matmul(/*log_choice=*/false).dtype;
  });
  if (dist_.rank == 0 && forced && !recorded.empty() && cpu_matmul_name(*forced) != recorded)
    log::warn("SEGTRAIN_CPU_MATMUL=", cpu_matmul_name(*forced), ": this run computes its matmuls in ",
              cpu_matmul_name(*forced), " where the run it resumes computed them in ", recorded,
              ", so its steps will not repeat that run's exactly (unset it to go on as it did)");
  if (group_) take_rank_zeros_cpu_matmul(failure, forced, chosen);
  state_.cpu_matmul = cpu_matmul_name(cpu_matmul().dtype);
}

// Ranks whose matmuls round differently would average gradients of different arithmetic: every rank
// takes rank 0's choice. The other ranks count what their SEGTRAIN_CPU_MATMUL forced, for rank 0
// (which alone prints) to say.
void Trainer::take_rank_zeros_cpu_matmul(const RankFailure& failure, std::optional<at::ScalarType> forced,
                                         at::ScalarType chosen) {
  const auto world = static_cast<size_t>(dist_.world_size);
  const bool other = dist_.rank != 0;
  // Each rank's failure code, then: rank 0 chose bf16; ranks forced to bf16; ranks forced to fp32.
  std::vector<double> shares(world + 3, 0.0);
  shares[static_cast<size_t>(dist_.rank)] = failure.failed ? failure.code() : 0.0;
  shares[world] = !other && chosen == at::kBFloat16 ? 1.0 : 0.0;
  shares[world + 1] = other && forced == at::kBFloat16 ? 1.0 : 0.0;
  shares[world + 2] = other && forced == at::kFloat ? 1.0 : 0.0;
  const std::vector<double> sums = global_sum(shares);
  throw_if_a_rank_failed(failure, dist_.rank, {sums.begin(), sums.begin() + static_cast<std::ptrdiff_t>(world)},
                         "SEGTRAIN_CPU_MATMUL");
  const at::ScalarType agreed = sums[world] > 0.5 ? at::kBFloat16 : at::kFloat;
  if (other) set_cpu_matmul(CpuMatmul{agreed, CpuMatmulSource::rank0, {}});
  const double overruled = agreed == at::kBFloat16 ? sums[world + 2] : sums[world + 1];
  if (!other && overruled > 0.5)
    log::warn("SEGTRAIN_CPU_MATMUL=", agreed == at::kBFloat16 ? "fp32" : "bf16", " on ",
              static_cast<int64_t>(overruled), " of the other ", dist_.world_size - 1,
              " ranks: every rank computes its matmuls in ", cpu_matmul_name(agreed),
              " as rank 0 does (a run's ranks compute alike)");
}

}  // namespace segtrain::trainer
