// The LM head and cross-entropy over slices of the tokens (models/modules/lm_head_loss.h)
// against at::cross_entropy on the whole logits: the summed loss, the per-token
// losses and the gradients of hidden and W, for slices of 1 token, sizes that do
// not divide the tokens and one larger than them, with ignored targets and a
// slice with none to score; through TransformerLMs (tied and untied heads, with
// activation checkpointing) every parameter's gradient; under bf16 autocast,
// close to the unchunked bf16 head; with bf16 parameters, scaled gradients in bf16.
#include <gtest/gtest.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "models/modules/lm_head_loss.h"
#include "models/modules/transformer.h"
#include "tiny_models.h"

namespace segtrain::models {
namespace {

constexpr int64_t kIgnore = -100;

// Largest |a - b| over the largest |b| (at least 1): one relative figure for a tensor.
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(1.0, b.abs().max().item<double>());
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / scale;
}

at::Tensor reference_loss(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                          at::Reduction::Reduction reduction = at::Reduction::Sum) {
  at::Tensor logits = at::linear(hidden, weight).to(at::kFloat);
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape(-1), {}, reduction, kIgnore);
}

struct Case {
  at::Tensor hidden, weight, targets;
};

// 23 tokens (a prime: no slice size but 1 and 23 divides it), vocab 37, some
// targets ignored and tokens 7..13 all ignored (a whole slice of 7).
Case make_case() {
  torch::manual_seed(11);
  Case c;
  c.hidden = torch::randn({23, 16}) * 2;
  c.weight = torch::randn({37, 16}) * 0.5;
  c.targets = torch::randint(0, 37, {23}, at::kLong);
  for (int64_t i : {0, 3, 7, 8, 9, 10, 11, 12, 13, 22}) c.targets[i] = kIgnore;
  return c;
}

const std::vector<int64_t> kChunks = {1, 5, 7, 22, 23, 100};

TEST(LmHeadLoss, SumAndGradientsEqualCrossEntropyOnTheWholeLogits) {
  const Case c = make_case();
  at::Tensor h0 = c.hidden.clone().requires_grad_(), w0 = c.weight.clone().requires_grad_();
  at::Tensor expected = reference_loss(h0, w0, c.targets);
  (expected * 0.37).backward();  // a scale like the trainer's 1 / loss tokens
  for (int64_t chunk : kChunks) {
    at::Tensor h = c.hidden.clone().requires_grad_(), w = c.weight.clone().requires_grad_();
    at::Tensor loss = lm_head_loss_sum(h, w, c.targets, chunk);
    EXPECT_EQ(loss.scalar_type(), at::kFloat);
    EXPECT_EQ(loss.dim(), 0);
    EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-5 * std::abs(expected.item<double>())) << chunk;
    (loss * 0.37).backward();
    EXPECT_LT(relative_error(h.grad(), h0.grad()), 1e-5) << "d hidden, chunk " << chunk;
    EXPECT_LT(relative_error(w.grad(), w0.grad()), 1e-5) << "d W, chunk " << chunk;
    // Ignored tokens get no gradient at all.
    EXPECT_EQ(h.grad().narrow(0, 7, 7).abs().max().item<double>(), 0.0) << chunk;
  }
}

// bf16 parameters (train.param_dtype: bf16): hidden and W in bf16, no autocast. The gradients come back in
// bf16, scaled by the incoming gradient before their one rounding: within bf16's rounding of the fp32
// reference's, for one slice and several.
TEST(LmHeadLoss, Bf16WeightsTakeTheScaledGradientInBf16) {
  const Case c = make_case();
  const at::Tensor hidden = c.hidden.to(at::kBFloat16), weight = c.weight.to(at::kBFloat16);
  at::Tensor h0 = hidden.to(at::kFloat).requires_grad_(), w0 = weight.to(at::kFloat).requires_grad_();
  (reference_loss(h0, w0, c.targets) * 0.37).backward();
  for (int64_t chunk : {5, 100}) {
    at::Tensor h = hidden.clone().requires_grad_(), w = weight.clone().requires_grad_();
    (lm_head_loss_sum(h, w, c.targets, chunk) * 0.37).backward();
    EXPECT_EQ(h.grad().scalar_type(), at::kBFloat16);
    EXPECT_EQ(w.grad().scalar_type(), at::kBFloat16);
    EXPECT_LT(relative_error(h.grad(), h0.grad()), 1e-2) << "d hidden, chunk " << chunk;
    EXPECT_LT(relative_error(w.grad(), w0.grad()), 1e-2) << "d W, chunk " << chunk;
  }
}

TEST(LmHeadLoss, OnlyTheInputsThatRequireAGradientGetOne) {
  const Case c = make_case();
  at::Tensor h0 = c.hidden.clone().requires_grad_();
  reference_loss(h0, c.weight, c.targets).backward();
  at::Tensor h = c.hidden.clone().requires_grad_(), w = c.weight.clone();
  lm_head_loss_sum(h, w, c.targets, 4).backward();
  EXPECT_LT(relative_error(h.grad(), h0.grad()), 1e-5);
  EXPECT_FALSE(w.grad().defined());

  at::Tensor w0 = c.weight.clone().requires_grad_(), w1 = c.weight.clone().requires_grad_();
  reference_loss(c.hidden, w0, c.targets).backward();
  lm_head_loss_sum(c.hidden, w1, c.targets, 4).backward();
  EXPECT_LT(relative_error(w1.grad(), w0.grad()), 1e-5);

  // Without gradients (or with grad mode off) it is the plain sum, no graph.
  at::Tensor plain = lm_head_loss_sum(c.hidden, c.weight, c.targets, 4);
  EXPECT_FALSE(plain.requires_grad());
  {
    torch::NoGradGuard no_grad;
    at::Tensor off = lm_head_loss_sum(c.hidden.clone().requires_grad_(), c.weight, c.targets, 4);
    EXPECT_FALSE(off.requires_grad());
    EXPECT_NEAR(off.item<double>(), plain.item<double>(), 1e-6 * std::abs(plain.item<double>()));
  }
}

TEST(LmHeadLoss, PerTokenNllEqualsCrossEntropyWithoutReduction) {
  const Case c = make_case();
  // [B,T,D] hidden and [B,T] targets keep their shape.
  at::Tensor hidden = c.hidden.narrow(0, 0, 22).reshape({2, 11, 16});
  at::Tensor targets = c.targets.narrow(0, 0, 22).reshape({2, 11});
  at::Tensor expected = reference_loss(hidden, c.weight, targets, at::Reduction::None).view({2, 11});
  for (int64_t chunk : kChunks) {
    at::Tensor nll = lm_head_nll(hidden, c.weight.clone().requires_grad_(), targets, chunk);
    ASSERT_EQ(nll.sizes(), targets.sizes()) << chunk;
    EXPECT_EQ(nll.scalar_type(), at::kFloat);
    EXPECT_FALSE(nll.requires_grad());
    EXPECT_LT(relative_error(nll, expected), 1e-5) << chunk;
    EXPECT_TRUE(nll.masked_select(targets.eq(kIgnore)).eq(0).all().item<bool>()) << chunk;
  }
}

TEST(LmHeadLoss, AnAllIgnoredInputIsZeroWithZeroGradients) {
  const Case c = make_case();
  at::Tensor h = c.hidden.clone().requires_grad_(), w = c.weight.clone().requires_grad_();
  at::Tensor loss = lm_head_loss_sum(h, w, at::full({23}, kIgnore, at::kLong), 5);
  EXPECT_EQ(loss.item<double>(), 0.0);
  loss.backward();
  EXPECT_EQ(h.grad().abs().max().item<double>(), 0.0);
  EXPECT_EQ(w.grad().abs().max().item<double>(), 0.0);
  // No token at all (no slice writes d W): a zero loss and a zero d W all the same.
  at::Tensor none = at::empty({0, 16}).requires_grad_(), w0 = c.weight.clone().requires_grad_();
  at::Tensor empty = lm_head_loss_sum(none, w0, at::empty({0}, at::kLong), 5);
  EXPECT_EQ(empty.item<double>(), 0.0);
  empty.backward();
  ASSERT_TRUE(w0.grad().defined());
  EXPECT_EQ(w0.grad().abs().max().item<double>(), 0.0);
}

// 16-bit head GEMMs run over the vocabulary rounded up to 64 rows (GPT-2's 50,257 become 50,304),
// no vocabulary is padded that needs none, and fp32 GEMMs are not padded.
TEST(LmHeadLoss, SixteenBitHeadGemmsRunOverAVocabularyPaddedTo64) {
  for (const int64_t vocab : {int64_t{1}, int64_t{37}, int64_t{64}, int64_t{65}, int64_t{50257}, int64_t{128256}}) {
    const int64_t stride = head_gemm_width(vocab, at::kBFloat16);
    EXPECT_GE(stride, vocab);
    EXPECT_LT(stride - vocab, 64) << vocab;
    EXPECT_EQ(stride * 2 % 128, 0) << vocab;  // bf16 rows on 128-byte lines
    EXPECT_EQ(head_gemm_width(vocab, at::kHalf), stride);
    EXPECT_EQ(head_gemm_width(vocab, at::kFloat), vocab);
  }
  EXPECT_EQ(head_gemm_width(50257, at::kBFloat16), 50304);
  EXPECT_EQ(head_gemm_width(128256, at::kBFloat16), 128256);
}

// The weight the GEMMs read: W's rows in the compute dtype, then zero rows to the padded width (their
// logits are exactly 0 for any hidden state); W itself where it needs neither a cast nor padding.
TEST(LmHeadLoss, TheGemmsWeightIsWThenZeroRows) {
  const at::Tensor w = at::randn({37, 8});
  const at::Tensor padded = head_weight_for_gemms(w, at::kBFloat16);
  ASSERT_EQ(padded.sizes(), (std::vector<int64_t>{64, 8}));
  EXPECT_EQ(padded.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(padded.narrow(0, 0, 37), w.to(at::kBFloat16)));
  EXPECT_EQ(padded.narrow(0, 37, 27).abs().max().item<double>(), 0.0);
  const at::Tensor h = at::randn({5, 8}).to(at::kBFloat16) * 1e3;
  EXPECT_EQ(at::mm(h, padded.t()).narrow(1, 37, 27).abs().max().item<double>(), 0.0);
  EXPECT_TRUE(head_weight_for_gemms(w, at::kFloat).is_same(w));
  const at::Tensor aligned = at::randn({64, 8}).to(at::kBFloat16);
  EXPECT_TRUE(head_weight_for_gemms(aligned, at::kBFloat16).is_same(aligned));
}

// The largest multiple of 128 tokens (GEMM tiles) within 64 MiB of fp32 logits, the tokens
// themselves below 128.
TEST(LmHeadLoss, AutoSlicesHoldAbout64MiBOfFp32Logits) {
  for (const int64_t vocab : {int64_t{160}, int64_t{32000}, int64_t{49152}, int64_t{128256}, int64_t{151936}}) {
    const int64_t tokens = loss_chunk_tokens_for(std::nullopt, vocab);
    const int64_t within = (int64_t{64} << 20) / (vocab * 4);
    EXPECT_LE(tokens, within) << vocab;
    if (within >= 128) {
      EXPECT_EQ(tokens % 128, 0) << vocab;
      EXPECT_GT(tokens + 128, within) << vocab;
    } else {
      EXPECT_EQ(tokens, within) << vocab;
    }
  }
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, 32000), 512);   // not 524
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, 128256), 128);  // Llama-3: not 130
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, 151936), 110);  // Qwen2: below one tile
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, int64_t{1} << 30), 1);
  EXPECT_EQ(loss_chunk_tokens_for(0, 32000), 0);
  EXPECT_EQ(loss_chunk_tokens_for(7, 32000), 7);
}

// While the head trains, every slice reads and writes the fp32 [V,D] gradient: slices
// of D tokens (rounded down to whole 128-token tiles) keep that below the slices' own logits.
TEST(LmHeadLoss, AutoSlicesOfATrainedHeadHoldAtLeastItsWidthInTokens) {
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, 50257, 1024), 1024);                 // GPT-2 medium: not 333
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, 32000, 256), 512);                  // 64 MiB's 524 > 256
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, 50257, 0), 256);                    // evaluation: 333 rounded
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, 32000, 1600), 1536);                // d 1,600: 12 whole tiles
  EXPECT_EQ(loss_chunk_tokens_for(7, 50257, 1024), 7);                               // configured
  EXPECT_EQ(loss_chunk_tokens_for(0, 50257, 1024), 0);
  // Llama-3-8B's head (vocabulary 128,256, d 4096): at most 256 MiB of fp32 logits a slice (523
  // tokens), in whole tiles.
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, 128256, 4096), 512);
}

// With the 16-bit cross-entropy kernel a slice's buffer is one 16-bit row of the padded vocabulary a token,
// where the composite's were about three fp32 rows: the same budgets (3 x 64 MiB and 3 x 256 MiB of
// buffers) over 2 bytes a padded column, and a trained head's slices of up to 4 D tokens (8 D padded V
// bytes, at most the composite's 12 D V for V >= 126), so bench/memory_table.py's bound (the composite's
// rule before its rounding to whole tiles) still holds the slice.
TEST(LmHeadLoss, AutoSlicesOfTheSixteenBitKernelKeepTheCompositesBudgets) {
  const auto kernel = HeadSliceBuffers::kernel_16bit;
  const auto composite = HeadSliceBuffers::composite_fp32;
  const int64_t budget = int64_t{3} * (256 << 20), frozen_budget = int64_t{3} * (64 << 20);
  struct Head {
    int64_t vocab, d, padded;
  };
  for (const Head& h : {Head{50257, 1024, 50304}, Head{128256, 2048, 128256}, Head{128256, 4096, 128256},
                        Head{49152, 576, 49152}, Head{32000, 256, 32000}, Head{151936, 3584, 151936}}) {
    const int64_t trained = loss_chunk_tokens_for(std::nullopt, h.vocab, h.d, kernel);
    const int64_t frozen = loss_chunk_tokens_for(std::nullopt, h.vocab, 0, kernel);
    // Within the budgets, in whole tiles, and within the composite's unrounded bound for the same head:
    // max(64 MiB of fp32 logits, min(D tokens, 256 MiB of them)), three fp32 logits a token.
    EXPECT_LE(trained * 2 * h.padded, budget) << h.vocab;
    EXPECT_LE(frozen * 2 * h.padded, frozen_budget) << h.vocab;
    EXPECT_EQ(trained % 128, 0) << h.vocab;
    EXPECT_EQ(frozen % 128, 0) << h.vocab;
    const int64_t fp32_row = 4 * h.vocab;
    const int64_t composite_bound =
        3 * fp32_row * std::max((int64_t{64} << 20) / fp32_row, std::min(h.d, (int64_t{256} << 20) / fp32_row));
    EXPECT_LE(trained * 2 * h.padded, composite_bound) << h.vocab;
    EXPECT_LE(trained, std::max(4 * h.d, frozen)) << h.vocab;  // a small vocabulary's frozen budget may hold more
    EXPECT_GE(trained, frozen) << h.vocab;
  }
  // GPT-2 medium: 4 D = 4,096 (8,004 would fit); its 8,192 tokens a micro-batch in 2 slices, not 8.
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, 50257, 1024, kernel), 4096);
  // Llama-3.2-1B (d 2,048): 768 MiB over 256,512 bytes a token is 3,139, in whole tiles (32 slices of 512
  // tokens with the composite for its 16,384 a micro-batch; 6 here).
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, 128256, 2048, kernel), 3072);
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, 128256, 2048, composite), 512);
  // Llama-3-8B's frozen head (LoRA): 192 MiB holds 784 tokens, 768 in whole tiles (the composite's 128).
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, 128256, 0, kernel), 768);
  EXPECT_EQ(loss_chunk_tokens_for(7, 128256, 2048, kernel), 7);  // configured
  EXPECT_EQ(loss_chunk_tokens_for(0, 128256, 2048, kernel), 0);
}

// The tensors' overload reads what lm_head_loss_sum would compute here: on the CPU, the composite's
// buffers (the kernel is CUDA's); the head trains only with grad mode on and a weight that takes a
// gradient.
TEST(LmHeadLoss, AutoSlicesForTensorsFollowGradModeAndTheCrossEntropyPath) {
  const at::Tensor hidden = at::randn({4, 1024}).to(at::kBFloat16);
  const at::Tensor weight = at::randn({50257, 1024}).to(at::kBFloat16).requires_grad_();
  const at::Tensor frozen = weight.detach();
  const int64_t trained_composite = loss_chunk_tokens_for(std::nullopt, 50257, 1024);
  const int64_t frozen_composite = loss_chunk_tokens_for(std::nullopt, 50257, 0);
  ASSERT_NE(trained_composite, frozen_composite);
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, hidden, weight), trained_composite);
  EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, hidden, frozen), frozen_composite);
  {
    at::NoGradGuard no_grad;
    EXPECT_EQ(loss_chunk_tokens_for(std::nullopt, hidden, weight), frozen_composite);
  }
  EXPECT_EQ(loss_chunk_tokens_for(5, hidden, weight), 5);
}

ModelConfig tiny(Arch arch, bool checkpointing) {
  auto c = test::tiny_model_config(arch, 41, 64, /*grouped_kv=*/true);
  c.activation_checkpointing = models::ActivationCheckpointing::every_block_if(checkpointing);
  return c;
}

std::map<std::string, at::Tensor> grads_of(TransformerLM& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : model->named_parameters()) out[p.key()] = p.value().grad().clone();
  return out;
}

// gpt2 and bloom tie the head to wte (its gradient is the embedding's plus the
// head's), gpt_neox and untied llama have their own; checkpointing recomputes the
// blocks in backward.
TEST(LmHeadLoss, EveryParameterGradientOfATransformerLMEqualsTheUnchunkedOnes) {
  for (auto arch : {Arch::gpt2, Arch::gpt_neox, Arch::bloom, Arch::llama})
    for (bool checkpointing : {false, true}) {
      const std::string what = std::string(enum_name(kArchs, arch)) + (checkpointing ? " checkpointed" : "");
      torch::manual_seed(5);
      TransformerLM model(tiny(arch, checkpointing));
      model->train();
      at::Tensor tokens = torch::randint(0, 41, {3, 13}, at::kLong);
      at::Tensor positions = torch::arange(12).unsqueeze(0).expand({3, 12}).contiguous();
      at::Tensor inputs = tokens.narrow(1, 0, 12), targets = tokens.narrow(1, 1, 12).clone();
      targets.narrow(1, 0, 4).fill_(kIgnore);  // a prefix without loss, as the prefix sampler makes
      const double expected = reference_loss(model->hidden(inputs, positions), model->head_weight(), targets)
                                  .item<double>();
      at::Tensor reference = at::cross_entropy_loss(model->forward(inputs, positions).reshape({-1, 41}),
                                                    targets.reshape(-1), {}, at::Reduction::Sum, kIgnore);
      EXPECT_NEAR(reference.item<double>(), expected, 1e-5 * expected) << what;
      reference.backward();
      const auto want = grads_of(model);
      for (int64_t chunk : {1, 7, 1000}) {
        model->zero_grad();
        at::Tensor loss = lm_head_loss_sum(model->hidden(inputs, positions), model->head_weight(), targets, chunk);
        EXPECT_NEAR(loss.item<double>(), reference.item<double>(), 1e-5 * reference.item<double>()) << what;
        loss.backward();
        const auto got = grads_of(model);
        ASSERT_EQ(got.size(), want.size());
        for (const auto& [name, g] : want)
          EXPECT_LT(relative_error(got.at(name), g), 1e-5) << what << " chunk " << chunk << " " << name;
      }
    }
}

// bf16 autocast, as train.precision bf16 runs the model: the chunked head casts
// h and W to bf16 itself, as `linear` under autocast does, so it stays close to
// the unchunked bf16 head, and autocast is in effect (not the fp32 figures).
TEST(LmHeadLoss, Bf16AutocastStaysCloseToTheUnchunkedBf16Head) {
  const Case c = make_case();
  at::Tensor h32 = c.hidden.clone().requires_grad_(), w32 = c.weight.clone().requires_grad_();
  at::Tensor fp32 = reference_loss(h32, w32, c.targets);

  struct Bf16Autocast {
    Bf16Autocast() {
      at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
      at::autocast::set_autocast_enabled(at::kCPU, true);
    }
    ~Bf16Autocast() {
      at::autocast::set_autocast_enabled(at::kCPU, false);
      at::autocast::clear_cache();
    }
  };
  at::Tensor h0 = c.hidden.clone().requires_grad_(), w0 = c.weight.clone().requires_grad_();
  at::Tensor expected;
  {
    Bf16Autocast autocast;
    expected = reference_loss(h0, w0, c.targets);
  }
  expected.backward();
  ASSERT_GT(std::abs(expected.item<double>() - fp32.item<double>()), 1e-4) << "autocast is not in effect";
  for (int64_t chunk : {1, 5, 100}) {
    at::Tensor h = c.hidden.clone().requires_grad_(), w = c.weight.clone().requires_grad_();
    at::Tensor loss;
    {
      Bf16Autocast autocast;
      loss = lm_head_loss_sum(h, w, c.targets, chunk);
    }
    EXPECT_EQ(loss.scalar_type(), at::kFloat);
    EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-4 * std::abs(expected.item<double>())) << chunk;
    loss.backward();
    EXPECT_EQ(h.grad().scalar_type(), at::kFloat);
    EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
    EXPECT_LT(relative_error(h.grad(), h0.grad()), 1e-2) << "d hidden, chunk " << chunk;
    EXPECT_LT(relative_error(w.grad(), w0.grad()), 1e-2) << "d W, chunk " << chunk;
    {
      Bf16Autocast autocast;
      at::Tensor nll = lm_head_nll(c.hidden, c.weight, c.targets, chunk);
      EXPECT_NEAR(nll.sum().item<double>(), expected.item<double>(), 1e-4 * std::abs(expected.item<double>()));
    }
  }
}

}  // namespace
}  // namespace segtrain::models
