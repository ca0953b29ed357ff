#pragma once
// Perplexity by length (Karypis et al. 2024, 4.5): windows of exactly L tokens from the
// documents of a split that have at least L tokens, non-overlapping unless a
// sliding stride is given; each window is scored on its L-1 next-token
// predictions, as transformers scores `model(ids, labels=ids)`.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data/token_store.h"
#include "models/modules/transformer.h"
#include "trainer/config/config.h"
#include "trainer/eval/window_loss.h"

namespace segtrain::trainer {

struct PerplexityOptions {
  std::vector<int64_t> lengths;
  int64_t max_sequences = 0;  // per length; 0: all windows
  int64_t windows_per_document = 0;  // 0: every window of a document; 1: each window from another document
  // Windows before this one (in the order max_sequences takes them) are left out: an
  // earlier evaluation with a lower max_sequences scored them (append_windows joins both).
  int64_t first_window = 0;
  int64_t stride = 0;         // 0: non-overlapping; else windows every `stride` tokens
  int64_t batch_size = EvalConfig{}.batch_size;  // eval.batch_size's default, one home
  bool per_position = false;
  // Also keep each window's loss in blocks of kLossBlock predictions (LengthResult::windows):
  // what intervals over windows and positions are computed from.
  bool per_window = false;
  // 0: windows of each length. Else every length is scored on the first L tokens
  // of the same windows of window_length tokens (>= every length; non-overlapping
  // only), so that all lengths, and every model evaluated so, see the same text.
  // A model whose positions do not depend on the input's length runs one forward
  // over the first max(lengths) tokens of a window and each length is read off its
  // prefix (causal attention: the same figures); others run one forward a length.
  int64_t window_length = 0;
  // Tokens per slice of the LM head and cross-entropy (train.loss_chunk_tokens):
  // nullopt auto, 0 the whole logits at once (models/modules/lm_head_loss.h).
  std::optional<int64_t> loss_chunk_tokens;
  // Called between batches; throws Interrupted to stop. Empty: throw_if_stopped(),
  // this process's own signal. A distributed run passes a check all ranks agree on
  // (they evaluate the same windows in the same order, so they call it equally often).
  std::function<void()> check_stop;
};

struct LengthResult {
  int64_t length = 0;
  double loss = 0;  // mean negative log-likelihood per scored token (nats)
  double ppl = 0;
  int64_t sequences = 0;
  int64_t tokens = 0;  // scored tokens
  // Mean loss at each position 1..L-1 (index p-1), when per_position.
  std::vector<double> position_loss;
  // Each window's loss by block, when per_window (non-overlapping windows only).
  std::vector<WindowLoss> windows;
};

std::vector<LengthResult> evaluate(models::TransformerLM& model, const data::IndexedDataset& split,
                                   const PerplexityOptions& options);

// `earlier`'s results followed, length by length, by `later`'s windows (an evaluation of
// the same lengths from first_window = earlier's window count): loss, perplexity, token
// and window counts and the loss by position of all the windows together. Both need
// per-window losses; exit 2 when their lengths differ.
std::vector<LengthResult> append_windows(const std::vector<LengthResult>& earlier,
                                         const std::vector<LengthResult>& later);

// How many windows evaluate() reads at `length` (what a plan line says an evaluation costs).
int64_t perplexity_windows(const data::IndexedDataset& split, int64_t length, const PerplexityOptions& options);

// eval.lengths, max_sequences, stride, batch_size and per_position of a run config,
// and its train.loss_chunk_tokens (nullopt: auto).
PerplexityOptions perplexity_options(const EvalConfig& eval, std::optional<int64_t> loss_chunk_tokens = std::nullopt);

}  // namespace segtrain::trainer
