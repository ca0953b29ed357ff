// adapter_config.json as outside input (models/spec/families/peft_config.h): read within bounds before
// anything is built from it, a target_modules regex run in RE2 as Python's re.fullmatch, a
// broken file refused for its own cause, and the adapters' size checked against the base's
// projections before anything allocates them (models/spec/converters/lora_config.h). Each case
// once crashed (segfault, LibTorch abort), hung or was accepted silently (issue 58).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <set>
#include <string>

#include "common/error.h"
#include "models/modules/converters/converter.h"
#include "models/modules/converters/lora.h"
#include "models/modules/transformer.h"
#include "models/spec/converters/lora_config.h"
#include "models/spec/families/peft_config.h"
#include "test_util.h"
#include "tiny_models.h"

namespace segtrain::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A tiny Llama with grouped-query attention: d_model 32, q and o 32 x 32, k and v 32 -> 16, 2 layers.
ModelConfig tiny_llama() { return test::tiny_model_config(Arch::llama, 40, 16, /*grouped_kv=*/true); }

json adapter(const json& target_modules) {
  return {{"peft_type", "LORA"}, {"r", 4}, {"lora_alpha", 8}, {"target_modules", target_modules}};
}

// The InputError reading `text` as DIR/adapter_config.json gives, or "(no InputError)".
struct AdapterDir {
  test::TempDir dir;
  std::string file() const { return (dir.path() / "adapter_config.json").string(); }
  std::string refusal(const std::string& text, const ModelConfig& base = tiny_llama()) const {
    test::write_file(file(), text);
    return test::input_error_of([&] { read_peft_adapter_config(dir.path().string(), base); });
  }
  std::string base_model_refusal(const std::string& text) const {
    test::write_file(file(), text);
    return test::input_error_of([&] { read_peft_base_model(dir.path().string()); });
  }
};

// Each setting is a row of kLoraSettings: a converters.json record holds exactly the rows and
// "trainable", PEFT's fields the rows' names (target_modules apart), and every setting that is
// not its default survives both round trips.
TEST(LoraSettings, EveryRowIsInTheRecordAndInPeftsFieldsAndSurvivesBoth) {
  LoraConfig lora;
  lora.rank = 12, lora.alpha = 3.5, lora.dropout = 0.25, lora.targets = {"q", "down"};
  lora.trainable = {"adapters", "norms"}, lora.use_dora = !LoraConfig{}.use_dora;
  const json record = lora_record(lora);
  std::set<std::string> keys;
  for (const auto& item : record.items()) keys.insert(item.key());
  std::set<std::string> rows, expected = {"name", "trainable"};
  for (const auto& setting : kLoraSettings) rows.insert(setting.record), expected.insert(setting.record);
  EXPECT_EQ(keys, expected);
  std::set<std::string> compared;
  const json settings = lora_settings_json(lora);  // items() of a temporary would outlive it
  for (const auto& item : settings.items()) compared.insert(item.key());
  EXPECT_EQ(compared, rows);
  const LoraConfig back = lora_from_record(record, "converters.json");
  EXPECT_EQ(lora_record(back), record);

  json peft = peft_lora_fields(lora);
  for (const auto& setting : kLoraSettings) {
    if (std::string(setting.peft) == "target_modules") continue;  // module names, matched by peft_config.cpp
    EXPECT_TRUE(peft.contains(setting.peft)) << setting.peft;
  }
  peft["peft_type"] = "LORA";
  const LoraConfig from_peft = lora_from_peft_fields(peft, "adapter_config.json");
  EXPECT_EQ(from_peft.rank, lora.rank);
  EXPECT_EQ(from_peft.alpha, lora.alpha);
  EXPECT_EQ(from_peft.dropout, lora.dropout);
  EXPECT_EQ(from_peft.use_dora, lora.use_dora);

  // A record written before DoRA (no flag) is LoRA; a flag of another type is refused naming the file.
  json old = record;
  old.erase("use_dora");
  EXPECT_FALSE(lora_from_record(old, "converters.json").use_dora);
  json bad = record;
  bad["use_dora"] = "yes";
  EXPECT_THROW(lora_from_record(bad, "converters.json"), InputError);
  peft["use_dora"] = 1;
  try {
    lora_from_peft_fields(peft, "adapter_config.json");
    ADD_FAILURE() << "use_dora 1 was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("adapter_config.json: use_dora: expected true or false, got 1"),
              std::string::npos) << e.what();
  }
}

TEST(PeftConfig, ARegularExpressionRunsInRe2AsPythonsFullmatch) {
  AdapterDir a;
  test::write_file(a.file(), adapter(R"(.*\.(q_proj|v_proj))").dump());
  EXPECT_EQ(read_peft_adapter_config(a.dir.path().string(), tiny_llama()).lora.targets,
            (std::vector<std::string>{"q", "v"}));
  // The whole name must match: "q_proj" alone is no module's full name.
  const std::string partial = a.refusal(adapter("q_proj").dump());
  EXPECT_NE(partial.find("target_modules: 'q_proj' matches no projection segtrain adapts"), std::string::npos)
      << partial;
  // Catastrophic backtracking under a backtracking engine (it hung, ignoring SIGINT and SIGTERM):
  // linear in RE2, it matches nothing and says so.
  const auto started = std::chrono::steady_clock::now();
  const std::string evil = a.refusal(adapter("(.*)*(.*)*(.*)*(.*)*Z").dump());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 5.0);
  EXPECT_NE(evil.find("adapter_config.json: target_modules: '(.*)*(.*)*(.*)*(.*)*Z' matches no projection"),
            std::string::npos)
      << evil;
  // What RE2 cannot express is refused naming the file and the key.
  for (const std::string pattern : {R"((q)_\1)", "(?=.*q_proj).*", "(?<!x).*q_proj"}) {
    const std::string refused = a.refusal(adapter(pattern).dump());
    EXPECT_NE(refused.find("adapter_config.json: target_modules: '" + pattern + "' is not a regular expression "
                           "segtrain reads ("),
              std::string::npos)
        << refused;
    EXPECT_NE(refused.find("no backreferences or lookaround"), std::string::npos) << refused;
  }
  // 100,000 characters and 50,000 nested parentheses (both crashed std::regex's recursive parser).
  const std::string long_pattern = a.refusal(adapter(std::string(100'000, 'q')).dump());
  EXPECT_NE(long_pattern.find("target_modules: a regular expression of 100,000 characters; at most 10,000"),
            std::string::npos)
      << long_pattern;
  const std::string nested = a.refusal(adapter(std::string(50'000, '(') + std::string(50'000, ')')).dump());
  EXPECT_NE(nested.find("a regular expression of 100,000 characters"), std::string::npos) << nested;
  EXPECT_LT(nested.size(), 300u) << "a message shows at most 80 characters of the pattern";
}

TEST(PeftConfig, TheFileIsBoundedInSizeDepthAndNamesBeforeItIsUsed) {
  AdapterDir a;
  // Nested 200,000 levels: every recursive copy, print or destruction of it overflowed the stack.
  const std::string deep = a.refusal(R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": )" +
                                     std::string(200'000, '[') + std::string(200'000, ']') + "}");
  EXPECT_NE(deep.find("adapter_config.json: values nested more than 32 deep; PEFT's are 2"), std::string::npos) << deep;
  // Larger than 1 MiB (a valid adapter, padded): refused before it is read.
  json padded = adapter(json::array({"q_proj"}));
  padded["padding"] = std::string(2 << 20, ' ');
  const std::string large = a.refusal(padded.dump());
  EXPECT_NE(large.find("adapter_config.json: 2,097,"), std::string::npos) << large;
  EXPECT_NE(large.find("bytes; an adapter_config.json may have at most 1 MiB"), std::string::npos) << large;
  // More names than any model has modules (each one matches: it was accepted).
  const std::string many = a.refusal(adapter(std::vector<std::string>(10'001, "q_proj")).dump());
  EXPECT_NE(many.find("adapter_config.json: target_modules: lists 10,001 module names; at most 10,000"),
            std::string::npos)
      << many;
  EXPECT_EQ(a.refusal(adapter(std::vector<std::string>(10'000, "q_proj")).dump()), "(no InputError)");
  const std::string saved = a.refusal([] {
    json config = adapter(json::array({"q_proj"}));
    config["modules_to_save"] = std::vector<std::string>(10'001, "norm");
    return config.dump();
  }());
  EXPECT_NE(saved.find("modules_to_save: lists 10,001 module names"), std::string::npos) << saved;
}

// Each broken file refused for its own cause, by the reader of its settings and by the reader of its
// base's name (whose failure was reported as a base that is not there).
TEST(PeftConfig, ABrokenFileIsRefusedForItsOwnCause) {
  AdapterDir a;
  const std::string good = adapter(json::array({"q_proj"})).dump();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"peft_type\": \"LORA\", \"target_modules\": [\"q\xff\"]}", ": is not UTF-8 text (byte 43); JSON is UTF-8"},
      {good.substr(0, good.size() / 2), ": not JSON (parse error at line 1, column "},
      {"", ": is empty; expected PEFT's JSON object"},
      {" \n", ": is empty"},
      {"[" + good + "]", ": a JSON array, not an object"},
      {"\"LORA\"", ": a JSON string, not an object"},
      {R"({"peft_type": "LORA", "r": 4, "lora_alpha": NaN})", "NaN and Infinity, which Python's json writes, are not JSON"},
  };
  for (const auto& [text, cause] : cases) {
    const std::string refused = a.refusal(text);
    EXPECT_EQ(refused.rfind(a.file() + ": ", 0), 0u) << refused;
    EXPECT_NE(refused.find(cause), std::string::npos) << refused;
    EXPECT_EQ(refused.find('\n'), std::string::npos) << refused;
    EXPECT_EQ(a.base_model_refusal(text), refused);
  }
  fs::remove(a.file());
  EXPECT_NE(test::input_error_of([&] { read_peft_base_model(a.dir.path().string()); }).find(a.file() + ": cannot be read"),
            std::string::npos);
  test::write_file(a.file(), good);
  EXPECT_EQ(read_peft_base_model(a.dir.path().string()), "");
}

TEST(PeftConfig, AnAdapterLargerThanTheProjectionsItAdaptsIsRefusedWithItsBytes) {
  // SmolLM2-135M's shape: q and o 576 x 576, k and v 576 -> 192 on 30 layers. On q, k, v, o the
  // adapters hold rank x 3,840 a layer against the projections' 884,736: at most rank 230.
  ModelConfig smol;
  smol.arch = Arch::llama;
  smol.d_model = 576;
  smol.n_layers = 30;
  smol.n_heads = 9;
  smol.n_kv_heads = 3;
  smol.d_ff = 1536;
  LoraConfig lora;
  lora.rank = 230;
  EXPECT_TRUE(lora_size_problems(lora, smol).empty());
  EXPECT_NEAR(lora_parameters(lora, smol), 230.0 * 3840 * 30, 1);
  lora.rank = 231;
  auto problems = lora_size_problems(lora, smol);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].key, "model.adapters.lora.rank");
  EXPECT_NE(problems[0].message.find("larger than the projections they adapt (26.5M parameters): at most 230 here"),
            std::string::npos)
      << problems[0].message;
  lora.rank = 1'000'000'000;  // LibTorch aborted asking for 2.3 TB
  problems = lora_size_problems(lora, smol);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("1000000000 would make the adapters 419.10 TiB in fp32 (115.2T parameters on q, k, "
                                     "v, o of 30 layers"),
            std::string::npos)
      << problems[0].message;
  // A rank past k's and v's min(in, out) = 192 still fits q and o, which use it.
  lora.rank = 200;
  EXPECT_TRUE(lora_size_problems(lora, smol).empty());
  lora.targets = {"k", "v"};
  EXPECT_NE(lora_size_problems(lora, smol).at(0).message.find("at most 144 here"), std::string::npos);
  // GPT-2's one qkv projection (d -> 3d) and the MLP's (d -> 4d, 4d -> d).
  ModelConfig gpt2 = test::tiny_model_config(Arch::gpt2, 40, 16);  // d_model 32, d_ff 64
  lora.targets = {"qkv", "up", "down"};
  lora.rank = 22;  // (32 x 96 + 2 x 32 x 64) / (128 + 2 x 96) = 7,168 / 320 = 22.4
  EXPECT_TRUE(lora_size_problems(lora, gpt2).empty());
  lora.rank = 23;
  EXPECT_FALSE(lora_size_problems(lora, gpt2).empty());
  // Sizes not known yet (or absurd: the model's rules refuse them) are not guessed at.
  gpt2.n_heads = 0;
  EXPECT_TRUE(lora_size_problems(lora, gpt2).empty());

  // An adapter_config.json's r is checked on its base, naming the file and the key.
  AdapterDir a;
  json config = adapter(json::array({"q_proj", "k_proj", "v_proj", "o_proj"}));
  config["r"] = 1'000'000'000;
  const std::string refused = a.refusal(config.dump());
  EXPECT_NE(refused.find("adapter_config.json: r: 1000000000 would make the adapters "), std::string::npos) << refused;
  config["r"] = 13;  // tiny_llama on q, k, v, o: 3,072 / 224 = 13.7
  EXPECT_EQ(a.refusal(config.dump()), "(no InputError)");
  config["r"] = 14;
  EXPECT_NE(a.refusal(config.dump()).find("r: 14 would make the adapters"), std::string::npos);
}

// The converter's last guard: a rank too large for the model is refused before any adapter is allocated.
TEST(PeftConfig, TheConverterRefusesAnAdapterLargerThanItsProjectionsBeforeAllocating) {
  TransformerLM model(tiny_llama());
  LoraConfig lora;
  lora.rank = 1'000'000'000;
  const std::string refused = test::input_error_of([&] { make_lora(test::lora_training(lora, {"adapters"}))->convert(model); });
  EXPECT_NE(refused.find("model.adapters.lora.rank: 1000000000 would make the adapters"), std::string::npos) << refused;
  for (const auto& item : model->named_parameters()) EXPECT_EQ(item.key().find("lora_"), std::string::npos) << item.key();
  lora.rank = 13;
  make_lora(test::lora_training(lora, {"adapters"}))->convert(model);
  EXPECT_EQ(model->named_parameters()["blocks.0.k_proj.lora_A.weight"].sizes(), (at::IntArrayRef{13, 32}));
}

}  // namespace
}  // namespace segtrain::models
