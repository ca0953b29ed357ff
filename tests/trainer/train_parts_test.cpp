// The pieces of a training step and of evaluation, against direct computations;
// the overlapped gradient all-reduce against a stand-in process group.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <set>
#include <tuple>

#include "common/error.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/token_store.h"
#include "models/modules/transformer.h"
#include "test_util.h"
#include "tiny_models.h"
#include "trainer/eval/perplexity.h"
#include "trainer/runtime/device.h"
#include "trainer/train/distributed.h"
#include "trainer/train/flat_buckets.h"
#include "trainer/train/gradient_sync.h"
#include "trainer/train/optimizer.h"
#include "trainer/train/sharded_optimizer.h"
#include "trainer/train/step_loss.h"

namespace segtrain::trainer {
namespace {

models::ModelConfig tiny(models::Arch arch, int64_t vocab = 32, int64_t positions = 64) {
  return test::tiny_model_config(arch, vocab, positions);
}

// A uint16 split at `prefix` of documents of `lengths` tokens, each id below `vocab`
// drawn from std::mt19937(seed).
data::IndexedDataset random_split(const std::string& prefix, int64_t vocab, uint32_t seed,
                                  std::initializer_list<int64_t> lengths) {
  {
    data::IndexedDatasetWriter writer(prefix, data::TokenDtype::uint16);
    std::mt19937 rng(seed);
    for (int64_t length : lengths) {
      std::vector<int32_t> doc(length);
      for (auto& t : doc) t = static_cast<int32_t>(rng() % vocab);
      writer.add_document(doc);
    }
    writer.finish();
  }
  return data::IndexedDataset::open(prefix, vocab);
}

// Evaluation at `lengths`, `batch_size` windows a batch, with the loss at every position.
PerplexityOptions per_position_options(const std::vector<int64_t>& lengths, int64_t batch_size) {
  PerplexityOptions options;
  options.lengths = lengths;
  options.batch_size = batch_size;
  options.per_position = true;
  return options;
}

TEST(TrainStep, OverfitsATinyBatchUntilTheLossIsNearZero) {
  for (auto arch : {models::Arch::gpt2, models::Arch::gpt_neox, models::Arch::bloom, models::Arch::llama}) {
    torch::manual_seed(0);
    auto config = tiny(arch);
    if (arch == models::Arch::llama) config.n_kv_heads = 2;  // grouped-query attention from scratch
    models::TransformerLM model(config);
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
    AdamWOptions o;
    o.weight_decay = 0;
    FusedAdamW optimizer(named, o);
    at::Tensor tokens = torch::randint(0, 32, {4, 17}, at::kLong);
    at::Tensor inputs = tokens.narrow(1, 0, 16), targets = tokens.narrow(1, 1, 16).contiguous();
    at::Tensor positions = torch::arange(16).unsqueeze(0).expand({4, 16}).contiguous();
    double loss_value = 0;
    for (int step = 0; step < 300 && (step == 0 || loss_value > 0.02); ++step) {
      at::Tensor loss = summed_loss(model->forward(inputs, positions), targets) / targets.numel();
      loss.backward();
      optimizer.step(3e-3);
      optimizer.zero_grad();
      loss_value = loss.item<double>();
    }
    EXPECT_LT(loss_value, 0.05) << enum_name(models::kArchs, arch);
  }
}

// The trainer's loss over a micro-batch equals an explicit per-token sum of
// -log softmax at the masked targets, and an all-masked micro-batch gives 0.
TEST(TrainStep, MaskedLossMatchesAnExplicitReference) {
  torch::manual_seed(1);
  data::Batch batch;
  batch.batch_size = 3;
  batch.length = 5;
  const int64_t n = 15, vocab = 7;
  batch.tokens.assign(n, 1);
  batch.positions = {0, 1, 2, 3, 4, 0, 2, 4, 6, 8, 10, 11, 12, 13, 14};
  batch.targets = {3, 1, 4, 1, 5, 9 % vocab, 2, 6, 5, 3, 5, 8 % vocab, 9 % vocab, 7 % vocab, data::kNoTarget};
  batch.loss_mask = {1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1};  // row 1 has no loss tokens
  MicroBatch m = to_tensors(batch, torch::kCPU);
  EXPECT_EQ(m.loss_tokens, 5 + 0 + 2);  // the absent last target is never scored
  // The bounds the forward takes instead of reading the device tensor.
  EXPECT_EQ(m.bounds.lowest, 0);
  EXPECT_EQ(m.bounds.end, 15);
  EXPECT_FALSE(m.bounds.rows_share_positions);
  at::Tensor logits = torch::randn({3, 5, vocab});
  const double ours = summed_loss(logits, m.targets).item<double>();
  double reference = 0;
  at::Tensor logp = torch::log_softmax(logits.to(at::kDouble), -1);
  for (int64_t i = 0; i < n; ++i)
    if (batch.loss_mask[i] && batch.targets[i] != data::kNoTarget)
      reference -= logp[i / 5][i % 5][batch.targets[i]].item<double>();
  EXPECT_NEAR(ours, reference, 1e-4);

  data::Batch empty = batch;
  std::fill(empty.loss_mask.begin(), empty.loss_mask.end(), 0);
  MicroBatch e = to_tensors(empty, torch::kCPU);
  at::Tensor zero = summed_loss(logits.requires_grad_(), e.targets);
  EXPECT_EQ(e.loss_tokens, 0);
  EXPECT_EQ(zero.item<double>(), 0.0);
  zero.backward();
  EXPECT_TRUE(torch::isfinite(logits.grad()).all().item<bool>());
}

TEST(Evaluate, PerplexityEqualsADirectComputationOverNonOverlappingWindows) {
  test::TempDir dir;
  const int64_t vocab = 32;
  auto split = random_split(dir / "valid", vocab, 3, {50, 7, 33, 64});  // 7 is shorter than every evaluated length
  torch::manual_seed(2);
  models::TransformerLM model(tiny(models::Arch::gpt_neox, vocab));
  PerplexityOptions options = per_position_options({16, 32}, 3);
  const auto results = evaluate(model, split, options);
  ASSERT_EQ(results.size(), 2u);
  PerplexityOptions no_overlap = options;  // evaluate()'s own guard, in the validator's words
  no_overlap.stride = 16;
  try {
    evaluate(model, split, no_overlap);
    ADD_FAILURE() << "a stride of the length was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "eval.stride: 16 is not shorter than the evaluation length 16; a sliding "
                                     "window must overlap (0 gives non-overlapping windows)");
  }

  torch::NoGradGuard no_grad;
  model->eval();
  for (const auto& r : results) {
    const int64_t L = r.length;
    double total = 0;
    int64_t count = 0, windows = 0;
    for (int64_t doc = 0; doc < split.documents(); ++doc)
      for (int64_t start = 0; start + L <= split.length(doc); start += L, ++windows) {
        std::vector<int32_t> ids(L);
        split.copy(doc, start, L, ids.data());
        at::Tensor x = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
        at::Tensor logp = torch::log_softmax(model->forward(x, torch::arange(L).unsqueeze(0)).to(at::kDouble), -1);
        for (int64_t j = 0; j + 1 < L; ++j, ++count) total -= logp[0][j][ids[j + 1]].item<double>();
      }
    EXPECT_EQ(r.sequences, windows) << L;
    EXPECT_EQ(r.tokens, count) << L;
    EXPECT_NEAR(r.loss, total / count, 1e-5) << L;
    EXPECT_NEAR(r.ppl, std::exp(total / count), 1e-4 * r.ppl) << L;
    ASSERT_EQ(static_cast<int64_t>(r.position_loss.size()), L - 1);
  }
  // 50/16 + 33/16 + 64/16 = 3 + 2 + 4 windows; 50/32 + 33/32 + 64/32 = 1 + 1 + 2.
  EXPECT_EQ(results[0].sequences, 9);
  EXPECT_EQ(results[1].sequences, 4);

  // A sliding window scores every token after the first exactly once.
  options.lengths = {16};
  options.stride = 8;
  const auto sliding = evaluate(model, split, options);
  EXPECT_EQ(sliding[0].tokens, (50 - 1) - (50 - 16) % 8 + (33 - 1) - (33 - 16) % 8 + (64 - 1) - (64 - 16) % 8);
}

// window_length: each length's figure is the first L tokens of the same windows of
// window_length tokens, computed directly here with a forward over exactly those L
// tokens; for a static model evaluate() reads them off one longer forward (causal
// attention), for dynamic NTK it must run one forward a length (its frequencies
// depend on the input's length), and a model evaluated at short lengths alone uses
// the same windows.
TEST(Evaluate, EveryLengthIsScoredOnTheFirstLTokensOfTheSameWindows) {
  test::TempDir dir;
  const int64_t vocab = 32;
  auto split = random_split(dir / "valid", vocab, 5, {70, 20, 33});  // 20: shorter than the longest length, not used
  struct Case { models::Arch arch; models::ExtensionMethod method; std::vector<int64_t> lengths; };
  for (const Case& k : {Case{models::Arch::gpt_neox, models::ExtensionMethod::none, {8, 16, 32}},
                        Case{models::Arch::bloom, models::ExtensionMethod::none, {8, 16, 32}},
                        Case{models::Arch::llama, models::ExtensionMethod::none, {8, 16, 32}},
                        Case{models::Arch::llama, models::ExtensionMethod::dynamic_ntk, {8, 16, 32}},
                        Case{models::Arch::gpt_neox, models::ExtensionMethod::none, {8}}}) {
    torch::manual_seed(2);
    auto config = tiny(k.arch, vocab);
    config.extension.method = k.method;
    if (k.method != models::ExtensionMethod::none) config.extension.factor = 2.0, config.extension.original_length = 8;
    models::TransformerLM model(config);
    PerplexityOptions options = per_position_options(k.lengths, 2);
    options.window_length = 32;
    const auto results = evaluate(model, split, options);
    ASSERT_EQ(results.size(), k.lengths.size());
    torch::NoGradGuard no_grad;
    model->eval();
    // The windows of 32: [0, 32) and [32, 64) of the first document, [0, 32) of the third.
    const std::vector<std::pair<int64_t, int64_t>> windows = {{0, 0}, {0, 32}, {2, 0}};
    for (const auto& r : results) {
      const int64_t L = r.length;
      double total = 0;
      std::vector<double> at(L - 1, 0.0);
      for (const auto& [doc, start] : windows) {
        std::vector<int32_t> ids(L);
        split.copy(doc, start, L, ids.data());
        at::Tensor x = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
        at::Tensor logp = torch::log_softmax(model->forward(x, torch::arange(L).unsqueeze(0)).to(at::kDouble), -1);
        for (int64_t j = 0; j + 1 < L; ++j) {
          const double nll = -logp[0][j][ids[j + 1]].item<double>();
          total += nll, at[j] += nll / 3;
        }
      }
      EXPECT_EQ(r.sequences, 3) << L;
      EXPECT_EQ(r.tokens, 3 * (L - 1)) << L;
      EXPECT_NEAR(r.loss, total / (3 * (L - 1)), 1e-5) << L;
      ASSERT_EQ(static_cast<int64_t>(r.position_loss.size()), L - 1);
      for (int64_t j = 0; j + 1 < L; ++j) EXPECT_NEAR(r.position_loss[j], at[j], 1e-5) << L << " " << j;
    }
  }
  PerplexityOptions sliding;
  sliding.lengths = {8, 16};
  sliding.stride = 4;
  sliding.window_length = 16;
  models::TransformerLM model(tiny(models::Arch::gpt_neox, vocab));
  EXPECT_THROW(evaluate(model, split, sliding), InputError);
}

// eval.windows_per_document and the per-window loss blocks the experiment's intervals
// are computed from: one window per document when asked, and each window's blocks of
// kLossBlock predictions equal to the direct computation, at every length of a longest
// window too (a prefix's last block is cut at its own L - 1 predictions).
TEST(Evaluate, EachWindowKeepsItsLossByBlockAndOneWindowPerDocumentWhenAsked) {
  test::TempDir dir;
  const int64_t vocab = 32;
  auto split = random_split(dir / "valid", vocab, 9, {600, 300, 520});
  torch::manual_seed(4);
  models::TransformerLM model(tiny(models::Arch::llama, vocab, 1024));
  PerplexityOptions options = per_position_options({256}, 2);
  EXPECT_EQ(evaluate(model, split, options)[0].sequences, 2 + 1 + 2);  // every window each document holds
  options.windows_per_document = 1;
  options.per_window = true;
  const LengthResult one = evaluate(model, split, options)[0];
  ASSERT_EQ(one.windows.size(), 3u);
  torch::NoGradGuard no_grad;
  model->eval();
  auto direct_nll = [&](int64_t doc, int64_t length) {  // every prediction's loss of the window at 0 of `doc`
    std::vector<int32_t> ids(length);
    split.copy(doc, 0, length, ids.data());
    at::Tensor x = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
    at::Tensor logp = torch::log_softmax(model->forward(x, torch::arange(length).unsqueeze(0)).to(at::kDouble), -1);
    std::vector<double> nll;
    for (int64_t j = 0; j + 1 < length; ++j) nll.push_back(-logp[0][j][ids[j + 1]].item<double>());
    return nll;
  };
  double total = 0;
  for (int64_t doc = 0; doc < 3; ++doc) {
    const WindowLoss& w = one.windows[doc];
    EXPECT_EQ(w.doc, doc);
    EXPECT_EQ(w.start, 0);
    ASSERT_EQ(w.block_nll.size(), 2u);  // 255 predictions: 128 + 127
    const auto nll = direct_nll(doc, 256);
    double first = 0, second = 0;
    for (size_t j = 0; j < nll.size(); ++j) (j < 128 ? first : second) += nll[j];
    EXPECT_NEAR(w.block_nll[0], first, 1e-4);
    EXPECT_NEAR(w.block_nll[1], second, 1e-4);
    total += w.block_nll[0] + w.block_nll[1];
  }
  EXPECT_NEAR(one.loss, total / (3 * 255), 1e-9);
  // Lengths read off one longest window: 130's blocks are 128 + 1 predictions of the same window.
  options.lengths = {130, 256};
  options.window_length = 256;
  const auto both = evaluate(model, split, options);
  ASSERT_EQ(both[0].windows.size(), 3u);
  const auto nll = direct_nll(1, 256);
  ASSERT_EQ(both[0].windows[1].block_nll.size(), 2u);
  EXPECT_NEAR(both[0].windows[1].block_nll[1], nll[128], 1e-5);
  EXPECT_NEAR(both[1].windows[1].block_nll[0], one.windows[1].block_nll[0], 1e-6);
}

// train.loss_chunk_tokens: a micro-batch's loss and every gradient (tied head,
// activation checkpointing) are the same with the head over slices of 1 or 7
// tokens, auto (one slice here) or the whole logits (0, today's summed_loss).
TEST(TrainStep, MicroBatchLossIsTheSameOverSlicesOfTheTokens) {
  data::Batch batch;
  batch.batch_size = 2;
  batch.length = 16;
  std::mt19937 rng(9);
  for (int64_t i = 0; i < 32; ++i) {
    batch.tokens.push_back(static_cast<int32_t>(rng() % 32));
    batch.positions.push_back(static_cast<int32_t>(i % 16));
    batch.targets.push_back(static_cast<int32_t>(rng() % 32));
    batch.loss_mask.push_back(i % 16 >= 5);  // a prefix without loss tokens
  }
  const MicroBatch m = to_tensors(batch, torch::kCPU);
  std::vector<std::pair<double, std::vector<at::Tensor>>> runs;
  for (std::optional<int64_t> chunk : std::vector<std::optional<int64_t>>{0, 1, 7, std::nullopt}) {
    torch::manual_seed(3);
    auto config = tiny(models::Arch::gpt2);
    config.activation_checkpointing = models::ActivationCheckpointing::every_block();
    models::TransformerLM model(config);
    model->train();
    at::Tensor loss = micro_batch_loss(model, m, chunk).sum;
    loss.backward();
    std::vector<at::Tensor> grads;
    for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
    runs.emplace_back(loss.item<double>(), grads);
  }
  const auto& [loss0, grads0] = runs.front();
  for (size_t r = 1; r < runs.size(); ++r) {
    EXPECT_NEAR(runs[r].first, loss0, 1e-5 * loss0) << "run " << r;
    for (size_t i = 0; i < grads0.size(); ++i)
      EXPECT_LT((runs[r].second[i] - grads0[i]).abs().max().item<double>(), 1e-5) << "run " << r << " parameter " << i;
  }
}

// A mixture's micro-batch (data.mixture): each source's part of the loss is the loss of a
// micro-batch of that source's rows alone, and the parts add up to the loss. Over slices
// (1, 7, auto) the loss and every gradient are a single store's micro-batch's to the bit (the
// split reads the terms the sum is made of); with the whole logits (0), to fp32 rounding.
TEST(TrainStep, AMixturesLossIsEachSourcesRowsLossAndSumsToTheWhole) {
  const int64_t rows = 3, length = 12;
  const std::vector<int32_t> sources = {1, 0, 1};
  data::Batch mixed;
  mixed.batch_size = rows;
  mixed.length = length;
  std::mt19937 rng(5);
  for (int64_t i = 0; i < rows * length; ++i) {
    mixed.tokens.push_back(static_cast<int32_t>(rng() % 32));
    mixed.positions.push_back(static_cast<int32_t>(i % length + 3 * (i / length)));
    mixed.targets.push_back(static_cast<int32_t>(rng() % 32));
    mixed.loss_mask.push_back(i % length >= 2 + i / length);  // rows with 10, 9 and 8 loss tokens
  }
  mixed.sources = sources;
  mixed.step_samples = {1, 2};
  // The rows of `keep` alone, as a micro-batch of a single store.
  auto rows_of = [&](const std::vector<int64_t>& keep) {
    data::Batch b;
    b.batch_size = static_cast<int64_t>(keep.size());
    b.length = length;
    for (int64_t r : keep)
      for (int64_t t = r * length; t < (r + 1) * length; ++t) {
        b.tokens.push_back(mixed.tokens[t]);
        b.positions.push_back(mixed.positions[t]);
        b.targets.push_back(mixed.targets[t]);
        b.loss_mask.push_back(mixed.loss_mask[t]);
      }
    return to_tensors(b, torch::kCPU);
  };
  const MicroBatch m = to_tensors(mixed, torch::kCPU), whole = rows_of({0, 1, 2});
  EXPECT_EQ(m.source_loss_tokens, (std::vector<int64_t>{9, 18}));
  EXPECT_FALSE(whole.source_one_hot.defined()) << "a single store's micro-batch has no split";
  EXPECT_TRUE(whole.source_loss_tokens.empty());
  struct Pass {
    MicroBatchLoss loss;
    std::vector<at::Tensor> grads;
  };
  auto pass = [&](const MicroBatch& batch, std::optional<int64_t> chunk) {
    torch::manual_seed(3);
    models::TransformerLM model(tiny(models::Arch::llama));
    model->train();
    Pass p{micro_batch_loss(model, batch, chunk), {}};
    p.loss.sum.backward();
    for (const auto& param : model->parameters()) p.grads.push_back(param.grad().clone());
    return p;
  };
  for (std::optional<int64_t> chunk : std::vector<std::optional<int64_t>>{0, 1, 7, std::nullopt}) {
    const std::string which = chunk ? std::to_string(*chunk) : "auto";
    const Pass split = pass(m, chunk), unsplit = pass(whole, chunk);
    ASSERT_TRUE(split.loss.by_source.defined()) << which;
    EXPECT_FALSE(unsplit.loss.by_source.defined()) << which;
    ASSERT_EQ(split.loss.by_source.numel(), 2) << which;
    const double first = pass(rows_of({1}), chunk).loss.sum.item<double>();
    const double second = pass(rows_of({0, 2}), chunk).loss.sum.item<double>();
    EXPECT_NEAR(split.loss.by_source[0].item<double>(), first, 1e-5 * first) << which;
    EXPECT_NEAR(split.loss.by_source[1].item<double>(), second, 1e-5 * second) << which;
    const double total = unsplit.loss.sum.item<double>();
    EXPECT_NEAR(split.loss.by_source.sum().item<double>(), total, 1e-5 * total) << which;
    if (chunk == 0) {
      EXPECT_NEAR(split.loss.sum.item<double>(), total, 1e-5 * total) << which;
      for (size_t i = 0; i < unsplit.grads.size(); ++i)
        EXPECT_LT((split.grads[i] - unsplit.grads[i]).abs().max().item<double>(), 1e-5) << which << " parameter " << i;
      continue;
    }
    EXPECT_EQ(split.loss.sum.item<double>(), total) << which;
    for (size_t i = 0; i < unsplit.grads.size(); ++i)
      EXPECT_TRUE(at::equal(split.grads[i], unsplit.grads[i])) << which << " parameter " << i;
  }
  // A micro-batch whose samples are all of one source gives it the whole loss.
  data::Batch one_source = mixed;
  one_source.sources = {1, 1, 1};
  one_source.step_samples = {0, 3};
  const Pass alone = pass(to_tensors(one_source, torch::kCPU), std::nullopt);
  EXPECT_EQ(alone.loss.by_source[0].item<double>(), 0.0);
  const double sum = alone.loss.sum.item<double>();
  EXPECT_NEAR(alone.loss.by_source[1].item<double>(), sum, 1e-6 * sum);
}

// Evaluation over slices of the tokens (1, 5, auto) scores every window and
// position as the whole logits (0) do.
TEST(Evaluate, PerplexityIsTheSameOverSlicesOfTheTokens) {
  test::TempDir dir;
  const int64_t vocab = 32;
  auto split = random_split(dir / "valid", vocab, 4, {50, 40});
  torch::manual_seed(2);
  models::TransformerLM model(tiny(models::Arch::bloom, vocab));
  PerplexityOptions options = per_position_options({16, 24}, 2);
  options.loss_chunk_tokens = 0;
  const auto whole = evaluate(model, split, options);
  for (std::optional<int64_t> chunk : std::vector<std::optional<int64_t>>{1, 5, std::nullopt}) {
    options.loss_chunk_tokens = chunk;
    const auto sliced = evaluate(model, split, options);
    ASSERT_EQ(sliced.size(), whole.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_EQ(sliced[i].tokens, whole[i].tokens);
      EXPECT_NEAR(sliced[i].loss, whole[i].loss, 1e-5 * whole[i].loss) << whole[i].length;
      ASSERT_EQ(sliced[i].position_loss.size(), whole[i].position_loss.size());
      for (size_t p = 0; p < whole[i].position_loss.size(); ++p)
        EXPECT_NEAR(sliced[i].position_loss[p], whole[i].position_loss[p], 1e-5 * whole[i].position_loss[p]);
    }
  }
}

}  // namespace
}  // namespace segtrain::trainer

namespace segtrain::trainer {
namespace {

// Stands in for a 2-rank group whose other rank computed the same gradients:
// an all-reduce doubles the tensor, but only when waited for, as a real one
// lands later; it records what was started and when.
class DoublingGroup : public ProcessGroup {
 public:
  int64_t rank() const override { return 0; }
  int64_t world_size() const override { return 2; }
  void broadcast(std::vector<at::Tensor>&) override {}
  void all_reduce_sum(std::vector<at::Tensor>& tensors) override {
    for (auto& t : tensors) t.mul_(2);
  }
  std::unique_ptr<PendingCollective> all_reduce_sum_async(const at::Tensor& tensor) override {
    struct Later : PendingCollective {
      at::Tensor t;
      void wait() override { t.mul_(2); }
    };
    started.push_back(tensor.numel());
    auto later = std::make_unique<Later>();
    later->t = tensor;
    return later;
  }
  // As if every rank held the same gradients: the slice doubles; the gather
  // leaves the buffer as it is.
  std::unique_ptr<PendingCollective> reduce_scatter_sum_async(const at::Tensor& whole) override {
    const int64_t n = whole.numel() / world_size();
    return all_reduce_sum_async(whole.narrow(0, rank() * n, n));
  }
  std::unique_ptr<PendingCollective> all_gather_async(const at::Tensor&) override {
    struct Done : PendingCollective {
      void wait() override {}
    };
    return std::make_unique<Done>();
  }
  void barrier() override {}
  std::vector<int64_t> started;  // sizes of the all-reduces, in order
};

struct SyncCase {
  models::TransformerLM model;
  std::vector<at::Tensor> params;
  at::Tensor inputs, targets, positions;
};

SyncCase sync_case(bool checkpointing, int64_t batch = 2) {
  torch::manual_seed(0);
  auto config = tiny(models::Arch::gpt_neox);
  config.activation_checkpointing = models::ActivationCheckpointing::every_block_if(checkpointing);
  SyncCase s{models::TransformerLM(config), {}, {}, {}, {}};
  s.model->train();
  for (auto& p : s.model->parameters()) s.params.push_back(p);
  at::Tensor tokens = torch::randint(0, 32, {batch, 17}, at::kLong);
  s.inputs = tokens.narrow(1, 0, 16);
  s.targets = tokens.narrow(1, 1, 16).contiguous();
  s.positions = torch::arange(16).unsqueeze(0).expand({batch, 16}).contiguous();
  return s;
}

void backward(SyncCase& s, int64_t row) {
  summed_loss(s.model->forward(s.inputs.narrow(0, row, 1), s.positions.narrow(0, row, 1)),
              s.targets.narrow(0, row, 1))
      .backward();
}

std::vector<at::Tensor> grads_of(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> out;
  for (const auto& p : params) out.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  return out;
}

// Gradients are summed bucket by bucket while backward runs, with and without
// (reentrant) activation checkpointing, and only on the step's last micro-batch.
TEST(GradientSync, StartsEveryBucketDuringTheLastBackwardAndSumsExactly) {
  for (bool checkpointing : {false, true}) {
    SyncCase reference = sync_case(checkpointing);
    backward(reference, 0);
    backward(reference, 1);
    const auto expected = grads_of(reference.params);

    SyncCase s = sync_case(checkpointing);
    DoublingGroup group;
    FlatBuckets flat(s.params, 4096, group.world_size());
    GradientSync sync(group, flat, {Reduction::all_reduce, std::nullopt, {}});
    const int64_t buckets = sync.stats().buckets;
    ASSERT_GT(buckets, 3);
    backward(s, 0);  // an earlier micro-batch: nothing is reduced
    EXPECT_TRUE(group.started.empty()) << "checkpointing " << checkpointing;
    sync.arm();
    backward(s, 1);
    EXPECT_GE(static_cast<int64_t>(group.started.size()), buckets) << "checkpointing " << checkpointing;
    sync.finish();
    EXPECT_EQ(sync.stats().started_in_backward, buckets);
    // Buckets follow reverse registration order, hold every parameter once and
    // are padded to a multiple of the world size; each reduction is one
    // segment of at most the bucket size (a larger parameter has several).
    int64_t numel = 0, packed = 0;
    size_t reduction = 0;
    for (const auto& p : s.params) numel += p.numel();
    for (size_t b = 0; b < flat.buckets().size(); ++b) {
      const FlatBucket& bucket = flat.buckets()[b];
      packed += bucket.numel;
      int64_t covered = 0;
      for (const auto& segment : bucket.segments) {
        EXPECT_EQ(segment.begin, covered);
        EXPECT_LE(segment.numel, 4096 / 4);
        EXPECT_EQ(group.started.at(reduction++), segment.numel);
        covered += segment.numel;
      }
      EXPECT_EQ(covered, bucket.grads.numel());
      EXPECT_EQ(bucket.grads.numel() % 2, 0);
      EXPECT_LT(bucket.grads.numel() - bucket.numel, 2);
      EXPECT_GE(bucket.members.front(), bucket.members.back());
      if (b > 0) {
        EXPECT_GT(flat.buckets()[b - 1].members.back(), bucket.members.front());
      }
    }
    EXPECT_EQ(packed, numel);
    for (size_t i = 0; i < s.params.size(); ++i)
      EXPECT_TRUE(s.params[i].grad().equal(expected[i] * 2)) << "parameter " << i << " checkpointing " << checkpointing;
  }
}

// A parameter that gets no gradient holds its bucket back (and, buckets going
// in order, every later one); finish() starts them instead of waiting forever,
// and the parameter keeps no gradient.
TEST(GradientSync, AParameterWithoutAGradientDoesNotBlockTheStep) {
  SyncCase s = sync_case(false);
  at::Tensor unused = torch::zeros({8}, at::requires_grad());
  std::vector<at::Tensor> params = s.params;
  params.push_back(unused);  // registered last: in the first bucket, which every other one waits for
  DoublingGroup group;
  {
    FlatBuckets flat(params, 8192, group.world_size());
    GradientSync sync(group, flat, {Reduction::all_reduce, std::nullopt, {}});  // the unused parameter shares its bucket
    ASSERT_GT(sync.stats().buckets, 2);
    sync.arm();
    backward(s, 0);
    sync.finish();
    const auto stats = sync.stats();
    EXPECT_EQ(stats.started_in_backward, 0);
    size_t segments = 0;
    for (const auto& bucket : flat.buckets()) segments += bucket.segments.size();
    EXPECT_EQ(group.started.size(), segments);
    EXPECT_TRUE(unused.grad().defined() && unused.grad().eq(0).all().item<bool>());  // zeros, as DDP's
  }
  // Destroyed, the sync leaves no hook behind.
  for (auto& p : s.params) p.mutable_grad() = at::Tensor();
  group.started.clear();
  backward(s, 0);
  EXPECT_TRUE(group.started.empty());
}

// Which GPU a rank takes (the seam pick_device uses; no GPU here): LOCAL_RANK of the
// node's devices, or the one device CUDA_VISIBLE_DEVICES leaves it (SLURM --gpus-per-task=1).
TEST(Device, OneVisibleGpuIsTheRanksOwnWhateverItsLocalRank) {
  EXPECT_EQ(cuda_index_for(3, 8, false), 3);
  EXPECT_EQ(cuda_index_for(3, 8, true), 3);  // CUDA_VISIBLE_DEVICES naming the node's 8
  EXPECT_EQ(cuda_index_for(3, 1, true), 0);  // one GPU per task
  EXPECT_EQ(cuda_index_for(0, 1, false), 0);
  for (auto [rank, visible, restricted] : {std::tuple{1, 1, false}, std::tuple{2, 2, true}})
    try {
      cuda_index_for(rank, visible, restricted);
      ADD_FAILURE() << "LOCAL_RANK " << rank << " of " << visible << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("LOCAL_RANK=" + std::to_string(rank) + ": only " + std::to_string(visible)),
                std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace segtrain::trainer
