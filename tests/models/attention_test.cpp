// Attention with ALiBi from position ids, checked against a direct fp32
// computation; the ALiBi bias's padded in-place layout; the model's behaviour on
// segmented (non-contiguous) positions; no wait for the device when the caller
// gives the position bounds; bf16 autocast; activation checkpointing.
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "models/modules/attention.h"
#include "models/modules/kv_cache.h"
#include "models/modules/positions.h"
#include "models/modules/transformer.h"
#include "models/spec/auto_values.h"
#include "reference.h"
#include "tiny_models.h"

namespace segtrain::models {
namespace {

// softmax_j(q_i.k_j / sqrt(d) - m (p_i - p_j)) over j <= i, one loop at a time.
at::Tensor direct_alibi_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& positions, const at::Tensor& slopes) {
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3);
  auto out = at::zeros_like(q, at::kDouble);
  auto qd = q.to(at::kDouble), kd = k.to(at::kDouble), vd = v.to(at::kDouble);
  for (int64_t n = 0; n < b; ++n)
    for (int64_t head = 0; head < h; ++head) {
      const double m = slopes[head].item<double>();
      for (int64_t i = 0; i < t; ++i) {
        std::vector<double> scores;
        double top = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          const double pi = positions[n][i].item<double>(), pj = positions[n][j].item<double>();
          const double s = (qd[n][head][i] * kd[n][head][j]).sum().item<double>() / std::sqrt(double(d)) - m * (pi - pj);
          scores.push_back(s);
          top = std::max(top, s);
        }
        double total = 0;
        for (auto& s : scores) total += (s = std::exp(s - top));
        auto row = at::zeros({d}, at::kDouble);
        for (int64_t j = 0; j <= i; ++j) row += vd[n][head][j] * (scores[j] / total);
        out[n][head][i] = row;
      }
    }
  return out;
}

TEST(Attention, AlibiWithNonContiguousPositionsEqualsDirectReference) {
  at::manual_seed(3);
  const int64_t b = 2, h = 6, t = 9, d = 8;
  auto q = at::randn({b, h, t, d}), k = at::randn({b, h, t, d}), v = at::randn({b, h, t, d});
  // Segmented samples: chunks of a long window with their original positions.
  auto positions = at::tensor({0, 1, 2, 300, 301, 302, 900, 901, 902, 5, 6, 7, 8, 9, 1500, 1501, 1502, 1503},
                              at::kLong).view({b, t});
  auto slopes = alibi_slopes(h);
  auto mask = alibi_causal_mask(positions, slopes);
  EXPECT_FALSE(mask.requires_grad());
  EXPECT_EQ(mask.scalar_type(), at::kFloat);
  auto got = causal_attention(q, k, v, mask);
  auto want = direct_alibi_attention(q, k, v, positions, slopes);
  EXPECT_LT(test::max_abs_diff(got, want), 1e-5);
}

TEST(Attention, AlibiMaskKeepsTheFusedCpuKernelInFp32AndBf16) {
  // A mask that required grad would send SDPA to the unfused math path.
  auto q = at::randn({2, 4, 32, 8}).requires_grad_(true);
  auto positions = (at::arange(32, at::kLong) * 3).repeat({2, 1});
  auto mask = alibi_causal_mask(positions, alibi_slopes(4));
  auto fp32 = causal_attention(q, q, q, mask);
  EXPECT_NE(fp32.grad_fn()->name().find("FlashAttention"), std::string::npos) << fp32.grad_fn()->name();
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  auto bf16 = causal_attention(q, q, q, mask);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  EXPECT_NE(bf16.grad_fn()->name().find("FlashAttention"), std::string::npos) << bf16.grad_fn()->name();
}

TEST(Attention, AlibiBiasStaysFp32UnderBf16Autocast) {
  at::manual_seed(4);
  const int64_t h = 4, t = 6, d = 8;
  auto q = at::randn({1, h, t, d}), k = at::randn({1, h, t, d}), v = at::randn({1, h, t, d});
  // Far positions whose differences bf16 could not hold (the ALiBi precision study).
  auto positions = (at::arange(t, at::kLong) + 8000).view({1, t});
  positions[0][0] = 7001;
  auto mask = alibi_causal_mask(positions, alibi_slopes(h));
  at::Tensor got;
  {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    got = causal_attention(q, k, v, mask);
    at::autocast::set_autocast_enabled(at::kCPU, false);
  }
  auto want = direct_alibi_attention(q.to(at::kBFloat16).to(at::kFloat), k.to(at::kBFloat16).to(at::kFloat),
                                     v.to(at::kBFloat16).to(at::kFloat), positions, alibi_slopes(h));
  EXPECT_EQ(got.scalar_type(), at::kBFloat16);
  EXPECT_LT(test::max_abs_diff(got, want), 3e-2);
}

// -slope_h * (p_i - p_j), -inf above the diagonal: the formula written out, [B, H, T, T].
at::Tensor straightforward_alibi_mask(const at::Tensor& positions, const at::Tensor& slopes) {
  auto pos = positions.to(at::kFloat);
  auto distance = pos.unsqueeze(2) - pos.unsqueeze(1);
  auto bias = -slopes.view({1, -1, 1, 1}) * distance.unsqueeze(1);
  const int64_t t = positions.size(1);
  return bias.masked_fill(at::ones({t, t}, at::kBool).triu(1), -INFINITY);
}

TEST(Attention, AlibiMaskIsOnePaddedBufferEqualToTheFormula) {
  const int64_t h = 6;
  const auto slopes = alibi_slopes(h);
  for (int64_t t : {16, 13}) {
    const int64_t row = (t + 7) / 8 * 8;
    EXPECT_EQ(alibi_row_stride(t), row);
    auto positions =
        at::cat({at::arange(t, at::kLong).view({1, t}), (at::arange(t, at::kLong) * 3 + 100).view({1, t})});
    // Rows with their own ids (B' = B) and one row shared by every sample (B' = 1).
    for (const auto& p : {positions, positions.slice(0, 0, 1)}) {
      const int64_t b = p.size(0);
      auto mask = alibi_causal_mask(p, slopes);
      EXPECT_TRUE(at::equal(mask, straightforward_alibi_mask(p, slopes))) << "T=" << t << " B'=" << b;
      EXPECT_EQ(mask.sizes(), at::IntArrayRef({b, h, t, t}));
      EXPECT_EQ(mask.stride(3), 1);
      EXPECT_EQ(mask.stride(2), row) << "T=" << t;
      EXPECT_EQ(mask.storage().nbytes(), static_cast<size_t>(4 * b * h * t * row)) << "T=" << t << " B'=" << b;
    }
  }
}

TEST(Attention, PaddedAlibiMaskKeepsTheFusedCpuKernelAndItsResult) {
  at::manual_seed(8);
  const int64_t t = 13;  // not a multiple of 8: the mask is a strided view
  auto q = at::randn({2, 4, t, 8}).requires_grad_(true), k = at::randn({2, 4, t, 8}), v = at::randn({2, 4, t, 8});
  auto positions = at::cat({at::arange(t, at::kLong).view({1, t}), (at::arange(t, at::kLong) * 5).view({1, t})});
  auto mask = alibi_causal_mask(positions, alibi_slopes(4));
  ASSERT_FALSE(mask.is_contiguous());
  auto strided = causal_attention(q, k, v, mask);
  EXPECT_NE(strided.grad_fn()->name().find("FlashAttention"), std::string::npos) << strided.grad_fn()->name();
  auto dense = causal_attention(q, k, v, straightforward_alibi_mask(positions, alibi_slopes(4)));
  EXPECT_LT(test::max_abs_diff(strided, dense), 1e-6);
}

ModelConfig tiny(Arch arch) {
  auto c = test::tiny_model_config(arch, 50, 64);
  c.d_ff = std::nullopt;  // auto: 4 * d_model
  c.rope.rotary_pct = 0.5;
  return c;
}

// tiny(arch) with a scaling that depends on the sequence's length (factor 2).
ModelConfig tiny_dynamic(Arch arch, ExtensionMethod method) {
  auto c = tiny(arch);
  c.extension.method = method;
  c.extension.factor = 2.0;
  return c;
}

TEST(Model, RelativeSchemesDependOnlyOnPositionDifferences) {
  at::manual_seed(5);
  for (Arch arch : {Arch::gpt_neox, Arch::bloom}) {
    TransformerLM model(tiny(arch));
    model->eval();
    auto tokens = at::randint(50, {2, 10});
    auto positions = at::tensor({0, 1, 2, 3, 20, 21, 22, 40, 41, 42, 0, 5, 6, 7, 8, 30, 31, 50, 51, 52}, at::kLong)
                         .view({2, 10});
    auto a = model->forward(tokens, positions);
    auto b = model->forward(tokens, positions + 7);
    auto contiguous = model->forward(tokens, at::arange(10).repeat({2, 1}));
    EXPECT_LT(test::max_abs_diff(a, b), 1e-4) << enum_name(kArchs, arch);
    EXPECT_GT(test::max_abs_diff(a, contiguous), 1e-3) << enum_name(kArchs, arch) << " ignores position ids";
  }
}

TEST(Model, PositionBeyondTheLearnedTableIsAClearError) {
  TransformerLM model(tiny(Arch::gpt2));
  auto tokens = at::zeros({1, 3}, at::kLong);
  try {
    model->forward(tokens, at::tensor({0, 10, 64}, at::kLong).view({1, 3}));
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("interpolate"), std::string::npos) << e.what();
  }
  auto c = tiny(Arch::gpt2);
  c.extension.method = ExtensionMethod::interpolate;
  c.extension.factor = 2.0;
  TransformerLM extended(c);
  EXPECT_EQ(extended->wpe->weight.size(0), 128);
  EXPECT_NO_THROW(extended->forward(tokens, at::tensor({0, 100, 127}, at::kLong).view({1, 3})));
}

// The calls of a forward that would wait for a CUDA device: host reads of a tensor's
// values (.item(), bool(t), at::equal, ops whose output shape depends on the values)
// and blocking copies between devices (.to(device) without non_blocking, which ends
// with a stream synchronisation even host-to-device). Every ATen call goes through the
// dispatcher, which reports it to the thread's RecordFunction callbacks, so a forward
// on the CPU shows the calls it would make on a GPU. (Meta tensors, which throw on a
// host read, cannot run the model in C++: index_select has no C++ meta kernel.)
class DeviceWaits {
 public:
  DeviceWaits()
      : handle_(at::addThreadLocalCallback(
            at::RecordFunctionCallback(&on_call).needsInputs(true).scopes({at::RecordScope::FUNCTION}))) {
    seen().clear();
  }
  ~DeviceWaits() { at::removeCallback(handle_); }
  const std::vector<std::string>& calls() const { return seen(); }

 private:
  static std::vector<std::string>& seen() {
    thread_local std::vector<std::string> calls;
    return calls;
  }
  static bool blocking_copy(const at::RecordFunction& fn) {
    const auto name = fn.operator_name();
    if (!name || name->name != "aten::to") return false;
    const auto in = fn.inputs();
    if (name->overload_name == "device") return !in[3].toBool();  // (self, device, dtype, non_blocking, ...)
    if (name->overload_name == "other") return !in[2].toBool();   // (self, other, non_blocking, ...)
    if (name->overload_name == "dtype_layout")  // (self, dtype, layout, device, pin_memory, non_blocking, ...)
      return !in[3].isNone() && !in[5].toBool();
    return false;
  }
  static std::unique_ptr<at::ObserverContext> on_call(const at::RecordFunction& fn) {
    static const std::set<std::string> host_reads = {"aten::item",       "aten::_local_scalar_dense", "aten::is_nonzero",
                                                     "aten::equal",      "aten::nonzero",             "aten::masked_select",
                                                     "aten::_unique2",   "aten::unique_dim",          "aten::unique_consecutive"};
    if (host_reads.count(fn.name())) seen().push_back(fn.name());
    else if (blocking_copy(fn)) seen().push_back(std::string(fn.name()) + " (blocking copy to a device)");
    return nullptr;
  }
  at::CallbackHandle handle_;
};

std::string joined(const std::vector<std::string>& calls) {
  std::string out;
  for (const auto& c : calls) out += (out.empty() ? "" : ", ") + c;
  return out;
}

TEST(Model, ForwardWithHostBoundsNeverWaitsForTheDevice) {
  auto shared = at::arange(12, at::kLong).repeat({2, 1});
  auto own = at::tensor({0, 1, 2, 3, 4, 5, 30, 31, 32, 33, 34, 35, 0, 1, 2, 3, 90, 91, 92, 93, 94, 95, 96, 97},
                        at::kLong).view({2, 12});
  const auto dynamic_ntk = tiny_dynamic(Arch::gpt_neox, ExtensionMethod::dynamic_ntk);
  const auto dynamic_alibi = tiny_dynamic(Arch::bloom, ExtensionMethod::dynamic_interpolate);
  const auto gpt2 = test::tiny_model_config(Arch::gpt2, 50, 128);  // a table past the ids of `own`
  const std::vector<std::pair<std::string, ModelConfig>> models = {
      {"gpt2", gpt2},               {"gpt_neox dynamic_ntk", dynamic_ntk},
      {"bloom", tiny(Arch::bloom)}, {"bloom dynamic_interpolate", dynamic_alibi},
      {"llama", test::tiny_model_config(Arch::llama, 50, 64, /*grouped_kv=*/true)}};
  for (const auto& [what, config] : models) {
    TransformerLM model(config);
    for (const auto& positions : {shared, own}) {
      const auto bounds = PositionBounds::of(positions);  // on the host, as the callers do
      const auto tokens = at::randint(50, positions.sizes());
      DeviceWaits waits;
      model->forward(tokens, positions, bounds);
      EXPECT_TRUE(waits.calls().empty()) << what << ": " << joined(waits.calls());
    }
  }
  // The seam sees a wait when there is one: the convenience overload reads the bounds
  // from the tensor.
  TransformerLM model(gpt2);
  DeviceWaits waits;
  model->forward(at::zeros({2, 12}, at::kLong), own);
  EXPECT_FALSE(waits.calls().empty());
}

// RoPE's inverse frequencies and ALiBi's slopes go to the device once per length class, not at
// every forward: a static table once, a dynamic scaling's table again only when a longer sequence
// changes it (dynamic NTK past the original context, dynamic ALiBi interpolation likewise).
TEST(Model, PositionalTablesGoToTheDeviceOncePerLengthClass) {
  const auto dynamic_ntk = tiny_dynamic(Arch::gpt_neox, ExtensionMethod::dynamic_ntk);
  const auto dynamic_alibi = tiny_dynamic(Arch::bloom, ExtensionMethod::dynamic_interpolate);
  const int64_t original = original_length_of(dynamic_ntk);
  struct Case {
    std::string what;
    ModelConfig config;
    std::vector<int64_t> lengths;  // of successive forwards
    std::vector<int64_t> uploads;  // after each
  };
  const std::vector<Case> cases = {
      {"gpt_neox", tiny(Arch::gpt_neox), {8, 8, original}, {1, 1, 1}},
      {"llama", test::tiny_model_config(Arch::llama, 50, 64, /*grouped_kv=*/true), {8, 16}, {1, 1}},
      {"bloom", tiny(Arch::bloom), {8, 12}, {1, 1}},
      {"gpt2 (no table)", tiny(Arch::gpt2), {8}, {0}},
      {"gpt_neox dynamic_ntk", dynamic_ntk, {8, original, original + 8, original + 8, original + 16}, {1, 1, 2, 2, 3}},
      {"bloom dynamic_interpolate", dynamic_alibi, {8, original + 8, original + 8}, {1, 2, 2}}};
  for (const auto& c : cases) {
    TransformerLM model(c.config);
    for (size_t i = 0; i < c.lengths.size(); ++i) {
      auto positions = at::arange(c.lengths[i], at::kLong).view({1, -1});
      model->forward(at::randint(50, positions.sizes()), positions, PositionBounds::of(positions));
      EXPECT_EQ(model->positional_table_uploads(), c.uploads[i]) << c.what << ", forward " << i << " at length "
                                                                 << c.lengths[i];
    }
  }
}

// The cache's storage grows by doubling (or to the reserved size at once): what it returns equals
// the concatenation of everything appended, and one token a step copies nothing already held.
TEST(KvCache, AppendingEqualsConcatenationAndGrowsByDoubling) {
  at::manual_seed(8);
  for (int64_t reserved : {0, 40}) {
    KvLayer layer;
    layer.reserved = reserved;
    at::Tensor keys, values;
    std::vector<int64_t> capacities;
    for (int64_t step : {5, 1, 1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 7}) {
      auto k = at::randn({2, 3, step, 4}), v = at::randn({2, 3, step, 4});
      keys = keys.defined() ? at::cat({keys, k}, 2) : k;
      values = values.defined() ? at::cat({values, v}, 2) : v;
      const auto storage = layer.key_storage.defined() ? layer.key_storage.data_ptr() : nullptr;
      const int64_t capacity_before = layer.key_storage.defined() ? layer.key_storage.size(2) : 0;
      auto [all_keys, all_values] = layer.append(k, v);
      EXPECT_TRUE(at::equal(all_keys, keys));
      EXPECT_TRUE(at::equal(all_values, values));
      if (keys.size(2) <= capacity_before) {
        EXPECT_EQ(layer.key_storage.data_ptr(), storage) << "grew without need";
      }
      capacities.push_back(layer.key_storage.size(2));
    }
    if (reserved) {
      EXPECT_EQ(capacities, std::vector<int64_t>(capacities.size(), 40));  // 28 tokens fit the reservation
    } else {
      EXPECT_EQ(capacities, (std::vector<int64_t>{5, 10, 10, 10, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 40, 40}));
    }
  }
}

TEST(Model, HostBoundsOutsideTheLearnedTableGiveTheSameMessage) {
  TransformerLM model(tiny(Arch::gpt2));  // 64 rows
  auto tokens = at::zeros({1, 3}, at::kLong);
  const std::string hint = "; set model.extension.method=interpolate with a factor to extend it";
  for (const auto& [ids, id] : {std::pair{std::vector<int64_t>{0, 10, 64}, "64"}, {{-1, 0, 1}, "-1"}}) {
    auto positions = at::tensor(ids, at::kLong).view({1, 3});
    const std::string want =
        std::string("position id ") + id + " is outside the learned position table (64 rows)" + hint;
    for (bool host_bounds : {false, true}) {
      try {
        if (host_bounds) model->forward(tokens, positions, PositionBounds::of(positions));
        else model->forward(tokens, positions);
        ADD_FAILURE() << "no error for position id " << id;
      } catch (const InputError& e) {
        EXPECT_EQ(std::string(e.what()), want);
      }
    }
  }
}

TEST(Model, Bf16AutocastRunsEveryArchCloseToFp32) {
  at::manual_seed(6);
  for (Arch arch : {Arch::gpt2, Arch::gpt_neox, Arch::bloom}) {
    TransformerLM model(tiny(arch));
    auto tokens = at::randint(50, {2, 16});
    auto positions = at::arange(16).repeat({2, 1});
    auto fp32 = model->forward(tokens, positions);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    auto bf16 = model->forward(tokens, positions);
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
    EXPECT_EQ(bf16.scalar_type(), at::kBFloat16) << enum_name(kArchs, arch);
    EXPECT_LT(test::max_abs_diff(bf16, fp32), 0.1) << enum_name(kArchs, arch);
  }
}

// Each arch has transformers' modules, as its layout row (models/spec/arch.h) declares
// them: GPT-2's position table, BLOOM's embedding LayerNorm, GPT-NeoX's own head, Llama's
// RMSNorm (no bias) and its head tied as model.tie_embeddings says.
TEST(Model, EachArchBuildsTheModulesOfItsHfModel) {
  struct Expected {
    Arch arch;
    bool tie;
    bool wpe, emb_ln, lm_head, ln_f_bias, q_proj;
  };
  const Expected cases[] = {{Arch::gpt2, false, true, false, false, true, false},
                            {Arch::gpt_neox, false, false, false, true, true, false},
                            {Arch::bloom, false, false, true, false, true, false},
                            {Arch::llama, false, false, false, true, false, true},
                            {Arch::llama, true, false, false, false, false, true}};
  for (const auto& e : cases) {
    auto config = test::tiny_model_config(e.arch, 50, 64);
    config.tie_embeddings = e.tie;
    TransformerLM model(config);
    const auto names = model->named_parameters();
    const std::string what = std::string(enum_name(kArchs, e.arch)) + (e.tie ? " tied" : "");
    EXPECT_EQ(names.contains("wpe.weight"), e.wpe) << what;
    EXPECT_EQ(names.contains("emb_ln.weight"), e.emb_ln) << what;
    EXPECT_EQ(names.contains("lm_head.weight"), e.lm_head) << what;
    EXPECT_EQ(names.contains("ln_f.bias"), e.ln_f_bias) << what;
    EXPECT_EQ(names.contains("blocks.0.q_proj.weight"), e.q_proj) << what;
    EXPECT_EQ(names.contains("blocks.0.qkv.weight"), !e.q_proj) << what;
    EXPECT_TRUE(model->head_weight().is_same(e.lm_head ? model->lm_head->weight : model->wte->weight)) << what;
  }
}

TEST(Model, ActivationCheckpointingGivesTheSameGradients) {
  for (Arch arch : {Arch::gpt2, Arch::gpt_neox, Arch::bloom, Arch::llama}) {
    at::manual_seed(7);
    auto c = tiny(arch);
    if (arch_layout(arch).block == BlockKind::llama) c.rope.rotary_pct = 1.0;
    TransformerLM plain(c);
    c.activation_checkpointing = models::ActivationCheckpointing::every_block();
    TransformerLM ckpt(c);
    ckpt->load_tensors(plain->tensors(), "plain");
    auto tokens = at::randint(50, {2, 12});
    auto positions = at::tensor({0, 1, 2, 3, 4, 5, 30, 31, 32, 33, 34, 35}, at::kLong).repeat({2, 1});
    auto targets = at::randint(50, {2, 12});
    // Under bf16 autocast, so the recomputation must also restore the forward's autocast state.
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    std::vector<at::Tensor> losses;
    for (auto* m : {&plain, &ckpt}) {
      auto logits = (*m)->forward(tokens, positions);
      losses.push_back(torch::nn::functional::cross_entropy(logits.view({-1, 50}).to(at::kFloat), targets.view(-1)));
    }
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
    for (auto& loss : losses) loss.backward();
    auto p = plain->named_parameters(), q = ckpt->named_parameters();
    for (const auto& item : p) {
      ASSERT_TRUE(q[item.key()].grad().defined()) << item.key();
      EXPECT_LT(test::max_abs_diff(item.value().grad(), q[item.key()].grad()), 1e-6)
          << enum_name(kArchs, arch) << " " << item.key();
    }
  }
}

}  // namespace
}  // namespace segtrain::models
