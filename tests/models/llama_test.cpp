// The Llama family (model.arch llama) against transformers itself: tiny random
// LlamaForCausalLM (GQA; head_dim, biases, tied head), Qwen2ForCausalLM (q/k/v
// biases, tied head), Qwen3ForCausalLM, MistralForCausalLM and Phi3ForCausalLM
// (fused q/k/v and gate/up; LongRoPE) made by tests/models/hf_reference.py
// give the same logits here on contiguous and on chunk-like position ids and the
// same loss at L_t; exports (also after a training step, and with the RoPE
// extensions transformers can express) load in transformers with the same logits
// and come back into segtrain unchanged; config.json variants segtrain cannot
// honour are refused naming the key.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/nn/functional/loss.h>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "export_cases.h"
#include "models/modules/attention.h"
#include "models/modules/hf.h"
#include "models/modules/model_io.h"
#include "models/modules/positions.h"
#include "models/modules/safetensors.h"
#include "backward_graph.h"
#include "reference.h"

namespace segtrain::models {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::vector<std::string> kFamily = {"llama", "llama_bias", "qwen2", "qwen3", "mistral", "phi3", "phi3_longrope"};

at::Tensor logits_at(TransformerLM& model, const at::Tensor& tokens, const at::Tensor& positions) {
  torch::NoGradGuard no_grad;
  model->eval();
  return model->forward(tokens, positions);
}

at::Tensor arange_positions(const at::Tensor& tokens) {
  return at::arange(tokens.size(1), at::kLong).repeat({tokens.size(0), 1});
}

// transformers' causal-LM loss: mean cross-entropy of each token's next token.
double next_token_loss(const at::Tensor& logits, const at::Tensor& tokens) {
  const int64_t v = logits.size(-1);
  auto l = logits.slice(1, 0, logits.size(1) - 1).reshape({-1, v});
  return torch::nn::functional::cross_entropy(l, tokens.slice(1, 1).reshape(-1)).item<double>();
}

TEST(LlamaImport, ConfigsOfTheThreeFamiliesMapToLlama) {
  const auto ref = test::reference_dir();
  const auto llama = read_model_config(ref + "/llama");
  EXPECT_EQ(llama.arch, Arch::llama);
  EXPECT_EQ(n_kv_heads_of(llama), 2);
  EXPECT_EQ(head_dim_of(llama), 16);
  EXPECT_FALSE(llama.qkv_bias || llama.o_bias || llama.mlp_bias || llama.tie_embeddings);
  EXPECT_DOUBLE_EQ(llama.layer_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(llama.rope.rotary_pct, 1.0);
  const auto bias = read_model_config(ref + "/llama_bias");
  EXPECT_EQ(head_dim_of(bias), 16);
  EXPECT_EQ(n_kv_heads_of(bias), 1);
  EXPECT_TRUE(bias.qkv_bias && bias.o_bias && bias.mlp_bias && bias.tie_embeddings);
  EXPECT_DOUBLE_EQ(bias.rope.theta, 500000.0);
  const auto qwen2 = read_model_config(ref + "/qwen2");
  EXPECT_TRUE(qwen2.qkv_bias && !qwen2.o_bias && !qwen2.mlp_bias && qwen2.tie_embeddings);
  EXPECT_FALSE(qwen2.sliding_window);
  EXPECT_EQ(*read_model_config(ref + "/mistral").sliding_window, 4096);
  const auto qwen3 = read_model_config(ref + "/qwen3");
  EXPECT_TRUE(qwen3.qk_norm && !qwen3.qkv_bias && !qwen3.o_bias && !qwen3.mlp_bias);
  EXPECT_EQ(head_dim_of(qwen3), 16);
  EXPECT_FALSE(llama.qk_norm || bias.qk_norm || qwen2.qk_norm);
  // Qwen3's q/k norms are one RMSNorm a head: head_dim weights, read from the folder.
  auto qwen3_model = load_model(ref + "/qwen3");
  auto qwen3_block = qwen3_model->blocks[0]->as<LlamaBlockImpl>();
  ASSERT_TRUE(qwen3_block->q_norm && qwen3_block->k_norm);
  EXPECT_EQ(qwen3_block->q_norm->weight.sizes(), (std::vector<int64_t>{16}));
  EXPECT_GT(test::max_abs_diff(qwen3_block->k_norm->weight, at::ones({16})), 1e-3) << "the folder's weights, not ones";
  // Grouped-query attention keeps k/v at n_kv_heads * head_dim.
  auto model = load_model(ref + "/llama");
  auto block = model->blocks[0]->as<LlamaBlockImpl>();
  EXPECT_EQ(block->k_proj->weight.sizes(), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(block->q_proj->weight.sizes(), (std::vector<int64_t>{64, 64}));
}

TEST(LlamaImport, LogitsAndLossMatchTransformersOnContiguousAndChunkPositions) {
  const auto ref = test::reference_dir();
  for (const auto& name : kFamily) {
    const std::string dir = ref + "/" + name;
    auto model = load_model(dir);
    const auto expected = read_safetensors(dir + "/reference.safetensors");
    const auto& tokens = expected.at("tokens");
    auto got = logits_at(model, tokens, arange_positions(tokens));
    ASSERT_EQ(got.sizes(), expected.at("logits").sizes()) << name;
    EXPECT_LT(test::max_abs_diff(got, expected.at("logits")), 1e-4) << name;
    auto chunk = logits_at(model, tokens, expected.at("positions"));
    EXPECT_LT(test::max_abs_diff(chunk, expected.at("chunk_logits")), 1e-4) << name << " on chunk positions";
    EXPECT_GT(test::max_abs_diff(chunk, got), 1e-3) << name << ": the position ids changed nothing";
    // Perplexity at L_t (64, the models' max_position_embeddings).
    const auto& ppl_tokens = expected.at("ppl_tokens");
    const double loss = next_token_loss(logits_at(model, ppl_tokens, arange_positions(ppl_tokens)), ppl_tokens);
    const double theirs = expected.at("loss").item<double>();
    EXPECT_NEAR(std::exp(loss), std::exp(theirs), 1e-5 * std::exp(theirs)) << name;
  }
}

// Phi-3's fused tensors become Llama's q/k/v and gate/up: q the first n_heads *
// head_dim rows of qkv_proj, then k and v (n_kv_heads * head_dim each), gate the first
// half of gate_up_proj. Its hub-style LongRoPE (rope_scaling of type and factors, the
// original length at the top) is read with transformers' Phi-3 defaults.
TEST(Phi3Import, FusedTensorsSplitIntoLlamasBlockAndLongRopeIsRead) {
  const auto ref = test::reference_dir();
  const auto phi3 = read_model_config(ref + "/phi3");
  EXPECT_EQ(phi3.arch, Arch::llama);
  EXPECT_EQ(phi3.hf_model_type, "phi3");
  EXPECT_EQ(n_kv_heads_of(phi3), 2);
  EXPECT_FALSE(phi3.qkv_bias || phi3.o_bias || phi3.mlp_bias || phi3.qk_norm || phi3.tie_embeddings);
  EXPECT_FALSE(phi3.sliding_window);
  EXPECT_EQ(phi3.extension.method, ExtensionMethod::none);
  const auto hf = read_safetensors(ref + "/phi3/model.safetensors");
  auto model = load_model(ref + "/phi3");
  auto block = model->blocks[1]->as<LlamaBlockImpl>();
  const auto& qkv = hf.at("model.layers.1.self_attn.qkv_proj.weight");
  EXPECT_TRUE(at::equal(block->q_proj->weight, qkv.slice(0, 0, 64)));
  EXPECT_TRUE(at::equal(block->k_proj->weight, qkv.slice(0, 64, 96)));
  EXPECT_TRUE(at::equal(block->v_proj->weight, qkv.slice(0, 96, 128)));
  const auto& gate_up = hf.at("model.layers.1.mlp.gate_up_proj.weight");
  EXPECT_TRUE(at::equal(block->gate_proj->weight, gate_up.slice(0, 0, 96)));
  EXPECT_TRUE(at::equal(block->up_proj->weight, gate_up.slice(0, 96, 192)));
  const auto longrope = read_model_config(ref + "/phi3_longrope");
  EXPECT_EQ(longrope.extension.method, ExtensionMethod::longrope);
  EXPECT_DOUBLE_EQ(factor_of(longrope), 2.0);
  EXPECT_EQ(original_length_of(longrope), 64);
  EXPECT_EQ(longrope.extension.longrope.long_factor.size(), 8u);
  EXPECT_FALSE(longrope.extension.longrope.attention_factor);
  EXPECT_TRUE(longrope.tie_embeddings);
  EXPECT_EQ(n_kv_heads_of(longrope), 1);
}

// What transformers' Phi-3 reads differently from Llama, and what segtrain refuses.
TEST(Phi3Import, Phi3ConfigKeysAreReadAsTransformersReadsThem) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  const auto base = json::parse(test::read_file(ref + "/phi3_longrope/config.json"));
  auto folder = [&](const std::string& name, const std::function<void(json&)>& edit) {
    auto cfg = base;
    edit(cfg);
    fs::create_directories(dir / name);
    test::write_file(dir / name + "/config.json", cfg.dump());
    fs::copy_file(ref + "/phi3_longrope/model.safetensors", dir / name + "/model.safetensors");
    return std::string(dir / name);
  };
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  // "su" and "yarn" are old names of longrope in Phi3Config, not YaRN.
  for (const std::string old : {"su", "yarn"})
    EXPECT_EQ(read_model_config(folder(old, [&](json& c) { c["rope_scaling"]["type"] = old; })).extension.method,
              ExtensionMethod::longrope) << old;
  // Without the top-level length, Phi3Config's default 4096 is the original length
  // (and the factor max_position_embeddings / 4096).
  const auto no_original = read_model_config(folder("no_original", [](json& c) {
    c.erase("original_max_position_embeddings");
    c.erase("rms_norm_eps");
    c["max_position_embeddings"] = 16384;
  }));
  EXPECT_EQ(original_length_of(no_original), 4096);
  EXPECT_DOUBLE_EQ(factor_of(no_original), 4.0);
  EXPECT_DOUBLE_EQ(no_original.layer_norm_eps, 1e-5) << "Phi3Config's default, not Llama's 1e-6";
  const auto linear = error_of([&] {
    read_model_config(folder("linear", [](json& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; }));
  });
  EXPECT_NE(linear.find("rope_scaling type \"linear\""), std::string::npos) << linear;
  const auto partial = error_of([&] { read_model_config(folder("partial", [](json& c) { c["partial_rotary_factor"] = 0.75; })); });
  EXPECT_NE(partial.find("partial_rotary_factor"), std::string::npos) << partial;
  const auto dropout = error_of([&] { read_model_config(folder("dropout", [](json& c) { c["resid_pdrop"] = "x"; })); });
  EXPECT_NE(dropout.find("resid_pdrop"), std::string::npos) << dropout;
  // Phi-3 mini's window is kept and longer sequences refused.
  const auto window = folder("window", [](json& c) { c["sliding_window"] = 16; });
  EXPECT_EQ(*read_model_config(window).sliding_window, 16);
  auto model = load_model(window);
  auto tokens = at::randint(97, {1, 24});
  EXPECT_NE(error_of([&] { logits_at(model, tokens, arange_positions(tokens)); }).find("sliding_window"),
            std::string::npos);
  // A fused tensor whose rows do not add up to its parts names the tensor.
  const auto heads = folder("heads", [](json& c) { c["num_key_value_heads"] = 2; });
  const auto sizes = error_of([&] { load_model(heads); });
  EXPECT_NE(sizes.find("qkv_proj.weight"), std::string::npos) << sizes;
}

// A Phi-3 model Phi3ForCausalLM cannot reproduce is written as LlamaForCausalLM: an
// explicit longrope attention_factor (4.x's Phi-3 block holds none), a factor whose
// extended length is no whole number of positions.
TEST(Phi3Export, WhatPhi3CannotExpressIsExportedAsLlama) {
  const auto ref = test::reference_dir();
  test::TempDir out;
  auto config = read_model_config(ref + "/phi3_longrope");
  config.extension.longrope.attention_factor = 1.3;
  export_hf(load_model(ref + "/phi3_longrope", config), out / "attention");
  config.extension.longrope.attention_factor.reset();
  config.extension.factor = 2.01;
  export_hf(load_model(ref + "/phi3_longrope", config), out / "fraction");
  for (const char* name : {"attention", "fraction"}) {
    const auto cfg = json::parse(test::read_file(out / (std::string(name) + "/config.json")));
    EXPECT_EQ(cfg["architectures"][0], "LlamaForCausalLM") << name;
  }
  EXPECT_DOUBLE_EQ(*read_model_config(out / "attention").extension.longrope.attention_factor, 1.3);
}

// A checkpoint whose config.json carries a rope scaling (transformers 5's
// rope_parameters, or 4.x's rope_scaling for llama3 and longrope as hub
// checkpoints write them) is read with it in effect: logits and perplexity equal
// transformers' at L_t and at 2 L_t.
TEST(LlamaImport, EveryRopeScalingOfACheckpointGivesTransformersPerplexityAtLtAndTwiceLt) {
  const auto ref = test::reference_dir();
  const std::vector<std::pair<std::string, ExtensionMethod>> scalings = {  // none first: the others differ from it
      {"none", ExtensionMethod::none},     {"linear", ExtensionMethod::interpolate},
      {"dynamic", ExtensionMethod::dynamic_ntk}, {"yarn", ExtensionMethod::yarn},
      {"llama3", ExtensionMethod::llama3}, {"longrope", ExtensionMethod::longrope}};
  at::Tensor unscaled;
  for (const auto& [name, method] : scalings) {
    const std::string dir = ref + "/llama_rope_" + name;
    auto model = load_model(dir);
    EXPECT_EQ(model->config().extension.method, method) << name;
    if (method != ExtensionMethod::none) {
      EXPECT_DOUBLE_EQ(factor_of(model->config()), 2.0) << name;
      EXPECT_EQ(original_length_of(model->config()), 64) << name;
    }
    const auto expected = read_safetensors(dir + "/reference.safetensors");
    const auto& tokens = expected.at("tokens");
    const auto lt = tokens.slice(1, 0, 64);
    const double at_lt = next_token_loss(logits_at(model, lt, arange_positions(lt)), lt);
    const auto logits = logits_at(model, tokens, arange_positions(tokens));
    const double at_2lt = next_token_loss(logits, tokens);
    for (const auto& [ours, key] : {std::pair{at_lt, "loss_lt"}, std::pair{at_2lt, "loss_2lt"}}) {
      const double theirs = std::exp(expected.at(key).item<double>());
      EXPECT_NEAR(std::exp(ours), theirs, 1e-5 * theirs) << name << " " << key;
    }
    EXPECT_LT(test::max_abs_diff(logits, expected.at("logits_2lt")), 1e-4) << name;
    if (method == ExtensionMethod::none) {
      unscaled = logits;
    } else {
      EXPECT_GT(test::max_abs_diff(logits, unscaled), 1e-3) << name << ": the scaling changed nothing at 2 L_t";
    }
  }
}

// Segmented sequences (Karypis et al.'s chunk: L_t = 64 tokens in 4 segments that keep
// their positions up to 2 L_t) are scored as transformers scores them given the same
// position_ids, under every rope scaling. Length-dependent scalings (dynamic NTK,
// longrope's short/long factors) take the length from the largest position id + 1,
// as transformers does, not from the 64 tokens: old main gave longrope's short
// factors here, training a different model from the one it exports.
TEST(LlamaImport, EveryRopeScalingScoresSegmentedPositionsAsTransformers) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  const std::vector<std::string> names = {"none", "linear", "dynamic", "yarn", "llama3", "longrope"};
  at::manual_seed(11);
  const auto tokens = at::randint(97, {2, 64});
  const auto positions =
      at::cat({at::arange(0, 16), at::arange(40, 56), at::arange(70, 86), at::arange(100, 116)}).repeat({2, 1});
  std::vector<std::string> folders;
  for (const auto& name : names) {
    const fs::path folder = dir.path() / name;
    fs::copy(ref + "/llama_rope_" + name, folder, fs::copy_options::recursive);
    write_safetensors((folder / "input.safetensors").string(), {{"tokens", tokens}, {"positions", positions}});
    folders.push_back(folder.string());
  }
  test::hf_logits(folders);
  for (size_t i = 0; i < names.size(); ++i) {
    auto model = load_model(folders[i]);
    const auto ours = logits_at(model, tokens, positions);
    const auto theirs = read_safetensors(folders[i] + "/hf_logits.safetensors").at("logits");
    EXPECT_LT(test::max_abs_diff(ours, theirs), 1e-4) << names[i];
    const double ppl = std::exp(next_token_loss(ours, tokens)), hf_ppl = std::exp(next_token_loss(theirs, tokens));
    EXPECT_NEAR(ppl, hf_ppl, 1e-5 * hf_ppl) << names[i];
  }
}

TEST(LlamaAttention, GroupedQueryAttentionEqualsRepeatedKeysAndValues) {
  at::manual_seed(3);
  auto q = at::randn({2, 6, 10, 8}), k = at::randn({2, 2, 10, 8}), v = at::randn({2, 2, 10, 8});
  auto repeated = causal_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1));
  EXPECT_LT(test::max_abs_diff(causal_attention(q, k, v), repeated), 1e-6);
  // With a mask (ALiBi, a KV cache's read) as well.
  auto mask = at::randn({1, 1, 10, 10}).masked_fill(at::ones({10, 10}, at::kBool).triu(1), -std::numeric_limits<float>::infinity());
  auto repeated_masked = causal_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), mask);
  EXPECT_LT(test::max_abs_diff(causal_attention(q, k, v, mask), repeated_masked), 1e-6);
}

// Where no fused kernel takes fewer key/value heads than query heads (CUDA in fp32, or with a
// mask: measured on an H200, docs/gpus.md), k and v are repeated; elsewhere SDPA's enable_gqa.
TEST(LlamaAttention, KeysAndValuesAreRepeatedOnlyWhereNoFusedKernelTakesGroupedHeads) {
  EXPECT_TRUE(repeats_kv_heads(c10::DeviceType::CUDA, at::kFloat, /*masked=*/false));
  EXPECT_TRUE(repeats_kv_heads(c10::DeviceType::CUDA, at::kBFloat16, /*masked=*/true));
  EXPECT_FALSE(repeats_kv_heads(c10::DeviceType::CUDA, at::kBFloat16, /*masked=*/false));
  EXPECT_FALSE(repeats_kv_heads(c10::DeviceType::CUDA, at::kHalf, /*masked=*/false));
  for (bool masked : {false, true}) {
    EXPECT_FALSE(repeats_kv_heads(c10::DeviceType::CPU, at::kFloat, masked));
    EXPECT_FALSE(repeats_kv_heads(c10::DeviceType::CPU, at::kBFloat16, masked));
  }
}

// A llama from scratch (GQA, tied head): activation checkpointing recomputes the blocks it names
// (model.activation_checkpointing: none, the first N, every block, auto before the trainer chose:
// every block) in backward, one checkpoint node each, and gives the same gradients.
TEST(LlamaTraining, ActivationCheckpointingGivesTheSameGradients) {
  ModelConfig c;
  c.arch = Arch::llama;
  c.vocab_size = 50, c.d_model = 32, c.n_layers = 4, c.n_heads = 4, c.n_kv_heads = 2, c.d_ff = 48;
  c.max_positions = 32, c.tie_embeddings = true;
  auto tokens = at::randint(50, {2, 17});
  auto positions = at::cat({at::arange(0, 8), at::arange(20, 28)}).repeat({2, 1});
  using Kind = ActivationCheckpointing::Kind;
  const std::vector<std::pair<ActivationCheckpointing, int>> cases{
      {{}, 0},
      {ActivationCheckpointing::first_blocks(1), 1},
      {ActivationCheckpointing::first_blocks(3), 3},
      {ActivationCheckpointing::every_block(), 4},
      {{Kind::automatic, 0}, 4}};
  std::vector<std::map<std::string, at::Tensor>> grads;
  for (const auto& [checkpointing, recomputed] : cases) {
    c.activation_checkpointing = checkpointing;
    at::manual_seed(5);
    TransformerLM model(c);
    EXPECT_EQ(model->tensors().count("lm_head.weight"), 0u);
    model->train();
    auto logits = model->forward(tokens.slice(1, 0, 16), positions);
    auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 50}), tokens.slice(1, 1).reshape(-1));
    EXPECT_EQ(test::count_nodes_named(loss.grad_fn().get(), "CheckpointBackward"), recomputed) << recomputed;
    loss.backward();
    std::map<std::string, at::Tensor> g;
    for (const auto& item : model->named_parameters()) g[item.key()] = item.value().grad().clone();
    grads.push_back(g);
  }
  for (size_t k = 1; k < grads.size(); ++k)
    for (const auto& [name, g] : grads[0]) EXPECT_LT(test::max_abs_diff(g, grads[k].at(name)), 1e-6) << k << " " << name;
  // The trainer's auto sets its choice on the built model: the next forward recomputes that many.
  c.activation_checkpointing = {Kind::automatic, 0};
  TransformerLM model(c);
  model->train();
  model->set_activation_checkpointing(ActivationCheckpointing::first_blocks(2));
  auto logits = model->forward(tokens.slice(1, 0, 16), positions);
  EXPECT_EQ(test::count_nodes_named(logits.grad_fn().get(), "CheckpointBackward"), 2);
  // The first block's: its node's input is the embedding's output.
  c.activation_checkpointing = ActivationCheckpointing::first_blocks(1);
  TransformerLM first(c);
  first->train();
  auto first_logits = first->forward(tokens.slice(1, 0, 16), positions);
  std::vector<std::string> fed_by;
  test::for_each_node(first_logits.grad_fn().get(), [&](torch::autograd::Node& node) {
    if (node.name().find("CheckpointBackward") == std::string::npos) return;
    for (const auto& edge : node.next_edges())
      if (edge.function) fed_by.push_back(edge.function->name());
  });
  ASSERT_EQ(fed_by.size(), 1u);
  EXPECT_NE(fed_by[0].find("Embedding"), std::string::npos) << fed_by[0] << ": not the first block recomputed";
  // A frozen embedding (a LoRA run's base): the first block's input needs no gradient but its
  // parameters do; it is recomputed all the same (it once kept its activations: N counted one block
  // too many) and gives the gradients of keeping them. A frozen block is not recomputed, the
  // trainable one after it is.
  auto frozen_embedding = [&](ActivationCheckpointing checkpointing, int frozen_blocks, int nodes) {
    c.activation_checkpointing = checkpointing;
    at::manual_seed(5);
    TransformerLM m(c);
    m->wte->weight.requires_grad_(false);
    for (int b = 0; b < frozen_blocks; ++b)
      for (auto& p : m->blocks[static_cast<size_t>(b)]->parameters()) p.requires_grad_(false);
    m->train();
    auto logits = m->forward(tokens.slice(1, 0, 16), positions);
    auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 50}), tokens.slice(1, 1).reshape(-1));
    EXPECT_EQ(test::count_nodes_named(loss.grad_fn().get(), "CheckpointBackward"), nodes)
        << checkpointing.of(4) << " of 4, " << frozen_blocks << " frozen";
    loss.backward();
    std::map<std::string, at::Tensor> g;
    for (const auto& item : m->named_parameters())
      if (item.value().requires_grad()) g[item.key()] = item.value().grad().clone();
    return g;
  };
  const auto kept = frozen_embedding({}, 0, 0);
  EXPECT_EQ(kept.count("wte.weight"), 0u);
  for (const auto& [name, g] : frozen_embedding(ActivationCheckpointing::first_blocks(1), 0, 1))
    EXPECT_LT(test::max_abs_diff(g, kept.at(name)), 1e-6) << name;
  EXPECT_EQ(frozen_embedding(ActivationCheckpointing::every_block(), 0, 4).size(), kept.size());
  frozen_embedding(ActivationCheckpointing::first_blocks(1), 1, 0);
  frozen_embedding(ActivationCheckpointing::first_blocks(2), 1, 1);
  model->eval();  // nothing recomputes outside training
  EXPECT_EQ(test::count_nodes_named(model->forward(tokens.slice(1, 0, 16), positions).grad_fn().get(), "CheckpointBackward"), 0);
}

const std::vector<double> kShortFactor = {1.0, 1.02, 1.04, 1.06, 1.08, 1.1, 1.12, 1.14};
const std::vector<double> kLongFactor = {1.0, 1.4, 1.8, 2.2, 2.6, 3.0, 3.4, 3.8};

// Exports of the family under every extension, some after a training step, with
// segtrain's logits on chunk-like position ids next to each folder's input.
struct Exports {
  std::vector<test::ExportCase> cases = {
      {"llama", "llama", ExtensionMethod::none, 1.0, 24, false, "LlamaForCausalLM"},
      {"llama_trained", "llama", ExtensionMethod::none, 1.0, 40, true, "LlamaForCausalLM"},
      {"llama_bias_trained", "llama_bias", ExtensionMethod::none, 1.0, 40, true, "LlamaForCausalLM"},
      {"qwen2_trained", "qwen2", ExtensionMethod::none, 1.0, 40, true, "Qwen2ForCausalLM"},
      {"mistral_trained", "mistral", ExtensionMethod::none, 1.0, 40, true, "MistralForCausalLM"},
      {"qwen3_trained", "qwen3", ExtensionMethod::none, 1.0, 40, true, "Qwen3ForCausalLM"},
      {"qwen3_yarn", "qwen3", ExtensionMethod::yarn, 2.0, 120, true, "Qwen3ForCausalLM"},
      {"llama_linear", "llama", ExtensionMethod::interpolate, 2.0, 120, true, "LlamaForCausalLM"},
      {"llama_ntk", "llama", ExtensionMethod::ntk, 2.0, 120, false, "LlamaForCausalLM"},
      {"llama_dynamic", "llama", ExtensionMethod::dynamic_ntk, 2.0, 120, false, "LlamaForCausalLM"},
      {"qwen2_yarn", "qwen2", ExtensionMethod::yarn, 2.0, 120, true, "Qwen2ForCausalLM"},
      {"llama_llama3", "llama", ExtensionMethod::llama3, 2.0, 120, true, "LlamaForCausalLM"},
      {"llama_longrope", "llama", ExtensionMethod::longrope, 2.0, 120, true, "LlamaForCausalLM"},
      // Phi-3 stays Phi-3 where Phi3ForCausalLM reproduces the RoPE (default, a grown
      // theta, longrope), and is written as Llama for the scalings it does not have.
      {"phi3_trained", "phi3", ExtensionMethod::none, 1.0, 40, true, "Phi3ForCausalLM"},
      {"phi3_ntk", "phi3", ExtensionMethod::ntk, 2.0, 120, false, "Phi3ForCausalLM"},
      {"phi3_longrope", "phi3", ExtensionMethod::longrope, 2.0, 120, true, "Phi3ForCausalLM"},
      {"phi3_longrope_base", "phi3_longrope", ExtensionMethod::longrope, 2.0, 120, true, "Phi3ForCausalLM"},
      {"phi3_linear", "phi3", ExtensionMethod::interpolate, 2.0, 120, true, "LlamaForCausalLM"},
      {"phi3_dynamic", "phi3", ExtensionMethod::dynamic_ntk, 2.0, 120, false, "LlamaForCausalLM"},
      {"phi3_yarn", "phi3_longrope", ExtensionMethod::yarn, 2.0, 120, true, "LlamaForCausalLM"},
      {"phi3_llama3", "phi3", ExtensionMethod::llama3, 2.0, 120, true, "LlamaForCausalLM"},
  };
  std::vector<std::string> dirs;
  std::map<std::string, at::Tensor> ours, before, positions_of;
};

Exports make_exports(const fs::path& out) {
  const auto ref = test::reference_dir();
  Exports e;
  at::manual_seed(17);
  for (const auto& c : e.cases) {
    auto config = test::config_with_extension(ref + "/" + c.source, c.method, c.factor);
    if (c.method == ExtensionMethod::llama3) config.extension.llama3 = {2.0, 8.0};
    if (c.method == ExtensionMethod::longrope) config.extension.longrope = {kShortFactor, kLongFactor, std::nullopt};
    auto model = load_model(ref + "/" + c.source, config);
    auto tokens = at::randint(97, {2, c.length});
    // Chunk-like ids (gaps, original positions) for all but the dynamic case,
    // whose transformers counterpart grows its base from the largest id it sees.
    auto positions = at::cat({at::arange(c.length / 2), at::arange(c.length / 2 + 7, c.length + 7)}).repeat({2, 1});
    if (c.method == ExtensionMethod::dynamic_ntk) positions = arange_positions(tokens);
    if (c.train_step) {
      e.before[c.name] = logits_at(model, tokens, positions);
      test::train_one_step(model, std::min<int64_t>(c.length, 60), /*gap=*/5);
    }
    e.ours[c.name] = logits_at(model, tokens, positions);
    const std::string dir = out / c.name;
    export_hf(model, dir);
    write_safetensors(dir + "/input.safetensors", {{"tokens", tokens}, {"positions", positions}});
    e.dirs.push_back(dir);
    e.positions_of[c.name] = positions;
  }
  return e;
}

TEST(LlamaExport, TransformersLoadsExportsWithTheSameLogitsAndSegtrainReloadsThem) {
  test::TempDir out;
  auto [cases, dirs, ours, before, positions_of] = make_exports(out.path());
  test::hf_logits(dirs);
  for (const auto& c : cases) {
    const std::string dir = out / c.name;
    auto theirs = read_safetensors(dir + "/hf_logits.safetensors").at("logits");
    EXPECT_LT(test::max_abs_diff(ours[c.name], theirs), 1e-4) << c.name;
    if (c.train_step) {
      EXPECT_GT(test::max_abs_diff(before[c.name], theirs), 1e-3) << c.name << ": the step changed nothing";
    }
    const auto cfg = json::parse(test::read_file(dir + "/config.json"));
    EXPECT_EQ(cfg["architectures"][0], c.architecture) << c.name;
    EXPECT_TRUE(cfg["segtrain"]["transformers_reproduces"].get<bool>()) << c.name;
    // Back into segtrain: the same config (extension included) and logits.
    auto back = load_model(dir);
    // ntk goes out as default rope with the grown rope_theta, and comes back so.
    EXPECT_EQ(back->config().extension.method, c.method == ExtensionMethod::ntk ? ExtensionMethod::none : c.method)
        << c.name;
    auto tokens = read_safetensors(dir + "/input.safetensors").at("tokens");
    EXPECT_LT(test::max_abs_diff(logits_at(back, tokens, positions_of[c.name]), ours[c.name]), 1e-5) << c.name;
  }
  const auto llama = json::parse(test::read_file(out / "llama/config.json"));
  EXPECT_EQ(llama["model_type"], "llama");
  EXPECT_EQ(llama["num_key_value_heads"], 2);
  const auto linear = json::parse(test::read_file(out / "llama_linear/config.json"));
  EXPECT_EQ(linear["rope_parameters"]["rope_type"], "linear");
  EXPECT_EQ(linear["max_position_embeddings"], 128);
  const auto yarn = json::parse(test::read_file(out / "qwen2_yarn/config.json"));
  EXPECT_EQ(yarn["model_type"], "qwen2");
  EXPECT_EQ(yarn["rope_parameters"]["rope_type"], "yarn");
  EXPECT_EQ(json::parse(test::read_file(out / "mistral_trained/config.json"))["sliding_window"], 4096);
  // The 4.x block holds only keys transformers validates for the type.
  const auto llama3 = json::parse(test::read_file(out / "llama_llama3/config.json"));
  EXPECT_EQ(llama3["rope_scaling"], json({{"rope_type", "llama3"}, {"factor", 2.0}, {"low_freq_factor", 2.0},
                                         {"high_freq_factor", 8.0}, {"original_max_position_embeddings", 64}}));
  EXPECT_EQ(llama3["max_position_embeddings"], 128);
  const auto longrope = json::parse(test::read_file(out / "llama_longrope/config.json"));
  EXPECT_EQ(longrope["rope_scaling"]["long_factor"], json(kLongFactor));
  EXPECT_EQ(longrope["original_max_position_embeddings"], 64);
  EXPECT_TRUE(json::parse(test::read_file(out / "llama/config.json"))["rope_scaling"].is_null());
  // Phi-3's longrope block as 4.x's Phi3Config validates it (exactly these keys), its
  // fused tensors written fused, and the export read back as Phi-3 again.
  const auto phi3 = json::parse(test::read_file(out / "phi3_longrope/config.json"));
  EXPECT_EQ(phi3["model_type"], "phi3");
  EXPECT_EQ(phi3["rope_scaling"], json({{"type", "longrope"}, {"short_factor", kShortFactor}, {"long_factor", kLongFactor}}));
  EXPECT_EQ(phi3["max_position_embeddings"], 128);
  EXPECT_EQ(phi3["original_max_position_embeddings"], 64);
  const auto weights = read_safetensors(out / "phi3_longrope/model.safetensors");
  EXPECT_EQ(weights.at("model.layers.1.self_attn.qkv_proj.weight").sizes(), (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(weights.at("model.layers.1.mlp.gate_up_proj.weight").sizes(), (std::vector<int64_t>{192, 64}));
  EXPECT_EQ(weights.count("model.layers.1.self_attn.q_proj.weight"), 0u);
  EXPECT_EQ(read_model_config(out / "phi3_yarn").hf_model_type, "llama");
  EXPECT_EQ(read_model_config(out / "phi3_trained").hf_model_type, "phi3");
}

// transformers 4.x (installed beside the venv by scripts/setup.sh) loads the same
// exports with the same logits: it reads rope_scaling, not 5.x's rope_parameters.
TEST(LlamaExport, Transformers4LoadsTheExportsWithTheSameLogits) {
  if (!fs::is_directory(SEGTRAIN_TRANSFORMERS4))
    SKIP_NOT_APPLICABLE("transformers 4.x is not installed at " << SEGTRAIN_TRANSFORMERS4 << " (make setup installs it)");
  test::TempDir out;
  const auto e = make_exports(out.path());
  test::hf_logits(e.dirs, SEGTRAIN_TRANSFORMERS4);
  const auto version = test::read_file(e.dirs.front() + "/transformers_version");
  EXPECT_EQ(version.rfind("4.", 0), 0u) << version;
  for (const auto& c : e.cases) {
    auto theirs = read_safetensors(out / (c.name + "/hf_logits.safetensors")).at("logits");
    EXPECT_LT(test::max_abs_diff(e.ours.at(c.name), theirs), 1e-4) << c.name;
  }
}

TEST(LlamaImport, WhatSegtrainCannotHonourIsRefusedNamingTheKey) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  const auto base = json::parse(test::read_file(ref + "/llama/config.json"));
  auto folder = [&](const std::string& name, const std::function<void(json&)>& edit) {
    auto cfg = base;
    edit(cfg);
    fs::create_directories(dir / name);
    test::write_file(dir / name + "/config.json", cfg.dump());
    fs::copy_file(ref + "/llama/model.safetensors", dir / name + "/model.safetensors");
    return std::string(dir / name);
  };
  auto expect_error = [](const std::function<void()>& f, const std::vector<std::string>& needles) {
    try {
      f();
      ADD_FAILURE() << "no error, expected one mentioning " << needles.front();
    } catch (const InputError& e) {
      for (const auto& needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // transformers 4.x writes rope_theta and rope_scaling, 5.x one rope_parameters block.
  auto rope_v4 = [](json& c, const json& scaling) {
    c["rope_theta"] = c["rope_parameters"]["rope_theta"];
    c.erase("rope_parameters");
    c["rope_scaling"] = scaling;
  };
  for (const std::string type : {"su", "mrope", "default_but_misspelled"}) {
    const json scaling = {{"rope_type", type}, {"factor", 8.0}, {"original_max_position_embeddings", 32}};
    expect_error([&] { read_model_config(folder("v4_" + type, [&](json& c) { rope_v4(c, scaling); })); },
                 {"rope_type", type, "config.json"});
    auto v5 = scaling;
    v5["rope_theta"] = 10000.0;
    expect_error([&] { read_model_config(folder("v5_" + type, [&](json& c) { c["rope_parameters"] = v5; })); },
                 {"rope_type", type, "config.json"});
  }
  // llama3 and longrope are read, but not without their own parameters.
  const json no_band = {{"rope_type", "llama3"}, {"factor", 8.0}, {"original_max_position_embeddings", 32}};
  expect_error([&] { read_model_config(folder("llama3_no_band", [&](json& c) { rope_v4(c, no_band); })); },
               {"low_freq_factor", "config.json"});
  const json short_list = {{"rope_type", "longrope"}, {"factor", 2.0}, {"original_max_position_embeddings", 32},
                           {"short_factor", {1.0, 1.0}}, {"long_factor", {1.0, 1.0}}};
  expect_error([&] { read_model_config(folder("longrope_short", [&](json& c) { rope_v4(c, short_list); })); },
               {"longrope.short_factor", "8"});
  expect_error([&] { read_model_config(folder("gelu", [](json& c) { c["hidden_act"] = "gelu"; })); }, {"hidden_act"});
  expect_error([&] { read_model_config(folder("partial", [](json& c) { c["partial_rotary_factor"] = 0.5; })); },
               {"partial_rotary_factor"});
  expect_error([&] { read_model_config(folder("gqa", [](json& c) { c["num_key_value_heads"] = 3; })); },
               {"n_kv_heads"});
  // A Mistral window shorter than the sequence is refused, not ignored.
  const auto window = folder("window", [](json& c) {
    c["model_type"] = "mistral", c["architectures"] = {"MistralForCausalLM"}, c["sliding_window"] = 16;
  });
  EXPECT_EQ(*read_model_config(window).sliding_window, 16);
  auto model = load_model(window);
  auto tokens = at::randint(97, {1, 24});
  expect_error([&] { logits_at(model, tokens, arange_positions(tokens)); }, {"sliding_window"});
  EXPECT_EQ(logits_at(model, tokens.slice(1, 0, 16), arange_positions(tokens.slice(1, 0, 16))).size(1), 16);
  // Qwen2's window applies only where layer_types say sliding_attention.
  const auto qwen = json::parse(test::read_file(ref + "/qwen2/config.json"));
  auto sliding = qwen;
  sliding["use_sliding_window"] = true, sliding["sliding_window"] = 32, sliding["layer_types"] = {"full_attention", "sliding_attention"};
  test::write_file(dir / "qwen_window/config.json", sliding.dump());
  EXPECT_EQ(*read_model_config(dir / "qwen_window").sliding_window, 32);
  sliding["layer_types"] = {"full_attention", "full_attention"};
  test::write_file(dir / "qwen_full/config.json", sliding.dump());
  EXPECT_FALSE(read_model_config(dir / "qwen_full").sliding_window);
  // rope_scaling types segtrain has map to the extension (old "type" key too).
  const auto linear = folder("linear", [&](json& c) { rope_v4(c, {{"type", "linear"}, {"factor", 2.0}}); });
  EXPECT_EQ(read_model_config(linear).extension.method, ExtensionMethod::interpolate);
  EXPECT_DOUBLE_EQ(*read_model_config(linear).extension.factor, 2.0);
  const auto dynamic = folder("dynamic", [](json& c) {
    c["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 4.0}, {"rope_theta", 10000.0}};
  });
  EXPECT_EQ(read_model_config(dynamic).extension.method, ExtensionMethod::dynamic_ntk);
}

}  // namespace
}  // namespace segtrain::models
