// A LoRA run's outside inputs through the `segtrain` binary as a user (or an attacker) hands
// them over (issue 58, cases 5 to 7): an adapter_config.json that once crashed `config check`
// and `train` (segfault, LibTorch abort), hung ignoring SIGINT and SIGTERM, or was refused for
// another cause, and a rank too large for its model, on its own, from an adapter or in an
// experiment's variant. Each ends in one line naming the file or key and exit 2, nothing written.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

#include "test_util.h"

namespace segtrain {
namespace {

using nlohmann::json;
using test::kBin;
using test::run;
namespace fs = std::filesystem;

class AdapterBounds : public test::SyntheticStoreSuite {
 protected:
  // A tiny HF Llama (config.json only: `config check` reads no weights) and a folder holding an
  // adapter for it, whose adapter_config.json is `text`; the config of a run continuing it.
  static std::string peft_run(const std::string& name, const std::string& text) {
    const fs::path base = dir_->path() / "base", adapter = dir_->path() / ("adapter-" + name);
    test::write_file(base / "config.json",
                     json{{"model_type", "llama"}, {"hidden_size", 32}, {"intermediate_size", 64},
                          {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                          {"vocab_size", 160}, {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-6},
                          {"tie_word_embeddings", false}}
                         .dump());
    test::write_file(adapter / "adapter_config.json", text);
    test::write_file(adapter / "adapter_model.safetensors", "");
    const std::string config = tiny_run_config(name);
    // tiny_run_config's model is a scratch one: this run's is the adapter's base.
    std::string text_of_config = test::read_file(config);
    const size_t model = text_of_config.find("model: {arch");
    text_of_config.replace(model, text_of_config.find('\n', model) - model, "model: {init: 'peft:" + adapter.string() + "'}");
    test::write_file(config, text_of_config);
    return config;
  }

  static std::string adapter_text(const json& target_modules, int64_t rank = 4) {
    return json{{"peft_type", "LORA"}, {"r", rank}, {"lora_alpha", 8}, {"target_modules", target_modules},
                {"base_model_name_or_path", (dir_->path() / "base").string()}}
        .dump();
  }

  // `args` exits 2 with one line on stderr holding every one of `expected`.
  static void expect_one_line_refusal(const std::vector<std::string>& args, const std::vector<std::string>& expected,
                                      const std::string& what) {
    const auto r = run(kBin, args, 60);
    EXPECT_FALSE(r.signaled) << what << ": " << r.err;
    EXPECT_EQ(r.exit_code, 2) << what << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
    for (const auto& text : expected) EXPECT_NE(r.err.find(text), std::string::npos) << what << ": " << r.err;
    EXPECT_EQ(r.err.find("neither a folder with config.json"), std::string::npos) << what << ": " << r.err;
  }
};

// Once: segfault (139) for the first three, a silent hang that ignored SIGINT and SIGTERM for the fourth.
TEST_F(AdapterBounds, ConfigCheckAndTrainRefuseWhatCrashedOrHungInOneLine) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"long", adapter_text(std::string(100'000, 'q')), "target_modules: a regular expression of 100,000 characters"},
      {"parens", adapter_text(std::string(50'000, '(') + std::string(50'000, ')')),
       "target_modules: a regular expression of 100,000 characters"},
      {"deep", R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": )" + std::string(200'000, '[') +
                   std::string(200'000, ']') + "}",
       "values nested more than 32 deep"},
      {"backtracking", adapter_text("(.*)*(.*)*(.*)*(.*)*Z"), "target_modules: '(.*)*(.*)*(.*)*(.*)*Z' matches no projection"},
      {"backreference", adapter_text(R"(.*(q)_\1)"), "no backreferences or lookaround"},
  };
  for (const auto& [name, text, cause] : cases) {
    const std::string config = peft_run(name, text);
    const std::string file = *dir_ / ("adapter-" + name + "/adapter_config.json");
    expect_one_line_refusal({"config", "check", config}, {file, cause}, name);
    expect_one_line_refusal({"train", config}, {file, cause}, "train " + name);
    EXPECT_FALSE(fs::exists(run_dir(name))) << name;
  }
}

// Once: accepted after 40-65 s and 2 GB (the large ones); refused as a base that is not there (the broken ones).
TEST_F(AdapterBounds, ALargeOrBrokenAdapterConfigIsRefusedForItsOwnCause) {
  const std::string good = adapter_text(json::array({"q_proj"}));
  json padded = json::parse(good);
  padded["padding"] = std::string(2 << 20, ' ');
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"large", padded.dump(), "bytes; an adapter_config.json may have at most 1 MiB"},
      {"names", adapter_text(std::vector<std::string>(20'000, "q_proj")), "target_modules: lists 20,000 module names"},
      {"utf8", "{\"peft_type\": \"LORA\", \"target_modules\": [\"q\xff\"]}", "is not UTF-8 text (byte 43)"},
      {"truncated", good.substr(0, good.size() - 20), "not JSON (parse error at line 1, column"},
      {"empty", "", "is empty"},
      {"list", "[" + good + "]", "a JSON array, not an object"},
      {"nan", R"({"peft_type": "LORA", "r": 4, "lora_alpha": NaN})", "NaN and Infinity"},
  };
  for (const auto& [name, text, cause] : cases) {
    const std::string config = peft_run(name, text);
    const std::string file = *dir_ / ("adapter-" + name + "/adapter_config.json");
    expect_one_line_refusal({"config", "check", config}, {"model.init: " + file + ": " , cause}, name);
  }
}

// Once: LibTorch's abort (134) asking for terabytes, after the other rows of an experiment had trained.
TEST_F(AdapterBounds, ARankLargerThanTheProjectionsItAdaptsIsRefusedBeforeAnythingAllocates) {
  // gpt_neox, d_model 32: qkv 32 -> 96 and o 32 -> 32 hold 4,096 weights a layer, an adapter rank x 192: at most 21.
  const std::string config = tiny_run_config("rank");
  expect_one_line_refusal({"config", "check", config, "--set", "model.adapters.lora.rank=1000000000", "--set",
                           "model.adapters.lora.targets=[qkv, o]"},
                          {"model.adapters.lora.rank: 1000000000 would make the adapters 1.40 TiB in fp32 (384.0B "
                           "parameters on qkv, o of 2 layers",
                           "at most 21 here"},
                          "--set");
  expect_one_line_refusal({"train", config, "--set", "model.adapters.lora.rank=22", "--set",
                           "model.adapters.lora.targets=[qkv, o]"},
                          {"model.adapters.lora.rank: 22 would make the adapters"}, "train");
  EXPECT_FALSE(fs::exists(run_dir("rank")));
  // From a checkpoint: its model_config.json's sizes.
  const std::string plain = tiny_run_config("plain", {.train_keys = ", budget: {tokens: 256}"});
  const auto trained = run(kBin, {"train", plain});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  expect_one_line_refusal({"config", "check", config, "--set", "model.init=checkpoint:" + run_dir("plain") + "/final", "--set",
                           "model.adapters.lora.rank=22", "--set", "model.adapters.lora.targets=[qkv, o]"},
                          {"model.adapters.lora.rank: 22 would make the adapters", "at most 21 here"}, "checkpoint");
  const std::string peft = peft_run("r", adapter_text(json::array({"q_proj", "v_proj"}), 1'000'000'000));
  expect_one_line_refusal({"config", "check", peft},
                          {"adapter-r/adapter_config.json: r: 1000000000 would make the adapters"}, "r");
}

// A rank within the bound whose adapters are a large share of the model is said with the share.
TEST_F(AdapterBounds, ALargeShareOfTheModelIsSaid) {
  const std::string config = tiny_run_config("share", {.train_keys = ", budget: {tokens: 256}"});
  const auto r = run(kBin, {"train", config, "--set", "model.adapters.lora.rank=21", "--set",
                            "model.adapters.lora.targets=[qkv, o]"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("model.adapters.lora.rank 21: the adapters add 8.1K parameters, "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("% of the model's "), std::string::npos) << r.err;
}

}  // namespace
}  // namespace segtrain
