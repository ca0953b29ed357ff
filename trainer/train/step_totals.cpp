#include "trainer/train/step_totals.h"

#include <csignal>

#include "trainer/runtime/device.h"

namespace segtrain::trainer {

StepTotals reduce_step_totals(ProcessGroup* group, const StepShare& share, const c10::Device& device) {
  // The host's values join the device's without a wait (to_device: a pinned,
  // non-blocking copy); the sum happens where the loss is.
  const at::Tensor host = at::tensor({share.signal == SIGTERM ? 1.0 : 0.0, share.signal == SIGINT ? 1.0 : 0.0,
                                      static_cast<double>(share.loss_tokens),
                                      share.save == SavePart::written ? 1.0 : 0.0,
                                      share.save == SavePart::failed ? 1.0 : 0.0},
                                     at::kDouble);
  at::Tensor totals = at::cat({to_device(host, device), share.loss_sum.reshape({1}).to(at::kDouble),
                               share.grad_square_sum.reshape({1}).to(at::kDouble)});
  if (group) {
    std::vector<at::Tensor> one{totals};
    group->all_reduce_sum(one);
  }
  const at::Tensor read = totals.to(at::kCPU);  // the host round trip
  if (group) group->check_healthy();            // before any value is used
  const double* v = read.data_ptr<double>();
  StepTotals t;
  t.stop_signal = v[0] > 0 ? SIGTERM : v[1] > 0 ? SIGINT : 0;
  t.loss_tokens = static_cast<int64_t>(v[2]);
  t.saves_written = static_cast<int64_t>(v[3]);
  t.saves_failed = static_cast<int64_t>(v[4]);
  t.loss_sum = v[5];
  t.grad_square_sum = v[6];
  return t;
}

}  // namespace segtrain::trainer
