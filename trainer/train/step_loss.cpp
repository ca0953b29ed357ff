#include "trainer/train/step_loss.h"

#include <vector>

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
  const size_t sources = b.step_samples.size();
  if (sources > 1) {
    const at::Tensor row_tokens = mask.sum(1);  // host tensors: no device read
    const auto counts = row_tokens.accessor<int64_t, 1>();
    m.source_loss_tokens.assign(sources, 0);
    at::Tensor one_hot = at::zeros({b.batch_size, static_cast<int64_t>(sources)}, at::kFloat);
    auto cell = one_hot.accessor<float, 2>();
    for (int64_t r = 0; r < b.batch_size; ++r) {
      const int32_t source = b.sources[static_cast<size_t>(r)];
      cell[r][source] = 1.0F;
      m.source_loss_tokens[static_cast<size_t>(source)] += counts[r];
    }
    m.source_one_hot = to_device(one_hot, device);
  }
  return m;
}

at::Tensor summed_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape(-1), {},
                                at::Reduction::Sum, data::kNoTarget);
}

namespace {

// Each source's part of a mixture's loss: its samples' token losses, added up (a product with the
// one-hot rows, not index_add_, whose atomic adds on CUDA vary in the last bits from run to run).
at::Tensor by_source(const MicroBatch& m, const at::Tensor& token_nll) {
  return (m.source_one_hot * token_nll.sum(1).unsqueeze(1)).sum(0);
}

}  // namespace

MicroBatchLoss micro_batch_loss(models::TransformerLM& model, const MicroBatch& m,
                                std::optional<int64_t> loss_chunk_tokens) {
  const bool mixture = m.source_one_hot.defined();
  if (loss_chunk_tokens == 0) {
    const at::Tensor logits = model->forward(m.tokens, m.positions, m.bounds);
    if (!mixture) return {summed_loss(logits, m.targets), {}};
    const at::Tensor token_nll = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat),
                                                        m.targets.reshape(-1), {}, at::Reduction::None,
                                                        data::kNoTarget)
                                     .view(m.targets.sizes());
    return {token_nll.sum(), by_source(m, token_nll.detach())};
  }
  const at::Tensor hidden = model->hidden(m.tokens, m.positions, m.bounds), head = model->head_weight();
  const int64_t chunk = models::loss_chunk_tokens_for(loss_chunk_tokens, hidden, head);
  if (!mixture) return {models::lm_head_loss_sum(hidden, head, m.targets, chunk, data::kNoTarget), {}};
  const models::LmHeadLoss loss = models::lm_head_loss(hidden, head, m.targets, chunk, data::kNoTarget);
  return {loss.sum, by_source(m, loss.token_nll)};
}

}  // namespace segtrain::trainer
