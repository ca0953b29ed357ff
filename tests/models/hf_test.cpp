// HF interop against transformers itself: tiny random models made and saved by
// transformers must give the same logits here, and what we export (also after a
// training step, with every extension transformers can express) must give the
// same logits when transformers loads it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "export_cases.h"
#include "models/modules/hf.h"
#include "models/modules/model_io.h"
#include "models/modules/positions.h"
#include "models/modules/safetensors.h"
#include "models/spec/model_config_json.h"
#include "reference.h"
#include "test_util.h"

namespace segtrain::models {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

at::Tensor contiguous_positions(const at::Tensor& tokens) {
  return at::arange(tokens.size(1), at::kLong).repeat({tokens.size(0), 1});
}

at::Tensor logits_of(TransformerLM& model, const at::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  model->eval();
  return model->forward(tokens, contiguous_positions(tokens));
}

TEST(HfImport, LogitsMatchTransformersForEveryArch) {
  const auto ref = test::reference_dir();
  for (const std::string name : {"gpt2", "gpt2_noprefix", "gpt_neox", "bloom"}) {
    const std::string dir = ref + "/" + name;
    auto model = load_model(dir);
    const auto expected = read_safetensors(dir + "/reference.safetensors");
    auto got = logits_of(model, expected.at("tokens"));
    ASSERT_EQ(got.sizes(), expected.at("logits").sizes()) << name;
    EXPECT_LT(test::max_abs_diff(got, expected.at("logits")), 1e-4) << name;
  }
  EXPECT_EQ(read_model_config(ref + "/bloom").n_heads, 6);
  EXPECT_DOUBLE_EQ(read_model_config(ref + "/gpt_neox").rope.rotary_pct, 0.5);
}

TEST(HfExport, TransformersLoadsExportsWithTheSameLogits) {
  const auto ref = test::reference_dir();
  test::TempDir out;
  const std::vector<test::ExportCase> cases = {
      {"gpt2", "gpt2"},
      {"gpt_neox", "gpt_neox"},
      {"bloom", "bloom"},
      {"gpt2_interpolated", "gpt2", ExtensionMethod::interpolate, 2.0, 64},
      {"neox_linear", "gpt_neox", ExtensionMethod::interpolate, 4.0, 80},
      {"neox_ntk", "gpt_neox", ExtensionMethod::ntk, 4.0, 80},
      {"neox_dynamic", "gpt_neox", ExtensionMethod::dynamic_ntk, 4.0, 80},
      {"neox_yarn", "gpt_neox", ExtensionMethod::yarn, 4.0, 80},
      {"gpt2_trained", "gpt2", ExtensionMethod::interpolate, 2.0, 64, true},
      {"neox_yarn_trained", "gpt_neox", ExtensionMethod::yarn, 2.0, 60, true},
      {"bloom_trained", "bloom", ExtensionMethod::none, 1.0, 40, true},
  };
  std::vector<std::string> dirs;
  std::map<std::string, at::Tensor> ours, before;
  at::manual_seed(11);
  for (const auto& c : cases) {
    auto config = test::config_with_extension(ref + "/" + c.source, c.method, c.factor);
    auto model = load_model(ref + "/" + c.source, config);
    auto tokens = at::randint(97, {2, c.length});
    if (c.train_step) {
      before[c.name] = logits_of(model, tokens);
      test::train_one_step(model, c.length, /*gap=*/1);
    }
    ours[c.name] = logits_of(model, tokens);
    const std::string dir = out / c.name;
    export_hf(model, dir);
    write_safetensors(dir + "/input.safetensors", {{"tokens", tokens}});
    dirs.push_back(dir);
  }
  test::hf_logits(dirs);
  for (const auto& c : cases) {
    auto theirs = read_safetensors(out / c.name + "/hf_logits.safetensors").at("logits");
    EXPECT_LT(test::max_abs_diff(ours[c.name], theirs), 1e-4) << c.name;
    if (c.train_step) {
      EXPECT_GT(test::max_abs_diff(before[c.name], theirs), 1e-3) << c.name << ": the step changed nothing";
    }
  }
  const auto gpt2 = json::parse(test::read_file(out / "gpt2_interpolated/config.json"));
  EXPECT_EQ(gpt2["n_positions"], 64);
  const auto yarn = json::parse(test::read_file(out / "neox_yarn/config.json"));
  EXPECT_EQ(yarn["rope_parameters"]["rope_type"], "yarn");
  EXPECT_TRUE(yarn["segtrain"]["transformers_reproduces"].get<bool>());
  // Importing the export gives the extension back.
  auto back = read_model_config(out / "neox_yarn");
  EXPECT_EQ(back.extension.method, ExtensionMethod::yarn);
  EXPECT_DOUBLE_EQ(*back.extension.factor, 4.0);
  EXPECT_EQ(*back.extension.original_length, 32);
}

TEST(HfExport, AlibiExtensionsAreMarkedAsNotReproducedAndComeBack) {
  const auto ref = test::reference_dir();
  test::TempDir out;
  auto config = test::config_with_extension(ref + "/bloom", ExtensionMethod::ntk_alibi, 2.0);
  auto model = load_model(ref + "/bloom", config);
  export_hf(model, out / "bloom");
  const auto cfg = json::parse(test::read_file(out / "bloom/config.json"));
  EXPECT_FALSE(cfg["segtrain"]["transformers_reproduces"].get<bool>());
  EXPECT_EQ(cfg["segtrain"]["extension"]["method"], "ntk_alibi");
  auto reloaded = load_model(out / "bloom");
  EXPECT_EQ(reloaded->config().extension.method, ExtensionMethod::ntk_alibi);
  auto tokens = at::randint(97, {1, 30});
  EXPECT_LT(test::max_abs_diff(logits_of(model, tokens), logits_of(reloaded, tokens)), 1e-6);
}

// Loading builds the model without drawing its weights and reads them one tensor at a
// time: torch's generator is where it was, and with WeightDtype::as_stored a bf16 folder
// gives bf16 parameters (never expanded) holding the file's values.
TEST(HfImport, LoadingDrawsNoRandomNumbersAndCanKeepTheStoredDtype) {
  const auto ref = test::reference_dir();
  test::TempDir out;
  for (const std::string name : {"gpt2", "llama", "phi3"}) {
    const auto fp32 = load_model(ref + "/" + name);
    const std::string bf16_dir = out / (name + "-bf16");
    export_hf(fp32, bf16_dir, {.dtype = at::kBFloat16});
    torch::manual_seed(7);
    const auto expected = at::rand({8});
    torch::manual_seed(7);
    const auto stored = load_model(bf16_dir, std::nullopt, WeightDtype::as_stored);
    const auto widened = load_model(bf16_dir);
    EXPECT_TRUE(at::equal(at::rand({8}), expected)) << name << ": loading drew random numbers";
    const auto file = read_hf_tensors(bf16_dir);
    for (const auto& [param, t] : stored->tensors()) {
      EXPECT_EQ(t.scalar_type(), at::kBFloat16) << name << ": " << param;
      EXPECT_EQ(widened->tensors().at(param).scalar_type(), at::kFloat) << name << ": " << param;
      EXPECT_TRUE(at::equal(t.to(at::kFloat), file.at(param))) << name << ": " << param;
      EXPECT_TRUE(at::equal(widened->tensors().at(param), file.at(param))) << name << ": " << param;
      EXPECT_TRUE(at::equal(t, fp32->tensors().at(param).to(at::kBFloat16))) << name << ": " << param;
    }
  }
}

TEST(ModelDir, SaveAndLoadRoundTripsWeightsAndConfig) {
  const auto ref = test::reference_dir();
  test::TempDir out;
  auto config = test::config_with_extension(ref + "/gpt2", ExtensionMethod::interpolate, 3.0);
  config.activation_checkpointing = models::ActivationCheckpointing::every_block();
  auto model = load_model(ref + "/gpt2", config);
  save_model_dir(model, out / "ckpt");
  EXPECT_EQ(detect_model_format(out / "ckpt"), ModelFormat::segtrain);
  EXPECT_EQ(detect_model_format(ref + "/gpt2"), ModelFormat::hf);
  auto back = load_model(out / "ckpt");
  EXPECT_EQ(model_config_to_json(back->config()), model_config_to_json(config));
  EXPECT_EQ(back->wpe->weight.size(0), 96);
  for (const auto& [name, t] : model->tensors()) EXPECT_TRUE(at::equal(back->tensors().at(name), t)) << name;
  // A run directory resolves to its final/.
  save_model_dir(model, out / "run/final");
  EXPECT_EQ(read_model_config(out / "run").extension.method, ExtensionMethod::interpolate);
}

// model_config.json's activation_checkpointing: false, true, the first N or "auto" written and read back;
// a file from before N and auto (a bool) reads as it meant; anything else is refused naming the key.
TEST(ModelDir, ActivationCheckpointingRoundTripsThroughModelConfigJson) {
  using Kind = ActivationCheckpointing::Kind;
  ModelConfig c;
  for (const ActivationCheckpointing& a : {ActivationCheckpointing{}, ActivationCheckpointing::every_block(),
                                           ActivationCheckpointing::first_blocks(3), ActivationCheckpointing{Kind::automatic, 0}}) {
    c.activation_checkpointing = a;
    EXPECT_EQ(model_config_from_json(model_config_to_json(c), "m.json").activation_checkpointing, a);
  }
  auto json = nlohmann::json::parse(model_config_to_json(c));
  EXPECT_EQ(json["activation_checkpointing"], "auto");
  json["activation_checkpointing"] = true;
  EXPECT_EQ(model_config_from_json(json.dump(), "m.json").activation_checkpointing, ActivationCheckpointing::every_block());
  json["activation_checkpointing"] = 2;
  EXPECT_EQ(model_config_from_json(json.dump(), "m.json").activation_checkpointing, ActivationCheckpointing::first_blocks(2));
  json.erase("activation_checkpointing");
  EXPECT_EQ(model_config_from_json(json.dump(), "m.json").activation_checkpointing, ActivationCheckpointing{});
  for (const nlohmann::json& bad : {nlohmann::json(-1), nlohmann::json("some"), nlohmann::json(1.5)}) {
    json["activation_checkpointing"] = bad;
    const std::string msg = test::input_error_of([&] { model_config_from_json(json.dump(), "m.json"); });
    EXPECT_NE(msg.find("m.json: not a valid model_config.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"activation_checkpointing\" must be true, false, an integer >= 0 or \"auto\", got " + bad.dump()),
              std::string::npos)
        << msg;
  }
}

TEST(HfImport, BadFoldersAreInputErrorsNamingTheFile) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  auto expect_error = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error, expected one mentioning " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { read_model_config(dir / "nothing"); }, "not a model directory");
  test::write_file(dir / "llama/config.json", R"({"model_type": "llama"})");
  expect_error([&] { read_model_config(dir / "llama"); }, "config.json");
  test::write_file(dir / "broken/config.json", "{oops");
  expect_error([&] { read_model_config(dir / "broken"); }, "broken/config.json");
  test::write_file(dir / "nofield/config.json", R"({"model_type": "gpt2", "n_embd": 48})");
  expect_error([&] { read_model_config(dir / "nofield"); }, "vocab_size");
  // Weights missing a tensor.
  fs::create_directories(dir / "missing");
  fs::copy_file(ref + "/gpt2/config.json", dir / "missing/config.json");
  auto weights = read_safetensors(ref + "/gpt2/model.safetensors");
  weights.erase("transformer.h.1.mlp.c_fc.weight");
  write_safetensors(dir / "missing/model.safetensors", weights);
  expect_error([&] { load_model(dir / "missing"); }, "blocks.1.fc.weight");
  // Weights of the wrong shape for the config.
  fs::create_directories(dir / "shape");
  auto cfg = json::parse(test::read_file(ref + "/gpt2/config.json"));
  cfg["n_inner"] = 100;
  test::write_file(dir / "shape/config.json", cfg.dump());
  fs::copy_file(ref + "/gpt2/model.safetensors", dir / "shape/model.safetensors");
  expect_error([&] { load_model(dir / "shape"); }, "shape");
  fs::create_directories(dir / "noweights");
  fs::copy_file(ref + "/gpt2/config.json", dir / "noweights/config.json");
  expect_error([&] { load_model(dir / "noweights"); }, "model.safetensors");
}

}  // namespace
}  // namespace segtrain::models
