#include "trainer/eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/signals.h"
#include "models/modules/lm_head_loss.h"
#include "models/modules/positions.h"
#include "trainer/config/eval_rules.h"
#include "trainer/eval/eval_mode.h"

namespace segtrain::trainer {
namespace {

struct Window {
  int64_t doc, start;
  int64_t scored_from;  // first position (1-based prediction index) that counts
};

// Non-overlapping: floor(len / L) windows per document. Sliding: a window every
// `stride` tokens while it fits; after the first, only its last `stride`
// predictions are new and scored, so each token is scored once. At most
// `per_document` windows of one document (0: all).
std::vector<Window> windows_for(const data::IndexedDataset& split, int64_t length, int64_t stride,
                                int64_t max_sequences, int64_t per_document) {
  std::vector<Window> out;
  for (int64_t doc = 0; doc < split.documents(); ++doc) {
    const int64_t n = split.length(doc);
    if (n < length) continue;
    const size_t first = out.size();
    if (stride <= 0) {
      for (int64_t start = 0; start + length <= n; start += length) out.push_back({doc, start, 1});
    } else {
      out.push_back({doc, 0, 1});
      for (int64_t start = stride; start + length <= n; start += stride)
        out.push_back({doc, start, length - stride});
    }
    if (per_document > 0 && out.size() - first > static_cast<size_t>(per_document)) out.resize(first + per_document);
    if (max_sequences > 0 && static_cast<int64_t>(out.size()) >= max_sequences) break;
  }
  if (max_sequences > 0 && static_cast<int64_t>(out.size()) > max_sequences) out.resize(max_sequences);
  return out;
}

// Sums of `count` predictions' losses in blocks of `block` (the last block holds the rest).
std::vector<double> block_sums(const double* nll, int64_t count, int64_t block) {
  std::vector<double> out;
  for (int64_t first = 0; first < count; first += block) {
    double sum = 0;
    for (int64_t i = first; i < std::min(count, first + block); ++i) sum += nll[i];
    out.push_back(sum);
  }
  return out;
}

// Shared windows (window_length) need non-overlapping windows no shorter than every length.
void check_shared_windows(const PerplexityOptions& options) {
  if (options.stride > 0)
    throw InputError("perplexity on the first L tokens of shared windows needs non-overlapping windows (stride 0)");
  for (int64_t length : options.lengths)
    if (length > options.window_length)
      throw InputError("evaluation length " + std::to_string(length) + " is longer than the windows (" +
                       std::to_string(options.window_length) + ")");
}

// The result at `length` read off `whole`, the longest windows scored with every
// prediction kept (per-position curve and per-window blocks of 1): causal attention
// makes a window's first L-1 predictions those of its first L tokens.
LengthResult prefix_result(const LengthResult& whole, int64_t length, bool per_position) {
  if (length < 2) throw InputError("evaluation length " + std::to_string(length) + " is below 2");
  LengthResult r;
  r.length = length;
  r.sequences = whole.sequences;
  r.tokens = whole.sequences * (length - 1);
  // Every window scores every position, so the mean over positions is the mean over tokens.
  double sum = 0;
  for (int64_t p = 0; p < length - 1; ++p) sum += whole.position_loss[p];
  r.loss = whole.sequences ? sum / static_cast<double>(length - 1) : std::numeric_limits<double>::quiet_NaN();
  r.ppl = std::exp(r.loss);
  if (per_position) r.position_loss.assign(whole.position_loss.begin(), whole.position_loss.begin() + (length - 1));
  for (const auto& w : whole.windows)  // each window's first L-1 predictions, in blocks
    r.windows.push_back({w.doc, w.start, block_sums(w.block_nll.data(), length - 1, kLossBlock)});
  return r;
}

std::vector<LengthResult> evaluate_blocks(models::TransformerLM& model, const data::IndexedDataset& split,
                                          const PerplexityOptions& options, int64_t block);

}  // namespace

std::vector<LengthResult> evaluate(models::TransformerLM& model, const data::IndexedDataset& split,
                                   const PerplexityOptions& options) {
  return evaluate_blocks(model, split, options, kLossBlock);
}

namespace {

// evaluate(), keeping each window's loss in blocks of `block` predictions when
// options.per_window (1: every prediction, which the prefixes of a longest window are cut from).
std::vector<LengthResult> evaluate_blocks(models::TransformerLM& model, const data::IndexedDataset& split,
                                          const PerplexityOptions& options, int64_t block) {
  const EvalMode eval_mode(model);
  const auto device = model->parameters().front().device();
  if (options.window_length > 0) check_shared_windows(options);
  if (options.window_length > 0 && options.lengths.size() > 1 && !models::positions_depend_on_length(model->config())) {
    PerplexityOptions longest = options;
    longest.per_position = true;
    longest.lengths = {*std::max_element(options.lengths.begin(), options.lengths.end())};
    const LengthResult whole = evaluate_blocks(model, split, longest, 1).front();
    std::vector<LengthResult> results;
    for (int64_t length : options.lengths) results.push_back(prefix_result(whole, length, options.per_position));
    return results;
  }
  throw_first(window_problems(options.stride, options.lengths));  // trainer/config/eval_rules.h
  std::vector<LengthResult> results;
  for (int64_t length : options.lengths) {
    if (length < 2) throw InputError("evaluation length " + std::to_string(length) + " is below 2");
    LengthResult r;
    r.length = length;
    const int64_t window = options.window_length > 0 ? options.window_length : length;
    auto windows = windows_for(split, window, options.stride, options.max_sequences, options.windows_per_document);
    windows.erase(windows.begin(), windows.begin() + std::min<int64_t>(options.first_window, windows.size()));
    if (options.per_window && options.stride > 0)
      throw InputError("per-window losses need non-overlapping windows (stride 0)");
    std::vector<double> position_sum(length - 1, 0.0);
    std::vector<int64_t> position_count(length - 1, 0);
    double total = 0;
    Progress progress("eval: perplexity at L = " + std::to_string(length), static_cast<int64_t>(windows.size()),
                      "windows");
    for (size_t first = 0; first < windows.size(); first += options.batch_size) {
      // A stop is noted only under OnSignal::stop_at_checkpoint (training, the grid).
      if (options.check_stop) options.check_stop();
      else throw_if_stopped();
      const int64_t b = std::min<int64_t>(options.batch_size, windows.size() - first);
      at::Tensor tokens = at::empty({b, length}, at::kInt);
      at::Tensor scored = at::zeros({b, length - 1}, at::kBool);
      for (int64_t i = 0; i < b; ++i) {
        const Window& w = windows[first + i];
        split.copy(w.doc, w.start, length, tokens[i].data_ptr<int32_t>());
        scored[i].narrow(0, w.scored_from - 1, length - w.scored_from).fill_(true);
      }
      tokens = tokens.to(at::kLong);
      at::Tensor positions = at::arange(length, at::kLong).unsqueeze(0).expand({b, length}).contiguous();
      // Read on the host, before the copy: the forward then never syncs with the device.
      const auto bounds = models::PositionBounds::of(positions);
      const at::Tensor targets = tokens.narrow(1, 1, length - 1).to(device);
      at::Tensor nll;
      if (options.loss_chunk_tokens == 0) {
        at::Tensor logits = model->forward(tokens.to(device), positions.to(device), bounds).to(at::kFloat);
        nll = at::cross_entropy_loss(logits.narrow(1, 0, length - 1).reshape({-1, logits.size(2)}),
                                     targets.reshape(-1), {}, at::Reduction::None);
      } else {
        at::Tensor hidden = model->hidden(tokens.to(device), positions.to(device), bounds).narrow(1, 0, length - 1);
        const int64_t chunk = models::loss_chunk_tokens_for(options.loss_chunk_tokens, hidden, model->head_weight());
        nll = models::lm_head_nll(hidden, model->head_weight(), targets, chunk);
      }
      nll = nll.view({b, length - 1}).cpu().to(at::kDouble);
      at::Tensor mask = scored.to(at::kDouble);
      total += (nll * mask).sum().item<double>();
      r.tokens += scored.sum().item<int64_t>();
      r.sequences += b;
      if (options.per_window)
        for (int64_t i = 0; i < b; ++i) {
          const at::Tensor row = nll[i].contiguous();
          r.windows.push_back({windows[first + i].doc, windows[first + i].start,
                               block_sums(row.data_ptr<double>(), length - 1, block)});
        }
      progress.update(static_cast<int64_t>(first) + b);
      if (options.per_position) {
        at::Tensor sums = (nll * mask).sum(0), counts = scored.sum(0);
        auto s = sums.accessor<double, 1>();
        auto c = counts.accessor<int64_t, 1>();
        for (int64_t p = 0; p < length - 1; ++p) position_sum[p] += s[p], position_count[p] += c[p];
      }
    }
    if (r.tokens == 0 && options.first_window > 0) {
      r.loss = r.ppl = std::numeric_limits<double>::quiet_NaN();  // no window past the recorded ones
    } else if (r.tokens == 0) {
      log::warn("eval: no validation document has ", length, " tokens; length ", length, " is reported as null");
      r.loss = r.ppl = std::numeric_limits<double>::quiet_NaN();
    } else {
      r.loss = total / static_cast<double>(r.tokens);
      r.ppl = std::exp(r.loss);
    }
    if (options.per_position)
      for (int64_t p = 0; p < length - 1; ++p)
        r.position_loss.push_back(position_count[p] ? position_sum[p] / position_count[p]
                                                    : std::numeric_limits<double>::quiet_NaN());
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace

std::vector<LengthResult> append_windows(const std::vector<LengthResult>& earlier,
                                         const std::vector<LengthResult>& later) {
  if (earlier.size() != later.size())
    throw InputError("windows are added to a perplexity record of " + std::to_string(earlier.size()) +
                     " lengths from one of " + std::to_string(later.size()));
  std::vector<LengthResult> out;
  for (size_t i = 0; i < earlier.size(); ++i) {
    const LengthResult &a = earlier[i], &b = later[i];
    if (a.length != b.length || a.windows.size() != static_cast<size_t>(a.sequences) ||
        b.windows.size() != static_cast<size_t>(b.sequences))
      throw InputError("windows are added to a perplexity record at L = " + std::to_string(a.length) + " from L = " +
                       std::to_string(b.length) + ", or one of them has no per-window losses");
    LengthResult r = a;
    if (b.sequences == 0) {  // the split holds no window past the recorded ones
      out.push_back(std::move(r));
      continue;
    }
    r.windows.insert(r.windows.end(), b.windows.begin(), b.windows.end());
    r.sequences = a.sequences + b.sequences;
    r.tokens = a.tokens + b.tokens;
    // From the two means, kept unrounded (a record's block losses are rounded to 1e-6 nats).
    r.loss = r.tokens ? (a.loss * static_cast<double>(a.tokens) + b.loss * static_cast<double>(b.tokens)) /
                            static_cast<double>(r.tokens)
                      : std::numeric_limits<double>::quiet_NaN();
    r.ppl = std::exp(r.loss);
    // Each position's mean, weighted by the windows each mean is over (every window scores every position).
    if (a.position_loss.size() == b.position_loss.size())
      for (size_t p = 0; p < r.position_loss.size(); ++p)
        r.position_loss[p] = (a.position_loss[p] * static_cast<double>(a.sequences) +
                              b.position_loss[p] * static_cast<double>(b.sequences)) /
                             static_cast<double>(r.sequences);
    else
      r.position_loss.clear();
    out.push_back(std::move(r));
  }
  return out;
}

int64_t perplexity_windows(const data::IndexedDataset& split, int64_t length, const PerplexityOptions& options) {
  const int64_t window = options.window_length > 0 ? options.window_length : length;
  const auto all = windows_for(split, window, options.stride, options.max_sequences, options.windows_per_document);
  return std::max<int64_t>(0, static_cast<int64_t>(all.size()) - options.first_window);
}

PerplexityOptions perplexity_options(const EvalConfig& eval, std::optional<int64_t> loss_chunk_tokens) {
  return {.lengths = eval.lengths,
          .max_sequences = eval.max_sequences.value_or(kEvalWindows),
          .windows_per_document = eval.windows_per_document,
          .stride = eval.stride,
          .batch_size = eval.batch_size,
          .per_position = eval.per_position,
          .loss_chunk_tokens = loss_chunk_tokens,
          .check_stop = nullptr};
}

}  // namespace segtrain::trainer
