#include "trainer/train/step_loss.h"

#include "data/sampler.h"
#include "models/modules/lm_head_loss.h"
#include "trainer/runtime/device.h"

namespace segtrain::trainer {

static_assert(data::kNoTarget == models::kIgnoreTarget, "the chunked loss ignores the targets the sampler masks");

MicroBatch to_tensors(const data::Batch& b, const c10::Device& device) {
  const std::vector<int64_t> shape = {b.batch_size, b.length};
  auto as_tensor = [&](const std::vector<int32_t>& v) {
    return at::from_blob(const_cast<int32_t*>(v.data()), shape, at::kInt).to(at::kLong);
  };
  MicroBatch m;
  at::Tensor mask = at::from_blob(const_cast<uint8_t*>(b.loss_mask.data()), shape, at::kByte).to(at::kBool);
  // A target the sampler marked as absent is never scored, whatever the mask says.
  mask = mask & (as_tensor(b.targets) != data::kNoTarget);
  m.tokens = to_device(as_tensor(b.tokens), device);
  const at::Tensor positions = as_tensor(b.positions);
  m.bounds = models::PositionBounds::of(positions);  // before the copy: on the host, no sync
  m.positions = to_device(positions, device);
  m.targets = to_device(at::where(mask, as_tensor(b.targets), at::full({}, data::kNoTarget, at::kLong)), device);
  m.loss_tokens = mask.sum().item<int64_t>();
  return m;
}

at::Tensor summed_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape(-1), {},
                                at::Reduction::Sum, data::kNoTarget);
}

at::Tensor micro_batch_loss(models::TransformerLM& model, const MicroBatch& m,
                            std::optional<int64_t> loss_chunk_tokens) {
  if (loss_chunk_tokens == 0) return summed_loss(model->forward(m.tokens, m.positions, m.bounds), m.targets);
  const at::Tensor hidden = model->hidden(m.tokens, m.positions, m.bounds), head = model->head_weight();
  const int64_t chunk = models::loss_chunk_tokens_for(loss_chunk_tokens, hidden, head);
  return models::lm_head_loss_sum(hidden, head, m.targets, chunk, data::kNoTarget);
}

}  // namespace segtrain::trainer
