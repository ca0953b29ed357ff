// Config parsing, overrides, emission and validation, through the library API.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "models/spec/families/hf_config.h"
#include "test_util.h"
#include "trainer/config/config.h"
#include "trainer/config/model_ref.h"
#include "trainer/config/schema.h"

namespace segtrain::trainer {
namespace {

using test::input_error_of;
using test::TempDir;
using test::write_file;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { test::make_store_stub(dir.path() / "store"); }
  std::string store() const { return dir / "store"; }
  std::string file(const std::string& name, const std::string& yaml) {
    write_file(dir.path() / name, yaml);
    return dir / name;
  }
  std::string minimal() { return file("minimal.yaml", "data:\n  store: " + store() + "\n"); }
  TempDir dir;
};

TEST_F(ConfigTest, MinimalConfigTakesDocumentedDefaults) {
  LoadedConfig loaded = load_config(minimal(), {});
  Config expected;
  expected.data.store = store();
  expected.eval.lengths = {256, 512, 1024};  // auto, resolved: L_t = 256 doubled up to L_e = 1024
  EXPECT_EQ(to_yaml(loaded.config), to_yaml(expected));
  EXPECT_TRUE(Config().eval.lengths.empty()) << "the default is auto";
  EXPECT_EQ(loaded.config.data.train_length, 256);
  EXPECT_EQ(loaded.config.data.extended_length, 1024);
  EXPECT_EQ(loaded.config.data.sampler.method, "truncate");
  EXPECT_FALSE(loaded.config.model.spec.extension.factor.has_value());  // auto
  EXPECT_TRUE(loaded.config.train.budget.compute_equivalent);
  // min_lr auto is lr / 10: the default lr's 3e-5, and below any lr a user lowers it to
  // (docs/models.md's 2e-5 for a pretrained base was refused against a fixed 3e-5).
  EXPECT_FALSE(loaded.config.train.min_lr.has_value());
  EXPECT_DOUBLE_EQ(min_lr_of(loaded.config), 3e-5);
  const LoadedConfig low = load_config(minimal(), {"train.lr=2e-5"});
  EXPECT_DOUBLE_EQ(min_lr_of(low.config), 2e-6);
  EXPECT_DOUBLE_EQ(min_lr_of(load_config(minimal(), {"train.lr=2e-5", "train.min_lr=0"}).config), 0.0);
}

// lr and warm-up auto: training from scratch keeps 3e-4 after 100 steps; a pretrained base gets
// the continued-pretraining recipe (2e-5 after 20 steps, Position Interpolation / YaRN /
// LongLoRA), its LoRA adapters 2e-4; an auto warm-up never takes more than a quarter of the run; a value given wins.
TEST_F(ConfigTest, LrAndWarmUpAutoSuitTheBase) {
  Config c = load_config(minimal(), {}).config;
  EXPECT_FALSE(c.train.lr.has_value());
  EXPECT_FALSE(c.train.warmup_steps.has_value());
  EXPECT_DOUBLE_EQ(lr_of(c), 3e-4);
  EXPECT_EQ(warmup_steps_of(c, 10000), 100);
  EXPECT_EQ(warmup_steps_of(c, 200), 50);
  for (const char* base : {"hf:bases/smollm2", "checkpoint:runs/base/final"}) {
    c.model.init = base;
    EXPECT_DOUBLE_EQ(lr_of(c), 2e-5) << base;
    EXPECT_DOUBLE_EQ(min_lr_of(c), 2e-6) << base;
    EXPECT_EQ(warmup_steps_of(c, 10000), 20) << base;
    EXPECT_EQ(warmup_steps_of(c, 8), 2) << base;  // 8 steps: not 20 (the lr would never reach its peak)
    // LoRA adapters on that base: 2e-4 (their B starts at zero), after the same warm-up.
    c.model.adapters.lora.rank = 8;
    EXPECT_DOUBLE_EQ(lr_of(c), 2e-4) << base;
    EXPECT_DOUBLE_EQ(min_lr_of(c), 2e-5) << base;
    EXPECT_EQ(warmup_steps_of(c, 10000), 20) << base;
    c.model.adapters.lora.rank = 0;
  }
  c.model.init = "scratch";  // adapters on a model from scratch: training from scratch's rate
  c.model.adapters.lora.rank = 8;
  EXPECT_DOUBLE_EQ(lr_of(c), 3e-4);
  c.model.adapters.lora.rank = 0;
  const Config given = load_config(minimal(), {"train.lr=1e-4", "train.warmup_steps=300"}).config;
  c.train.lr = given.train.lr;
  c.train.warmup_steps = given.train.warmup_steps;
  EXPECT_DOUBLE_EQ(lr_of(c), 1e-4);
  EXPECT_EQ(warmup_steps_of(c, 100), 300);  // as given; the trainer warns that it is over a quarter
}

// train.param_dtype auto: bf16 storage for a bf16 run on a CUDA device, fp32 on the CPU (no
// fast bf16 GEMM) or when eval.precision: fp32 asks for fp32 weights; a written value is kept;
// bf16 gradient collectives ask for bf16 parameters in writing.
TEST_F(ConfigTest, ParamDtypeAutoIsBf16ForABf16RunOnCudaOnly) {
  Config c = load_config(minimal(), {}).config;
  EXPECT_FALSE(c.train.param_dtype.has_value());
  EXPECT_EQ(param_dtype_of(c, /*cuda_device=*/true), Precision::fp32);  // an fp32 run
  c = load_config(minimal(), {"train.precision=bf16"}).config;
  EXPECT_EQ(param_dtype_of(c, true), Precision::bf16);
  EXPECT_EQ(param_dtype_of(c, false), Precision::fp32);
  c.eval.precision = EvalPrecision::fp32;
  EXPECT_EQ(param_dtype_of(c, true), Precision::fp32);
  c = load_config(minimal(), {"train.precision=bf16", "train.param_dtype=fp32"}).config;
  EXPECT_EQ(param_dtype_of(c, true), Precision::fp32);
  c = load_config(minimal(), {"train.precision=bf16", "train.param_dtype=bf16"}).config;
  EXPECT_EQ(param_dtype_of(c, false), Precision::bf16);
  EXPECT_EQ(load_config(minimal(), {"train.param_dtype=auto"}).config.train.param_dtype, std::nullopt);
  const std::string refused =
      input_error_of([&] { load_config(minimal(), {"train.precision=bf16", "train.reduce_dtype=bf16"}); });
  EXPECT_NE(refused.find("bf16 applies to bf16 parameters; set train.param_dtype: bf16"), std::string::npos) << refused;
}

// train.micro_batch_size auto sizes a step's passes, so the step itself must be given
// (train.global_batch_size), and grad_accum then follows from it; each refusal names its key.
TEST_F(ConfigTest, GlobalBatchSizeDecidesTheStepAndMicroBatchAutoNeedsIt) {
  Config c = load_config(minimal(), {"train.micro_batch_size=auto", "train.global_batch_size=24"}).config;
  EXPECT_FALSE(c.train.micro_batch_size.has_value());
  EXPECT_EQ(c.train.global_batch_size, 24);
  EXPECT_FALSE(c.train.batch_memory_gib.has_value());
  EXPECT_EQ(load_config(minimal(), {}).config.train.micro_batch_size, 8) << "the default stays a number";
  c = load_config(minimal(), {"train.micro_batch_size=auto", "train.global_batch_size=24", "train.batch_memory_gib=20.5"})
          .config;
  EXPECT_EQ(c.train.batch_memory_gib, 20.5);
  auto msg = input_error_of([&] { load_config(minimal(), {"train.micro_batch_size=auto"}); });
  EXPECT_NE(msg.find("train.micro_batch_size: auto needs train.global_batch_size"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"train.global_batch_size=16", "train.grad_accum=2"}); });
  EXPECT_NE(msg.find("--set train.grad_accum=2: train.grad_accum: follows from train.global_batch_size (16 sequences"),
            std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"train.global_batch_size=12"}); });  // micro_batch_size 8
  EXPECT_NE(msg.find("train.global_batch_size: 12 is not a multiple of train.micro_batch_size 8"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"train.batch_memory_gib=4"}); });
  EXPECT_NE(msg.find("train.batch_memory_gib: applies to train.micro_batch_size: auto"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"train.micro_batch_size=auto", "train.global_batch_size=2097152"}); });
  EXPECT_NE(msg.find("train.global_batch_size: 2097152 sequences a step is past 1048576"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"train.micro_batch_size=auto", "train.global_batch_size=8",
                                                     "train.batch_memory_gib=0"}); });
  EXPECT_NE(msg.find("train.batch_memory_gib: expected auto or a number in (0, 1048576), got '0'"), std::string::npos) << msg;
}

// model.activation_checkpointing: true, false, the first N blocks or auto, each written back as read
// (a resolved config parses to the same); N past the model's blocks, a negative N or another word is
// refused naming the key; train.batch_memory_gib applies to auto with a fixed micro-batch too.
TEST_F(ConfigTest, ActivationCheckpointingIsEveryBlockNoneTheFirstNOrAuto) {
  using Kind = models::ActivationCheckpointing::Kind;
  const std::vector<std::pair<std::string, models::ActivationCheckpointing>> read{
      {"true", {Kind::all, 0}}, {"false", {Kind::none, 0}}, {"3", {Kind::first, 3}},
      {"0", {Kind::first, 0}},  {"auto", {Kind::automatic, 0}}};
  for (const auto& [text, expected] : read) {
    const Config c = load_config(minimal(), {"model.activation_checkpointing=" + text}).config;
    EXPECT_EQ(c.model.spec.activation_checkpointing, expected) << text;
    EXPECT_EQ(key_text(c, "model.activation_checkpointing"), text);
    const std::string yaml = to_yaml(c);
    EXPECT_EQ(to_yaml(load_config(file("again.yaml", yaml), {}).config), yaml) << text;
  }
  EXPECT_EQ(load_config(minimal(), {}).config.model.spec.activation_checkpointing.kind, Kind::none) << "the default";
  // The first N of a model's blocks: none past the last, N = blocks is every block.
  const models::ActivationCheckpointing three = models::ActivationCheckpointing::first_blocks(3);
  EXPECT_EQ(three.of(4), 3);
  EXPECT_EQ(three.of(2), 2);
  EXPECT_EQ(models::ActivationCheckpointing::every_block().of(4), 4);
  EXPECT_EQ(models::ActivationCheckpointing{}.of(4), 0);
  EXPECT_EQ((models::ActivationCheckpointing{Kind::automatic, 0}.of(4)), 4) << "auto: every block until measured";
  EXPECT_FALSE(models::ActivationCheckpointing::first_blocks(0).any());
  EXPECT_TRUE((models::ActivationCheckpointing{Kind::automatic, 0}.any()));
  for (const std::string bad : {"-1", "some", "1.5"}) {
    const auto msg = input_error_of([&] { load_config(minimal(), {"model.activation_checkpointing=" + bad}); });
    EXPECT_NE(msg.find("model.activation_checkpointing: expected true, false, auto or an integer >= 0, got '" + bad +
                       "'"),
              std::string::npos)
        << msg;
  }
  // A scratch model's blocks are known when the config is read (the default n_layers: 4).
  EXPECT_EQ(load_config(minimal(), {"model.activation_checkpointing=4"}).config.model.spec.activation_checkpointing,
            models::ActivationCheckpointing::first_blocks(4));
  const auto past = input_error_of([&] { load_config(minimal(), {"model.activation_checkpointing=5"}); });
  EXPECT_NE(past.find("model.activation_checkpointing: 5 blocks, but the model has 4 (true recomputes every block)"),
            std::string::npos)
      << past;
  const auto narrower = input_error_of(
      [&] { load_config(minimal(), {"model.n_layers=2", "model.activation_checkpointing=3"}); });
  EXPECT_NE(narrower.find("3 blocks, but the model has 2"), std::string::npos) << narrower;
  // A base folder's blocks count when the config is read: an hf: folder's, and a peft: adapter's base.
  const auto base = dir.path() / "two-blocks";
  write_file(base / "config.json",
             "{\"model_type\": \"llama\", \"vocab_size\": 160, \"hidden_size\": 32, \"intermediate_size\": 64, "
             "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2}");
  write_file(dir.path() / "adapter/adapter_config.json",
             "{\"peft_type\": \"LORA\", \"base_model_name_or_path\": \"" + base.string() +
                 "\", \"r\": 2, \"lora_alpha\": 4, \"target_modules\": [\"q_proj\"]}");
  for (const std::string init : {"hf:" + base.string(), "peft:" + (dir.path() / "adapter").string()}) {
    const std::string run = "model: {init: \"" + init + "\", activation_checkpointing: ";
    const auto refused = input_error_of([&] { load_config(file("base.yaml", run + "3}\n"), {}); });
    EXPECT_NE(refused.find("model.activation_checkpointing: 3 blocks, but the model has 2"), std::string::npos)
        << init << ": " << refused;
    const auto two = input_error_of([&] { load_config(file("base.yaml", run + "2}\n"), {}); });
    EXPECT_EQ(two.find("model.activation_checkpointing"), std::string::npos) << init << ": " << two;
  }
  // A fixed micro-batch with auto measures against train.batch_memory_gib too.
  EXPECT_EQ(load_config(minimal(), {"model.activation_checkpointing=auto", "train.batch_memory_gib=2"})
                .config.train.batch_memory_gib,
            2.0);
  const auto msg = input_error_of([&] { load_config(minimal(), {"train.batch_memory_gib=2"}); });
  EXPECT_NE(msg.find("applies to train.micro_batch_size: auto and model.activation_checkpointing: auto"),
            std::string::npos)
      << msg;
}

// A run from a base folder takes the folder's architecture when model.arch is not
// written: without it a chunk run from a Llama folder was checked as gpt2 (learned
// table, "set model.extension.method: interpolate"). HF model types map as the reader does.
TEST_F(ConfigTest, ABaseFoldersArchitectureIsTheRunsUnlessWritten) {
  const std::string chunk = "data: {store: " + store() + ", sampler: {method: chunk}}\n";
  for (const auto& [type, arch] : {std::pair{"qwen2", models::Arch::llama}, std::pair{"mistral", models::Arch::llama},
                                   std::pair{"gpt_neox", models::Arch::gpt_neox}, std::pair{"bloom", models::Arch::bloom}}) {
    const auto base = dir.path() / type;
    write_file(base / "config.json", std::string("{\"model_type\": \"") + type + "\"}");
    const auto loaded = load_config(file("hf.yaml", "model: {init: \"hf:" + base.string() + "\"}\n" + chunk), {});
    EXPECT_EQ(loaded.config.model.spec.arch, arch) << type;
    EXPECT_FALSE(loaded.origins.count("model.arch")) << "taken from the folder, not written";
  }
  // A segtrain checkpoint says its arch in model_config.json.
  write_file(dir.path() / "run/model_config.json", "{\"arch\": \"gpt_neox\"}");
  EXPECT_EQ(load_config(file("ck.yaml", "model: {init: \"checkpoint:" + (dir / "run") + "\"}\n" + chunk), {})
                .config.model.spec.arch,
            models::Arch::gpt_neox);
  // Written, it stays what the file says (resolve_model_config then checks it against the base).
  const auto written = load_config(
      file("w.yaml", "model: {init: \"hf:" + (dir / "bloom") + "\", arch: bloom}\n" + chunk), {});
  EXPECT_EQ(written.config.model.spec.arch, models::Arch::bloom);
  // Scratch keeps the default.
  EXPECT_EQ(load_config(minimal(), {}).config.model.spec.arch, models::Arch::gpt2);
}

// An HF folder's config.json has one reader (models/spec/families/hf_config.h), torch-free, for
// the model's import and the run config alike: a bad file is one line naming it and what was expected.
TEST_F(ConfigTest, ABaseFoldersConfigJsonHasOneReader) {
  const auto base = dir.path() / "base";
  const std::string file = (base / "config.json").string();
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "cannot read HF config '" + file + "'"},
      {"{oops", file + ": not valid JSON ("},
      {"[1]", file + ": not a transformers config.json (expected a JSON object with a string \"model_type\")"},
      {"{\"model_type\": 5}", file + ": not a transformers config.json (expected a JSON object"},
      {"{\"model_type\": \"t5\"}", file + ": model_type \"t5\" is not supported (expected one of gpt2, "}};
  for (const auto& [text, expected] : bad) {
    if (!text.empty()) write_file(base / "config.json", text);
    for (const auto& error : {input_error_of([&] { models::read_hf_config_json(base.string()); }),
                              input_error_of([&] { models::read_hf_config(base.string()); })}) {
      EXPECT_NE(error.find(expected), std::string::npos) << text << ": " << error;
      EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    }
    // model.init's arch is taken only from a config.json segtrain reads; the validator says why not.
    EXPECT_EQ(model_ref_arch("hf:" + base.string()), std::nullopt) << text;
  }
  // The arch is the family's, before its sizes are read (they are refused when the model is).
  write_file(base / "config.json", "{\"model_type\": \"qwen2\"}");
  EXPECT_EQ(model_ref_arch("hf:" + base.string()), models::Arch::llama);
  EXPECT_NE(input_error_of([&] { models::read_hf_config(base.string()); }).find(file + ": missing field"),
            std::string::npos);
  // The "segtrain" field an export writes is checked as strictly as transformers' own fields.
  const std::string sizes = "{\"model_type\": \"gpt_neox\", \"vocab_size\": 64, \"hidden_size\": 8, "
                            "\"intermediate_size\": 32, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
                            "\"max_position_embeddings\": 32, \"rotary_pct\": 1.0, \"segtrain\": ";
  write_file(base / "config.json", sizes + "{\"transformers_reproduces\": true}}");
  EXPECT_EQ(models::read_hf_config(base.string()).n_layers, 1);
  for (const std::string wrong : {"{}", "\"no\"", "[true]", "1"}) {
    write_file(base / "config.json", sizes + "{\"transformers_reproduces\": " + wrong + "}}");
    const auto error = input_error_of([&] { models::read_hf_config(base.string()); });
    EXPECT_NE(error.find(file + " segtrain: field \"transformers_reproduces\" has the wrong type (" + wrong + ")"),
              std::string::npos)
        << error;
  }
}

TEST_F(ConfigTest, EveryKeyIsEmittedAndDocumented) {
  Config config;
  // Every task listed: a task's options are written only when it runs (read back, they would be refused).
  for (const auto& task : eval_task_catalog())
    if (task.name != "perplexity") config.eval.tasks.push_back(task.name);
  const std::string yaml = to_yaml(config);
  EXPECT_EQ(to_yaml(Config{}).find("passkey:"), std::string::npos) << "passkey is not in the default eval.tasks";
  const std::string reference = reference_markdown();
  Config schema_owner;
  std::vector<std::string> keys;
  for (const auto& f : schema::fields(schema_owner)) keys.push_back(f.path);
  EXPECT_GT(keys.size(), 50u);
  for (const auto& key : keys) {
    EXPECT_NE(reference.find("| `" + key + "` |"), std::string::npos) << key;
    auto leaf = key.substr(key.rfind('.') + 1);
    EXPECT_NE(yaml.find(leaf + ":"), std::string::npos) << key;
  }
}

// Which task scores windows and which option belongs to an unlisted task: asked of the
// catalog by what the task does, never by comparing its name.
TEST(EvalTasks, WindowTaskAndUnlistedOptionsComeFromTheCatalog) {
  int window_tasks = 0;
  for (const auto& task : eval_task_catalog()) {
    EXPECT_EQ(scores_windows(task.name), !task.writes_prompts) << task.name;
    window_tasks += scores_windows(task.name);
  }
  EXPECT_EQ(window_tasks, 1) << "eval.json's \"results\" and an experiment's tables are one task's";
  EXPECT_TRUE(scores_windows("perplexity"));
  EXPECT_FALSE(scores_windows("passkey"));
  EXPECT_FALSE(scores_windows("no_such_task"));
  EXPECT_EQ(unlisted_task_of_key("eval.passkey.trials", {"perplexity"}), "passkey");
  EXPECT_EQ(unlisted_task_of_key("eval.passkey.trials", {"perplexity", "passkey"}), "");
  EXPECT_EQ(unlisted_task_of_key("eval.lengths", {"perplexity"}), "") << "the eval section's own key";
  EXPECT_EQ(unlisted_task_of_key("eval.cwe.lengths", {}), "cwe");
}

TEST_F(ConfigTest, ResolvedYamlRoundTrips) {
  auto path = file("full.yaml", "data:\n  store: " + store() +
                                    "\n  train_length: 128\n  extended_length: 512\n"
                                    "  sampler: {method: chunk, alpha: 0.125, targets: document}\n"
                                    "model:\n  arch: gpt_neox\n  rope: {theta: 5000.5, rotary_pct: 0.25}\n"
                                    "  extension: {method: yarn, factor: 4, yarn: {attention_factor: 1.1}}\n"
                                    "train:\n  lr: 1.0e-4\n  betas: [0.8, 0.99]\n  no_decay: [bias]\n"
                                    "  budget: {tokens: 1e6}\n"
                                    "eval:\n  lengths: [128, 256]\n");
  LoadedConfig first = load_config(path, {});
  const std::string yaml1 = to_yaml(first.config);
  LoadedConfig second = parse_config_text(yaml1, "resolved.yaml");
  EXPECT_EQ(to_yaml(second.config), yaml1);
  EXPECT_EQ(second.config.train.budget.tokens, 1000000);
  EXPECT_FALSE(second.config.train.budget.compute_equivalent);
  EXPECT_DOUBLE_EQ(second.config.model.spec.rope.theta, 5000.5);
  EXPECT_DOUBLE_EQ(*second.config.model.spec.extension.factor, 4.0);
  EXPECT_EQ(second.config.data.sampler.targets, data::TargetMode::document);
  EXPECT_DOUBLE_EQ(second.config.train.betas[1], 0.99);
}

// eval.lengths auto (the default) follows the run's own lengths: L_t, doubled
// while below L_e, then L_e; `auto` in a file or --set asks for it explicitly.
TEST_F(ConfigTest, EvalLengthsAutoFollowTheRunsLengths) {
  auto lengths = [&](const std::vector<std::string>& sets) { return load_config(minimal(), sets).config.eval.lengths; };
  EXPECT_EQ(lengths({"data.train_length=128", "data.extended_length=512"}), (std::vector<int64_t>{128, 256, 512}));
  EXPECT_EQ(lengths({"data.train_length=100", "data.extended_length=350"}), (std::vector<int64_t>{100, 200, 350}));
  EXPECT_EQ(lengths({"data.train_length=64", "data.extended_length=64"}), (std::vector<int64_t>{64}));
  EXPECT_EQ(lengths({"data.train_length=64", "data.extended_length=128", "eval.lengths=[8,16]", "eval.lengths=auto"}),
            (std::vector<int64_t>{64, 128}));
  // The resolved config says what auto became.
  const std::string yaml = to_yaml(load_config(minimal(), {"data.train_length=32", "data.extended_length=64"}).config);
  EXPECT_NE(yaml.find("lengths: [32, 64]"), std::string::npos) << yaml;
}

// `segtrain sample` validates only the data section it samples with.
TEST_F(ConfigTest, SampleUseChecksOnlyTheDataSection) {
  const std::vector<std::string> bad_training = {"train.lr=1e-4", "train.min_lr=1e-3"};
  EXPECT_NO_THROW(load_config(minimal(), bad_training, ConfigUse::sample));
  auto msg = input_error_of([&] { load_config(minimal(), bad_training, ConfigUse::train); });
  EXPECT_NE(msg.find("train.min_lr"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"data.extended_length=8", "data.train_length=16"}, ConfigUse::sample); });
  EXPECT_NE(msg.find("data."), std::string::npos) << msg;
}

TEST_F(ConfigTest, OverridesApplyWithTypeChecks) {
  LoadedConfig loaded = load_config(minimal(), {"train.lr=1e-4", "eval.lengths=[64,128]", "model.arch=bloom",
                                                "model.extension.factor=auto", "run.log_all_ranks=true"});
  EXPECT_DOUBLE_EQ(lr_of(loaded.config), 1e-4);
  EXPECT_EQ(loaded.config.eval.lengths, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(loaded.config.model.spec.arch, models::Arch::bloom);
  EXPECT_TRUE(loaded.config.run.log_all_ranks);
  EXPECT_EQ(loaded.origins.at("train.lr"), "--set train.lr=1e-4");

  auto msg = input_error_of([&] { load_config(minimal(), {"train.lr=fast"}); });
  EXPECT_NE(msg.find("--set train.lr=fast: train.lr: expected auto or a number > 0, got 'fast'"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"train.lrr=1"}); });
  EXPECT_NE(msg.find("unknown key 'train.lrr'; did you mean 'train.lr'?"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"model.rope=1"}); });
  EXPECT_NE(msg.find("is a section; set one of its keys: model.rope.theta"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"train.lr"}); });
  EXPECT_NE(msg.find("expected key=value"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"train.micro_batch_size=2.5"}); });
  EXPECT_NE(msg.find("train.micro_batch_size: expected auto or an integer >= 1, got '2.5'"), std::string::npos) << msg;
}

TEST_F(ConfigTest, TokenBudgetAndComputeEquivalentAreAlternatives) {
  LoadedConfig loaded = load_config(minimal(), {"train.budget.tokens=5000"});
  EXPECT_EQ(loaded.config.train.budget.tokens, 5000);
  EXPECT_FALSE(loaded.config.train.budget.compute_equivalent);
  apply_override(loaded, "train.budget.compute_equivalent=true");
  EXPECT_FALSE(loaded.config.train.budget.tokens.has_value());

  auto both = file("both.yaml", "data: {store: " + store() + "}\ntrain:\n  budget: {tokens: 10, compute_equivalent: true}\n");
  auto msg = input_error_of([&] { load_config(both, {}); });
  EXPECT_NE(msg.find("give either tokens or compute_equivalent: true, not both"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"train.budget.compute_equivalent=false"}); });
  EXPECT_NE(msg.find("give one budget"), std::string::npos) << msg;
}

TEST_F(ConfigTest, UnknownKeysSuggestTheNearestValidKey) {
  auto path = file("typo.yaml", "data:\n  store: " + store() + "\nmodel:\n  d_modle: 64\n  lr: 0.1\nevl:\n  lengths: [1]\n");
  auto msg = input_error_of([&] { load_config(path, {}); });
  EXPECT_NE(msg.find(path + ":4:3: unknown key 'model.d_modle'; did you mean 'model.d_model'?"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path + ":5:3: unknown key 'model.lr'; did you mean 'train.lr'?"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path + ":6:1: unknown key 'evl'; did you mean 'eval'?"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(file("far.yaml", "zzzzzzzzzzzz: 1\n"), {}); });
  EXPECT_NE(msg.find("unknown key 'zzzzzzzzzzzz'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("did you mean"), std::string::npos) << msg;
}

TEST_F(ConfigTest, TypeErrorsNameFileLineColumnAndExpectedType) {
  auto path = file("types.yaml", "data:\n  store: " + store() + "\n  train_length: many\ntrain:\n  betas: [0.9]\n"
                                     "  precision: fp16\n  tensorboard: maybe\n  lr: -1\n");
  auto msg = input_error_of([&] { load_config(path, {}); });
  EXPECT_NE(msg.find(path + ":3:17: data.train_length: expected an integer >= 1, got 'many'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path + ":5:10: train.betas: expected a list of 2 numbers in [0, 1), got a list"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train.precision: expected one of fp32|bf16, got 'fp16'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train.tensorboard: expected true or false, got 'maybe'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train.lr: expected auto or a number > 0, got '-1'"), std::string::npos) << msg;
}

TEST_F(ConfigTest, SyntaxErrorsAndEmptyFiles) {
  auto msg = input_error_of([&] { load_config(file("syntax.yaml", "data:\n  store: [unclosed\n"), {}); });
  EXPECT_NE(msg.find("YAML syntax error"), std::string::npos) << msg;
  EXPECT_NE(msg.find("syntax.yaml:"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(file("empty.yaml", ""), {}); });
  EXPECT_NE(msg.find("the config is empty"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(file("list.yaml", "- a\n- b\n"), {}); });
  EXPECT_NE(msg.find("expected a mapping of sections"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(dir / "missing.yaml", {}); });
  EXPECT_NE(msg.find("cannot read config file"), std::string::npos) << msg;
}

// data.mixture: a list of source mappings read key by key (a typo suggested, a wrong type at its
// line), written back whole in the resolved YAML, and its rules named by each source's keys.
TEST_F(ConfigTest, AMixtureIsReadCheckedAndWrittenBack) {
  test::make_store_stub(dir.path() / "short");
  const std::string short_store = dir / "short";
  auto path = file("mix.yaml", "model:\n  arch: llama\ndata:\n  store: " + store() + "\n  train_length: 64\n  extended_length: 256\n"
                                   "  sampler: {method: chunk, alpha: 0.25}\n  mixture:\n"
                                   "    - {name: long, weight: 0.8}\n"
                                   "    - {store: " + short_store + ", weight: 0.2, extended_length: 64, "
                                   "sampler: {method: truncate}}\n");
  LoadedConfig loaded = load_config(path, {});
  const auto& mixture = loaded.config.data.mixture;
  ASSERT_EQ(mixture.size(), 2u);
  EXPECT_EQ(mixture[0].name, "long");
  EXPECT_FALSE(mixture[0].sampler.has_value()) << "no sampler key: data.sampler's";
  EXPECT_DOUBLE_EQ(mixture[1].weight, 0.2);
  EXPECT_EQ(mixture[1].extended_length, 64);
  ASSERT_TRUE(mixture[1].sampler.has_value());
  EXPECT_EQ(mixture[1].sampler->method, "truncate");
  const std::string yaml = to_yaml(loaded.config);
  LoadedConfig again = parse_config_text(yaml, "resolved.yaml");
  EXPECT_EQ(to_yaml(again.config), yaml);
  ASSERT_EQ(again.config.data.mixture.size(), 2u);
  EXPECT_EQ(again.config.data.mixture[1].store, short_store);
  EXPECT_TRUE(load_config(minimal(), {"data.mixture=[]"}).config.data.mixture.empty());

  auto msg = input_error_of([&] {
    load_config(file("typo.yaml", "data:\n  store: " + store() + "\n  mixture:\n    - {weight: 1, stroe: x}\n"), {});
  });
  EXPECT_NE(msg.find(":4:19: data.mixture: unknown key 'data.mixture[0].stroe'; did you mean 'data.mixture[0].store'?"),
            std::string::npos) << msg;
  msg = input_error_of([&] {
    load_config(file("type.yaml", "data:\n  store: " + store() + "\n  mixture:\n    - {weight: heavy}\n"), {});
  });
  EXPECT_NE(msg.find(":4:16: data.mixture: data.mixture[0].weight: expected a number >= 0, got 'heavy'"),
            std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"data.mixture=[{name: a}]"}); });
  EXPECT_NE(msg.find("data.mixture[0].weight: required"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"data.mixture=[{weight: 0}, {weight: 0, name: b}]"}); });
  EXPECT_NE(msg.find("data.mixture: the weights sum to 0"), std::string::npos) << msg;
  msg = input_error_of([&] {
    load_config(minimal(), {"data.mixture=[{weight: 1}, {weight: 1, store: " + (dir / "nowhere") + "}]"});
  });
  EXPECT_NE(msg.find("data.mixture[1].store: '" + (dir / "nowhere") + "' does not exist"), std::string::npos) << msg;
  msg = input_error_of([&] { load_config(minimal(), {"data.mixture=[{weight: 1}, {weight: 1}]"}); });
  EXPECT_NE(msg.find("data.mixture[1].name: 'store' names data.mixture[0] too"), std::string::npos) << msg;
  msg = input_error_of([&] {
    load_config(minimal(), {"model.arch=llama", "data.train_length=64", "data.extended_length=256",
                            "data.mixture=[{weight: 1}, {weight: 1, name: s, sampler: {method: chunk, alpha: 0.3}}]"});
  });
  EXPECT_NE(msg.find("data.mixture[1].sampler.alpha:"), std::string::npos) << msg;
}

TEST_F(ConfigTest, CrossFieldChecks) {
  auto check = [&](const std::vector<std::string>& sets) { return input_error_of([&] { load_config(minimal(), sets); }); };
  EXPECT_NE(check({"data.extended_length=128"}).find("is shorter than data.train_length"), std::string::npos);
  EXPECT_NE(check({"data.sampler.method=chunk", "data.sampler.alpha=0.3"}).find("is not an integer"), std::string::npos);
  EXPECT_NE(check({"data.sampler.method=chunk", "data.sampler.alpha=0.5", "data.train_length=3", "data.extended_length=12"})
                .find("must be an integer >= 1"),
            std::string::npos);
  EXPECT_NE(check({"data.sampler.method=prefix", "data.extended_length=256"}).find("none exists"), std::string::npos);
  EXPECT_NE(check({"model.d_model=100", "model.n_heads=3"}).find("not divisible by n_heads"), std::string::npos);
  EXPECT_NE(check({"model.arch=gpt_neox", "model.rope.rotary_pct=0.3"}).find("rotary_pct) = 9 rotated dimensions per head; that must be an even number"), std::string::npos);
  EXPECT_NE(check({"model.extension.method=yarn"}).find("yarn does not apply to model.arch gpt2"), std::string::npos);
  EXPECT_NE(check({"model.extension.method=ntk_alibi"}).find("ntk_alibi does not apply to model.arch gpt2"), std::string::npos);
  EXPECT_NE(check({"model.arch=llama", "model.n_kv_heads=3"}).find("not divisible by n_kv_heads = 3"), std::string::npos);
  EXPECT_NE(check({"model.n_kv_heads=2"}).find("model.n_kv_heads: applies to model.arch llama only"), std::string::npos);
  EXPECT_NE(check({"model.arch=bloom", "model.tie_embeddings=true"}).find("llama only"), std::string::npos);
  // Their defaults are what every architecture does: a resolved config lists them and passes.
  EXPECT_EQ(check({"model.arch=bloom", "model.qkv_bias=false", "model.n_kv_heads=auto", "model.head_dim=auto"})
                .find("llama only"),
            std::string::npos);
  EXPECT_NE(check({"model.arch=llama", "model.rope.rotary_pct=0.5"}).find("whole head"), std::string::npos);
  EXPECT_NE(check({"data.sampler.method=chunk"}).find("set model.extension.method: interpolate"), std::string::npos);
  EXPECT_NE(check({"train.min_lr=1"}).find("is above train.lr"), std::string::npos);
  EXPECT_NE(check({"model.init=hf:/no/such/dir"}).find("does not exist"), std::string::npos);
  EXPECT_NE(check({"model.init=pretrained"}).find("expected scratch, hf:DIR, checkpoint:DIR or peft:DIR"), std::string::npos);
  EXPECT_NE(check({"data.store=/no/such/store"}).find("data.store: '/no/such/store' does not exist"), std::string::npos);
  EXPECT_NE(check({"eval.stride=256"}).find("is not shorter than the evaluation length 256"), std::string::npos);
  // placement ring is chunk's: refused elsewhere, naming the key and the method; uniform passes everywhere.
  EXPECT_NE(check({"data.sampler.method=prefix", "data.sampler.placement=ring", "model.extension.method=interpolate"})
                .find("data.sampler.placement: ring applies to data.sampler.method chunk only, not prefix"),
            std::string::npos);
  EXPECT_NE(check({"data.sampler.placement=ring"}).find("not truncate"), std::string::npos);
  EXPECT_NE(check({"data.sampler.placement=rings"}).find("data.sampler.placement"), std::string::npos);

  // Feasible combinations pass, including prefix at the smallest feasible L_e.
  EXPECT_NO_THROW(load_config(minimal(), {"data.sampler.method=prefix", "data.train_length=8", "data.extended_length=10",
                                          "model.extension.method=interpolate", "eval.lengths=[8]"}));
  EXPECT_NO_THROW(load_config(minimal(), {"data.sampler.method=chunk", "data.sampler.alpha=0.125",
                                          "model.extension.method=interpolate"}));
  EXPECT_NO_THROW(load_config(minimal(), {"data.sampler.method=chunk", "data.sampler.placement=ring",
                                          "model.extension.method=interpolate"}));
  EXPECT_NO_THROW(load_config(minimal(), {"data.sampler.method=randompos", "data.sampler.placement=uniform",
                                          "model.extension.method=interpolate"}));
  // llama: head_dim given, so n_heads need not divide d_model; GQA, biases, tied head, RoPE methods.
  EXPECT_NO_THROW(load_config(minimal(), {"model.arch=llama", "model.d_model=100", "model.n_heads=3",
                                          "model.head_dim=24", "model.n_kv_heads=1", "model.qkv_bias=true",
                                          "model.tie_embeddings=true", "model.extension.method=yarn"}));
}

TEST_F(ConfigTest, AllProblemsAreReportedAtOnce) {
  auto path = file("many.yaml", "data:\n  store: " + store() + "\nmodel:\n  n_layers: 0\n  d_model: x\ntrain:\n  lr: 0\n");
  auto msg = input_error_of([&] { load_config(path, {}); });
  EXPECT_NE(msg.find("model.n_layers"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.d_model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train.lr"), std::string::npos) << msg;
}

TEST_F(ConfigTest, DuplicateKeysAreRejected) {
  auto msg = input_error_of([&] { load_config(file("dup.yaml", "data:\n  store: " + store() + "\ntrain:\n  lr: 1\n  lr: 2\n"), {}); });
  EXPECT_NE(msg.find("duplicate key 'train.lr'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace segtrain::trainer
