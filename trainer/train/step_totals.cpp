#include "trainer/train/step_totals.h"

#include <csignal>

#include "trainer/runtime/device.h"

namespace segtrain::trainer {

StepTotals reduce_step_totals(ProcessGroup* group, const StepShare& share, const c10::Device& device) {
  // The host's values join the device's without a wait (to_device: a pinned,
  // non-blocking copy); the sum happens where the loss is.
  std::vector<double> host_values = {share.signal == SIGTERM ? 1.0 : 0.0, share.signal == SIGINT ? 1.0 : 0.0,
                                     static_cast<double>(share.loss_tokens),
                                     share.save == SavePart::written ? 1.0 : 0.0,
                                     share.save == SavePart::failed ? 1.0 : 0.0};
  const bool by_source = share.source_loss_sums.defined();
  if (by_source)
    for (int64_t tokens : share.source_loss_tokens) host_values.push_back(static_cast<double>(tokens));
  std::vector<at::Tensor> parts = {to_device(at::tensor(host_values, at::kDouble), device),
                                   share.loss_sum.reshape({1}).to(at::kDouble),
                                   share.grad_square_sum.reshape({1}).to(at::kDouble)};
  if (by_source) parts.push_back(share.source_loss_sums.reshape({-1}).to(at::kDouble));
  at::Tensor totals = at::cat(parts);
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
  const size_t sources = by_source ? share.source_loss_tokens.size() : 0;
  for (size_t i = 0; i < sources; ++i) t.source_loss_tokens.push_back(static_cast<int64_t>(v[5 + i]));
  const double* device_values = v + host_values.size();
  t.loss_sum = device_values[0];
  t.grad_square_sum = device_values[1];
  t.source_loss_sums.assign(device_values + 2, device_values + 2 + sources);
  return t;
}

}  // namespace segtrain::trainer
