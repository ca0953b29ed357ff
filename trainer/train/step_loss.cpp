#include "trainer/train/step_loss.h"

#include <utility>
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
    std::vector<std::vector<int64_t>> rows(sources);
    m.source_loss_tokens.assign(sources, 0);
    for (int64_t r = 0; r < b.batch_size; ++r) {
      const auto s = static_cast<size_t>(b.sources[static_cast<size_t>(r)]);
      rows[s].push_back(r);
      m.source_loss_tokens[s] += row_tokens[r].item<int64_t>();
    }
    m.source_rows.resize(sources);
    for (size_t s = 0; s < sources; ++s)
      if (!rows[s].empty()) m.source_rows[s] = to_device(at::tensor(rows[s], at::kLong), device);
  }
  return m;
}

at::Tensor summed_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape(-1), {},
                                at::Reduction::Sum, data::kNoTarget);
}

namespace {

// The sources with samples in the micro-batch (none listed for a single source).
std::vector<size_t> present_sources(const MicroBatch& m) {
  std::vector<size_t> present;
  for (size_t s = 0; s < m.source_rows.size(); ++s)
    if (m.source_rows[s].defined()) present.push_back(s);
  return present;
}

// A loss summed over the micro-batch whose rows are all of one source (or of a single store).
MicroBatchLoss of_one_source(at::Tensor sum, const MicroBatch& m, const std::vector<size_t>& present) {
  MicroBatchLoss loss{std::move(sum), {}};
  if (!present.empty()) {
    loss.by_source = at::zeros({static_cast<int64_t>(m.source_rows.size())}, loss.sum.options());
    loss.by_source.narrow(0, static_cast<int64_t>(present[0]), 1).copy_(loss.sum.detach().reshape({1}));
  }
  return loss;
}

// Sums each present source's part apart (part(rows) gives the loss summed over those rows); the
// total is their sum.
template <class Part>
MicroBatchLoss by_sources(const MicroBatch& m, const std::vector<size_t>& present, const Part& part) {
  std::vector<at::Tensor> parts;
  for (size_t s : present) parts.push_back(part(m.source_rows[s]));
  MicroBatchLoss loss{at::stack(parts).sum(), {}};
  loss.by_source = at::zeros({static_cast<int64_t>(m.source_rows.size())}, loss.sum.options());
  for (size_t i = 0; i < present.size(); ++i)
    loss.by_source.narrow(0, static_cast<int64_t>(present[i]), 1).copy_(parts[i].detach().reshape({1}));
  return loss;
}

}  // namespace

MicroBatchLoss micro_batch_loss(models::TransformerLM& model, const MicroBatch& m,
                                std::optional<int64_t> loss_chunk_tokens) {
  const std::vector<size_t> present = present_sources(m);
  if (loss_chunk_tokens == 0) {
    const at::Tensor logits = model->forward(m.tokens, m.positions, m.bounds);
    if (present.size() <= 1) return of_one_source(summed_loss(logits, m.targets), m, present);
    // Each sample's loss, then each source's rows of those (not a copy of the logits' rows).
    const at::Tensor per_sample =
        at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), m.targets.reshape(-1), {},
                               at::Reduction::None, data::kNoTarget)
            .reshape(m.targets.sizes())
            .sum(1);
    return by_sources(m, present, [&](const at::Tensor& rows) { return per_sample.index_select(0, rows).sum(); });
  }
  const at::Tensor hidden = model->hidden(m.tokens, m.positions, m.bounds), head = model->head_weight();
  const int64_t chunk = models::loss_chunk_tokens_for(loss_chunk_tokens, hidden, head);
  if (present.size() <= 1)
    return of_one_source(models::lm_head_loss_sum(hidden, head, m.targets, chunk, data::kNoTarget), m, present);
  // Each source's hidden states gathered for the head: the logits are still never whole.
  return by_sources(m, present, [&](const at::Tensor& rows) {
    return models::lm_head_loss_sum(hidden.index_select(0, rows), head, m.targets.index_select(0, rows), chunk,
                                    data::kNoTarget);
  });
}

}  // namespace segtrain::trainer
