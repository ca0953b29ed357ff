// The LoRA converter (models/modules/converters/lora.h) against PEFT itself
// (tests/models/peft_reference.py): on a tiny random Llama saved by transformers and chunk
// position ids past nothing but L_t's window, the same logits, loss and gradients of every
// parameter that trains (adapters; with LongLoRA's LoRA+ also the norms and the token
// table), and merge_and_unload()'s weights from fold. Also which parameters train on each
// block, the refusals, and a converted directory loading as the merged model.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <set>
#include <string>

#include "common/error.h"
#include "models/modules/converters/converter.h"
#include "models/modules/converters/lora.h"
#include "models/modules/hf.h"
#include "models/modules/model_io.h"
#include "models/modules/peft_adapter.h"
#include "models/modules/safetensors.h"
#include "models/spec/families/peft_config.h"
#include "reference.h"
#include "test_util.h"
#include "tiny_models.h"

namespace segtrain::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::set<std::string> trainable_names(const TransformerLM& model) {
  std::set<std::string> names;
  for (const auto& [name, p] : trainable_parameters(model)) names.insert(name);
  return names;
}

// Every adapter drawn at random (B is zero after conversion, which would leave A without
// a gradient), the same draws for the same seed; a DoRA magnitude moved a tenth off its start
// (the adapted weight's norms), so that it scales each row apart from them.
void randomize_adapters(TransformerLM& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  at::manual_seed(seed);
  for (auto& item : model->named_parameters()) {
    auto& p = item.value();
    if (item.key().ends_with(".lora_magnitude_vector.weight")) p.mul_(1 + at::randn_like(p) * 0.1);
    else if (item.key().find(".lora_") != std::string::npos) p.copy_(at::randn_like(p) * 0.1);
  }
}

struct PeftCase {
  std::string what;
  LoraConfig lora;
  std::vector<std::string> trainable;
  std::vector<std::string> target_modules;   // PEFT's names of lora.targets
  std::vector<std::string> modules_to_save;  // PEFT's names of what trainable adds
};

TEST(Lora, SameLogitsLossGradientsAndMergedWeightsAsPeftOnChunkPositions) {
  const std::string ref = test::reference_dir();
  const auto reference = read_safetensors(ref + "/llama/reference.safetensors");
  const at::Tensor tokens = reference.at("tokens"), positions = reference.at("positions");
  ASSERT_GT(positions.max().item<int64_t>(), tokens.size(1)) << "chunk positions reach past the sequence's length";
  PeftCase all{"adapters on every projection", {}, {"adapters"}, {}, {}};
  all.lora.rank = 4;
  all.lora.alpha = 8;
  all.lora.targets = {"q", "k", "v", "o", "gate", "up", "down"};
  all.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  PeftCase plus{"LoRA+: adapters on q and v, norms and embeddings", {}, {"adapters", "norms", "embeddings"}, {}, {}};
  plus.lora.rank = 2;
  plus.lora.alpha = 5;
  plus.lora.targets = {"q", "v"};
  plus.target_modules = {"q_proj", "v_proj"};
  plus.modules_to_save = {"embed_tokens", "input_layernorm", "post_attention_layernorm", "norm"};
  PeftCase dora{"DoRA: adapters with magnitudes on q, v, o and down, and norms", {}, {"adapters", "norms"}, {}, {}};
  dora.lora.rank = 3;
  dora.lora.alpha = 6;
  dora.lora.targets = {"q", "v", "o", "down"};
  dora.lora.use_dora = true;
  dora.target_modules = {"q_proj", "v_proj", "o_proj", "down_proj"};
  dora.modules_to_save = {"input_layernorm", "post_attention_layernorm", "norm"};
  for (const auto& c : {all, plus, dora}) {
    SCOPED_TRACE(c.what);
    test::TempDir dir;
    TransformerLM model = load_model(ref + "/llama");
    const auto converter = make_lora(test::lora_training(c.lora, c.trainable));
    converter->convert(model);
    std::map<std::string, at::Tensor> initial;  // DoRA's magnitudes as conversion set them
    for (const auto& [name, t] : model->tensors())
      if (name.ends_with(".lora_magnitude_vector.weight")) initial[name] = t.clone();
    EXPECT_EQ(initial.size(), c.lora.use_dora ? 2 * c.lora.targets.size() : 0);
    randomize_adapters(model, 3);
    TensorMap input = {{"tokens", tokens}, {"positions", positions}};
    for (const auto& [name, t] : model->tensors())
      if (name.find(".lora_") != std::string::npos) input[name] = t.contiguous();
    write_safetensors((dir.path() / "input.safetensors").string(), input);
    test::write_file(dir.path() / "request.json",
                     json{{"base", ref + "/llama"}, {"rank", c.lora.rank}, {"alpha", c.lora.alpha},
                          {"target_modules", c.target_modules}, {"modules_to_save", c.modules_to_save},
                          {"use_dora", c.lora.use_dora}}
                         .dump());
    const std::string cmd = test::python_command("lora " + test::shell_quote(dir.path().string()), "",
                                                 PEFT_REFERENCE_SCRIPT) +
                            " >/dev/null 2>" + test::shell_quote((dir.path() / "python.err").string());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << test::read_file(dir.path() / "python.err");
    const auto peft = read_safetensors((dir.path() / "peft.safetensors").string());
    for (const auto& [name, t] : initial)  // the adapted weight's row norms, as PEFT starts them
      EXPECT_LT(test::max_abs_diff(t, peft.at("init/" + name)), 1e-6) << name;

    model->train();
    const auto logits = model->forward(tokens, positions);
    const int64_t vocab = logits.size(-1);
    const auto loss = at::cross_entropy_loss(logits.slice(1, 0, -1).reshape({-1, vocab}),
                                             tokens.slice(1, 1).reshape({-1}));
    loss.backward();
    EXPECT_LT(test::max_abs_diff(logits, peft.at("logits")), 1e-5);
    EXPECT_NEAR(loss.item<double>(), peft.at("loss").item<double>(), 1e-6);
    // The same parameters train, with the same gradients.
    std::set<std::string> peft_trainable;
    for (const auto& [key, t] : peft)
      if (key.starts_with("grad/")) peft_trainable.insert(key.substr(5));
    EXPECT_EQ(trainable_names(model), peft_trainable);
    for (const auto& [name, p] : trainable_parameters(model)) {
      ASSERT_TRUE(p.grad().defined()) << name;
      if (peft.count("grad/" + name)) {
        EXPECT_LT(test::max_abs_diff(p.grad(), peft.at("grad/" + name)), 1e-5) << name;
      }
    }
    // fold is merge_and_unload.
    const auto folded = converter->fold(model->tensors());
    int64_t merged_weights = 0;
    for (const auto& [key, merged] : peft) {
      if (!key.starts_with("merged/")) continue;
      EXPECT_LT(test::max_abs_diff(folded.at(key.substr(7)), merged), 1e-6) << key;
      ++merged_weights;
    }
    EXPECT_EQ(merged_weights, 2 * static_cast<int64_t>(c.lora.targets.size())) << "every adapted weight of 2 layers";
    for (const auto& [name, t] : folded) EXPECT_EQ(name.find("lora_"), std::string::npos) << name;
  }
}

// Adapters start as a no-op (B zero): the converted model is the base until it trains.
// On Megatron's block the fused q/k/v projection, the output and the MLP's two are the
// targets; only the adapters (and what trainable adds) train.
TEST(Lora, StartsAsTheBaseAndTrainsOnlyWhatItAdds) {
  for (const Arch arch : {Arch::gpt2, Arch::gpt_neox, Arch::bloom, Arch::llama}) {
    SCOPED_TRACE(enum_name(kArchs, arch));
    at::manual_seed(1);
    TransformerLM model(test::tiny_model_config(arch, 40, 16));
    const auto tokens = at::randint(40, {2, 12});
    const auto positions = at::arange(0, 16, 4).repeat_interleave(3).view({1, 12}).repeat({2, 1});
    const auto before = model->forward(tokens, positions);
    LoraConfig lora;
    lora.rank = 2;
    lora.targets = arch == Arch::llama ? std::vector<std::string>{"q", "down"} : std::vector<std::string>{"qkv", "down"};
    make_lora(test::lora_training(lora, {"adapters", "head"}))->convert(model);
    EXPECT_TRUE(torch::equal(model->forward(tokens, positions), before));
    std::set<std::string> expected;
    const std::string q = arch == Arch::llama ? "q_proj" : "qkv", down = arch == Arch::llama ? "down_proj" : "fc_out";
    for (int layer = 0; layer < 2; ++layer)
      for (const auto& module : {q, down})
        for (const char* part : {".lora_A.weight", ".lora_B.weight"})
          expected.insert("blocks." + std::to_string(layer) + "." + module + part);
    expected.insert(model->lm_head ? "lm_head.weight" : "wte.weight");  // a tied head is the token table
    EXPECT_EQ(trainable_names(model), expected);
  }
}

// Megatron's blocks through PEFT: the adapters of the fused q/k/v projection, the attention
// output and the MLP's two (GPT-2's Conv1D among them, transposed: fan_in_fan_out), with the
// norms trained, written by export_peft_adapter, load in PEFT on the base with every key and give
// the logits of the merged export in transformers. Refused: Phi-3's fused q/k/v (no
// per-projection adapter in PEFT), and a trained head or a token table a head is tied to (PEFT's
// modules_to_save gave neither back: 1.1 to 2.4 apart in the logits when tried).
TEST(Lora, MegatronBlocksGoToPeftAndPhi3sFusedProjectionsAreRefused) {
  const std::string ref = test::reference_dir();
  for (const auto& [family, use_dora] :
       {std::pair<std::string, bool>{"gpt2", false}, {"gpt_neox", false}, {"bloom", false}, {"gpt2", true}}) {
    SCOPED_TRACE(family + (use_dora ? " with DoRA" : ""));
    test::TempDir dir;
    TransformerLM model = load_model(ref + "/" + family);
    LoraConfig lora;
    lora.rank = 2;
    lora.alpha = 3;
    lora.targets = {"qkv", "o", "up", "down"};
    lora.use_dora = use_dora;
    const auto converter = make_lora(test::lora_training(lora, {"adapters", "norms"}));
    converter->convert(model);
    randomize_adapters(model, 11);
    {
      torch::NoGradGuard no_grad;  // what else trains moves off the base too, so a key PEFT drops would show
      for (const auto& [name, p] : trainable_parameters(model))
        if (name.find(".lora_") == std::string::npos) p.add_(at::randn_like(p) * 0.05);
    }
    export_peft_adapter(model, lora, (dir.path() / "peft").string());
    TransformerLM merged(model->config());
    merged->load_tensors(converter->fold(model->tensors()), "folded");
    export_hf(merged, (dir.path() / "merged").string());
    const auto config = json::parse(test::read_file(dir.path() / "peft/adapter_config.json"));
    EXPECT_EQ(config["fan_in_fan_out"], family == "gpt2") << "GPT-2's Conv1D holds [in, out]";
    EXPECT_EQ(config["use_dora"], use_dora);
    const auto saved = read_safetensors((dir.path() / "peft/adapter_model.safetensors").string());
    EXPECT_EQ(saved.count("base_model.model.transformer.h.0.attn.c_attn.lora_magnitude_vector"),
              use_dora && family == "gpt2" ? 1U : 0U) << "PEFT's name of a DoRA magnitude";
    const std::string cmd =
        test::python_command("load " + test::shell_quote(ref + "/" + family) + " " +
                                 test::shell_quote((dir.path() / "peft").string()) + " " +
                                 test::shell_quote((dir.path() / "merged").string()),
                             "", PEFT_REFERENCE_SCRIPT) +
        " >" + test::shell_quote((dir.path() / "load.json").string()) + " 2>" +
        test::shell_quote((dir.path() / "python.err").string());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << test::read_file(dir.path() / "load.json")
                                           << test::read_file(dir.path() / "python.err");
    const auto compared = json::parse(test::read_file(dir.path() / "load.json"));
    EXPECT_LT(compared["max_diff"].get<double>(), 1e-5) << compared.dump();
    EXPECT_GT(compared["base_diff"].get<double>(), 1e-3) << compared.dump();
  }
  for (const auto& [family, trainable] : {std::pair<std::string, std::string>{"gpt_neox", "head"}, {"gpt2", "embeddings"}}) {
    TransformerLM model = load_model(ref + "/" + family);
    LoraConfig lora;
    lora.rank = 2;
    lora.targets = {"qkv"};
    make_lora(test::lora_training(lora, {"adapters", trainable}))->convert(model);
    test::TempDir dir;
    const std::string head = test::input_error_of([&] { export_peft_adapter(model, lora, (dir.path() / "p").string()); });
    EXPECT_NE(head.find("PEFT's modules_to_save does not give back as trained"), std::string::npos) << head;
  }
  TransformerLM phi3 = load_model(ref + "/phi3");
  LoraConfig lora;
  lora.rank = 2;
  lora.targets = {"q", "o"};
  make_lora(test::lora_training(lora, {"adapters"}))->convert(phi3);
  test::TempDir dir;
  const std::string fused = test::input_error_of([&] { export_peft_adapter(phi3, lora, (dir.path() / "p").string()); });
  EXPECT_NE(fused.find("blocks.0.q_proj.weight is part of phi3's fused tensor model.layers.0.self_attn.qkv_proj.weight"), std::string::npos)
      << fused;
}

TEST(Lora, RefusesTargetsItsBlockLacksAndSettingsThatCannotTrain) {
  LoraConfig lora;
  lora.rank = 2;
  lora.targets = {"q"};
  TransformerLM gpt2(test::tiny_model_config(Arch::gpt2, 40, 16));
  const std::string q = test::input_error_of([&] { make_lora(test::lora_training(lora, {"adapters"}))->convert(gpt2); });
  EXPECT_NE(q.find("model.adapters.lora.targets: q is no projection of model.arch gpt2's block (it has o, up, down, "
                   "qkv; q, k and v are one projection, qkv)"),
            std::string::npos)
      << q;
  lora.targets = {"qkv"};
  TransformerLM llama(test::tiny_model_config(Arch::llama, 40, 16));
  EXPECT_NE(test::input_error_of([&] { make_lora(test::lora_training(lora, {"adapters"}))->convert(llama); }).find("qkv is no projection of model.arch llama"),
            std::string::npos);
  lora.targets = {"q"};
  EXPECT_NE(test::input_error_of([&] { make_lora(test::lora_training(lora, {"norms"}))->convert(llama); }).find("train.trainable: must list adapters"),
            std::string::npos);
  lora.dropout = 0.1;
  // Dropout with any block recomputed (every one, the first 2, auto's) is refused; with none it converts.
  for (const auto& checkpointing :
       {models::ActivationCheckpointing::every_block(), models::ActivationCheckpointing::first_blocks(2),
        models::ActivationCheckpointing{models::ActivationCheckpointing::Kind::automatic, 0},
        models::ActivationCheckpointing::first_blocks(0)}) {
    auto checkpointed = test::tiny_model_config(Arch::llama, 40, 16);
    checkpointed.activation_checkpointing = checkpointing;
    TransformerLM recomputed(checkpointed);
    const std::string why =
        test::input_error_of([&] { make_lora(test::lora_training(lora, {"adapters"}))->convert(recomputed); });
    EXPECT_EQ(why.find("another dropout mask") != std::string::npos, checkpointing.any()) << why;
  }
  lora.rank = 0;
  EXPECT_NE(test::input_error_of([&] { make_lora(test::lora_training(lora, {"adapters"})); }).find("needs a rank > 0"), std::string::npos);
}

// An adapter PEFT made (random A and B, saved modules moved off the base), continued:
// adapter_config.json read as segtrain's settings (targets by list or by regular expression,
// modules_to_save as train.trainable's groups), its weights loaded over the converted base,
// and the model gives PEFT's logits. What segtrain cannot continue as it is, refused naming
// the key; the base found as transformers finds it offline.
TEST(Lora, ContinuesAnAdapterPeftMadeWithItsSettingsAndLogits) {
  const std::string ref = test::reference_dir();
  const auto reference = read_safetensors(ref + "/llama/reference.safetensors");
  const at::Tensor tokens = reference.at("tokens"), positions = reference.at("positions");
  struct Case {
    json target_modules, modules_to_save;
    int64_t rank;
    double alpha;
    std::vector<std::string> targets, trainable;
    bool use_dora = false;
  };
  const std::vector<Case> cases = {
      {{"q_proj", "v_proj", "down_proj"}, {"input_layernorm", "post_attention_layernorm", "norm"}, 4, 8,
       {"q", "v", "down"}, {"adapters", "norms"}},
      {R"(.*\.(k_proj|o_proj|gate_proj))", nullptr, 2, 5, {"k", "o", "gate"}, {"adapters"}},
      {{"q_proj", "up_proj"}, {"input_layernorm", "post_attention_layernorm", "norm"}, 3, 6, {"q", "up"},
       {"adapters", "norms"}, true}};
  test::TempDir keep;  // case 1's adapter, for the refusals below
  for (const auto& c : cases) {
    SCOPED_TRACE(c.target_modules.dump());
    test::TempDir dir;
    write_safetensors((dir.path() / "input.safetensors").string(), {{"tokens", tokens}, {"positions", positions}});
    test::write_file(dir.path() / "request.json",
                     json{{"base", ref + "/llama"}, {"rank", c.rank}, {"alpha", c.alpha},
                          {"target_modules", c.target_modules}, {"modules_to_save", c.modules_to_save},
                          {"base_model_name_or_path", ref + "/llama"}, {"use_dora", c.use_dora}}
                         .dump());
    const std::string cmd = test::python_command("save " + test::shell_quote(dir.path().string()), "",
                                                 PEFT_REFERENCE_SCRIPT) +
                            " >/dev/null 2>" + test::shell_quote((dir.path() / "python.err").string());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << test::read_file(dir.path() / "python.err");
    const std::string adapter = (dir.path() / "adapter").string();
    TransformerLM model = load_model(ref + "/llama");
    const PeftAdapterConfig config = read_peft_adapter_config(adapter, model->config());
    EXPECT_EQ(config.lora.rank, c.rank);
    EXPECT_EQ(config.lora.alpha, c.alpha);
    EXPECT_EQ(config.lora.targets, c.targets);
    EXPECT_EQ(config.lora.trainable, c.trainable);
    EXPECT_EQ(config.lora.use_dora, c.use_dora);
    EXPECT_EQ(find_peft_base(adapter, config.base_model), ref + "/llama");
    make_lora(config.lora)->convert(model);
    EXPECT_EQ(load_peft_adapter(model, adapter), static_cast<int64_t>(trainable_parameters(model).size()));
    model->eval();
    const auto logits = model->forward(tokens, positions);
    EXPECT_LT(test::max_abs_diff(logits, read_safetensors((dir.path() / "peft.safetensors").string()).at("logits")), 1e-5);
    if (c.rank == 4) fs::copy(adapter, keep.path() / "adapter");
  }

  const std::string adapter = (keep.path() / "adapter").string();
  {
    // A group train.trainable adds to what the adapter saved starts from the base's weights.
    TransformerLM more = load_model(ref + "/llama");
    const auto base_wte = more->tensors().at("wte.weight").clone();
    LoraConfig lora;
    lora.rank = 4;
    lora.alpha = 8;
    lora.targets = {"q", "v", "down"};
    make_lora(test::lora_training(lora, {"adapters", "norms", "embeddings"}))->convert(more);
    EXPECT_EQ(load_peft_adapter(more, adapter), static_cast<int64_t>(trainable_parameters(more).size()) - 1);
    EXPECT_TRUE(at::equal(more->tensors().at("wte.weight"), base_wte));
    // An adapter the settings name but the file lacks is refused.
    auto tensors = read_safetensors(adapter + "/adapter_model.safetensors");
    tensors.erase("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
    test::TempDir partial;
    fs::copy(adapter, partial.path() / "a");
    write_safetensors((partial.path() / "a/adapter_model.safetensors").string(), tensors);
    TransformerLM again = load_model(ref + "/llama");
    make_lora(test::lora_training(lora, {"adapters", "norms"}))->convert(again);
    const std::string missing = test::input_error_of([&] { load_peft_adapter(again, (partial.path() / "a").string()); });
    EXPECT_NE(missing.find("holds no blocks.1.down_proj.lora_B.weight, an adapter its adapter_config.json's "
                           "target_modules name"),
              std::string::npos) << missing;
  }
  TransformerLM base = load_model(ref + "/llama");
  const auto original = json::parse(test::read_file(keep.path() / "adapter/adapter_config.json"));
  auto refusal = [&](const std::string& key, const json& value) {
    json edited = original;
    edited[key] = value;
    test::write_file(keep.path() / "adapter/adapter_config.json", edited.dump());
    return test::input_error_of([&] { read_peft_adapter_config(adapter, base->config()); });
  };
  EXPECT_NE(refusal("use_dora", "yes").find("adapter_config.json: use_dora: expected true or false, got \"yes\""),
            std::string::npos);
  EXPECT_NE(refusal("use_rslora", true).find("adapter_config.json: use_rslora: true is not supported"), std::string::npos);
  EXPECT_NE(refusal("layers_to_transform", {0}).find("segtrain adapts every layer"), std::string::npos);
  const std::string nope = refusal("target_modules", {"q_proj", "nope"});
  EXPECT_NE(nope.find("target_modules: 'nope' matches no projection segtrain adapts (q, k, v, o, gate, up, down)"),
            std::string::npos) << nope;
  const std::string one_layer = refusal("target_modules", {"model.layers.1.self_attn.q_proj"});
  EXPECT_NE(one_layer.find("adapt layers.{}.self_attn.q_proj on 1 of the base's 2 layers"), std::string::npos) << one_layer;
  refusal("modules_to_save", {"embed_tokens"});
  EXPECT_EQ(read_peft_adapter_config(adapter, base->config()).lora.trainable, (std::vector<std::string>{"adapters", "embeddings"}));
  ModelConfig tied_config = base->config();  // this base's head is its own; a tied one's is the token table
  tied_config.tie_embeddings = true;
  const std::string tied = test::input_error_of([&] { read_peft_adapter_config(adapter, tied_config); });
  EXPECT_NE(tied.find("holds the token table, which the base's head is tied to"), std::string::npos) << tied;
  const std::string mlp = refusal("modules_to_save", {"gate_proj"});
  EXPECT_NE(mlp.find("'gate_proj' holds model.layers.0.mlp.gate_proj, which segtrain does not train besides adapters"),
            std::string::npos) << mlp;
  EXPECT_NE(refusal("peft_type", "IA3").find("peft_type: \"IA3\"; segtrain continues LORA adapters"), std::string::npos);
  // Weights that do not fit the settings: r 3 in the config, 4 in the file.
  refusal("r", 3);
  LoraConfig three;
  three.rank = 3;
  three.targets = {"q", "v", "down"};
  make_lora(test::lora_training(three, {"adapters", "norms"}))->convert(base);
  const std::string shape = test::input_error_of([&] { load_peft_adapter(base, adapter); });
  EXPECT_NE(shape.find("adapter_model.safetensors: tensor base_model.model.model.layers.0."), std::string::npos) << shape;
  EXPECT_NE(shape.find(".lora_A.weight has shape [4, "), std::string::npos) << shape;
  EXPECT_NE(shape.find(".lora_A.weight [3, "), std::string::npos) << shape;

  // The base by model id in the hub cache (HF_HUB_CACHE), as transformers finds it offline; by a path
  // relative to the adapter's folder.
  test::TempDir cache;
  const fs::path snapshot = cache.path() / "models--org--tiny-llama/snapshots/abc123";
  fs::create_directories(snapshot);
  test::write_file(snapshot / "config.json", "{}");
  test::write_file(cache.path() / "models--org--tiny-llama/refs/main", "abc123\n");
  setenv("HF_HUB_CACHE", cache.path().c_str(), 1);
  EXPECT_EQ(find_peft_base(adapter, "org/tiny-llama"), snapshot.string());
  EXPECT_EQ(find_peft_base(adapter, "org/absent"), "");
  unsetenv("HF_HUB_CACHE");
  fs::create_directories(keep.path() / "base");
  test::write_file(keep.path() / "base/config.json", "{}");
  EXPECT_EQ(find_peft_base(adapter, "../base"), (fs::path(adapter) / "../base").string());
}

// An adapter's weights as loaded (issue 58): a NaN or an infinite value (also a float64 past
// float32's range) and an integer tensor are refused naming the file, the tensor and what is
// wrong (old main: loaded silently, the run then skipped every step, or cast without a word);
// float16 loads exactly, float64 rounded to the float32 parameter, said once in a log line.
TEST(Lora, AdapterWeightsThatAreNotFiniteFloatsAreRefusedNamingTheTensor) {
  test::TempDir tmp;
  LoraConfig lora;
  lora.rank = 2;
  lora.alpha = 4;
  lora.targets = {"q", "v"};
  auto converted = [&] {
    TransformerLM model(test::tiny_model_config(Arch::llama, 40, 16));
    make_lora(test::lora_training(lora, {"adapters"}))->convert(model);
    return model;
  };
  TransformerLM trained = converted();
  randomize_adapters(trained, 3);
  const std::string adapter = (tmp.path() / "adapter").string();
  export_peft_adapter(trained, lora, adapter);
  const std::string file = adapter + "/adapter_model.safetensors";
  const auto saved = read_safetensors(file);
  const std::string key = "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight";
  ASSERT_TRUE(saved.count(key));
  // The adapter's `key` replaced by `value`; what loading it into a converted model says.
  auto load_with = [&](const at::Tensor& value) {
    auto tensors = saved;
    tensors[key] = value;
    write_safetensors(file, tensors);
    TransformerLM model = converted();
    return test::input_error_of([&] { load_peft_adapter(model, adapter); });
  };
  const at::Tensor good = saved.at(key);
  at::Tensor nan = good.clone();
  nan[0][1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(load_with(nan), file + ": tensor " + key + " holds 1 NaN or infinite value (of " +
                                std::to_string(good.numel()) + "): a model with them computes nothing; use an adapter "
                                "whose weights are finite");
  at::Tensor inf = good.clone();
  inf[1][0] = std::numeric_limits<float>::infinity();
  inf[1][1] = -std::numeric_limits<float>::infinity();
  EXPECT_NE(load_with(inf).find("tensor " + key + " holds 2 NaN or infinite values"), std::string::npos);
  at::Tensor huge = good.to(at::kDouble);
  huge[0][0] = 1e300;
  EXPECT_NE(load_with(huge).find("tensor " + key + " holds 1 NaN or infinite value (of " + std::to_string(good.numel()) +
                                 ", held as float32 (F32))"),
            std::string::npos);
  for (const auto type : {at::kChar, at::kInt, at::kByte}) {
    const std::string name = type == at::kChar ? "int8 (I8)" : type == at::kInt ? "int32 (I32)" : "uint8 (U8)";
    EXPECT_EQ(load_with((good * 100).to(type)), file + ": tensor " + key + " is " + name + "; an adapter's weights are "
                                                    "floating point (float32, bfloat16, float16 or float64)");
  }
  // Floating types load: float16 exactly as stored, float64 rounded to the float32 parameter.
  const std::string v_a = "blocks.1.v_proj.lora_A.weight";
  for (const auto type : {at::kHalf, at::kBFloat16, at::kDouble}) {
    auto tensors = saved;
    tensors[key] = good.to(type);
    write_safetensors(file, tensors);
    TransformerLM model = converted();
    EXPECT_EQ(load_peft_adapter(model, adapter), 8) << "2 layers x (q, v) x (A, B)";
    const auto loaded = model->tensors();
    EXPECT_TRUE(at::equal(loaded.at(v_a), good.to(type).to(at::kFloat))) << c10::toString(type);
    EXPECT_TRUE(at::equal(loaded.at("blocks.0.q_proj.lora_B.weight"), trained->tensors().at("blocks.0.q_proj.lora_B.weight")));
  }
}

// A converted model's directory (its tensors with the adapters, converters.json) loads as
// the plain model with each adapter merged: W + (alpha / rank) B A, computed here by hand.
TEST(Lora, ADirectoryWithAdaptersLoadsMergedAndItsRecordRoundTrips) {
  test::TempDir tmp;
  TransformerLM model(test::tiny_model_config(Arch::llama, 40, 16));
  LoraConfig lora;
  lora.rank = 3;
  lora.alpha = 6;
  lora.targets = {"o", "up"};
  Converters converters;
  converters.push_back(make_lora(test::lora_training(lora, {"adapters", "norms"})));
  apply_converters(converters, model);
  randomize_adapters(model, 5);
  save_model_dir(model, (tmp.path() / "m").string());
  const std::string record = converters_to_json(converters);
  EXPECT_EQ(converters_to_json(converters_from_json(record, "c.json")), record);
  test::write_file(tmp.path() / "m" / kConvertersFile, record);
  const TransformerLM loaded = load_model((tmp.path() / "m").string());
  const auto weights = model->tensors();
  for (const auto& [name, t] : loaded->tensors()) {
    at::Tensor expected = weights.at(name);
    const std::string prefix = name.substr(0, name.size() - std::string(".weight").size());
    if (weights.count(prefix + ".lora_A.weight"))
      expected = expected + 2.0 * at::matmul(weights.at(prefix + ".lora_B.weight"), weights.at(prefix + ".lora_A.weight"));
    EXPECT_LT(test::max_abs_diff(t, expected), 1e-6) << name;
  }
  EXPECT_EQ(loaded->tensors().size(), weights.size() - 8) << "2 layers x 2 projections x (A, B) folded away";
  const std::string bad = test::input_error_of([] {
    converters_from_json(R"({"converters": [{"name": "lora", "rank": "4"}]})", "c.json");
  });
  EXPECT_NE(bad.find("c.json: the lora converter needs \"rank\" (an integer)"), std::string::npos) << bad;
  EXPECT_EQ(record.find("use_dora"), std::string::npos) << "a LoRA record is written as before DoRA";

  // DoRA's record says so, and its directory loads with each row scaled to its magnitude.
  TransformerLM dora_model(test::tiny_model_config(Arch::llama, 40, 16));
  lora.use_dora = true;
  Converters dora;
  dora.push_back(make_lora(lora));
  apply_converters(dora, dora_model);
  randomize_adapters(dora_model, 6);
  save_model_dir(dora_model, (tmp.path() / "d").string());
  const std::string dora_record = converters_to_json(dora);
  EXPECT_NE(dora_record.find("\"use_dora\": true"), std::string::npos) << dora_record;
  EXPECT_EQ(converters_to_json(converters_from_json(dora_record, "c.json")), dora_record);
  test::write_file(tmp.path() / "d" / kConvertersFile, dora_record);
  const auto dora_weights = dora_model->tensors();
  for (const auto& [name, t] : load_model((tmp.path() / "d").string())->tensors()) {
    const std::string prefix = name.substr(0, name.size() - std::string(".weight").size());
    if (!dora_weights.count(prefix + ".lora_A.weight")) continue;
    const auto adapted = dora_weights.at(name) + 2.0 * at::matmul(dora_weights.at(prefix + ".lora_B.weight"),
                                                                  dora_weights.at(prefix + ".lora_A.weight"));
    const auto magnitude = dora_weights.at(prefix + ".lora_magnitude_vector.weight");
    EXPECT_LT(test::max_abs_diff(t, (magnitude / adapted.norm(2, {1})).unsqueeze(1) * adapted), 1e-6) << name;
  }
}

}  // namespace
}  // namespace segtrain::models
