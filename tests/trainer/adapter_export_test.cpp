// `segtrain export --adapter` reads what the run saved and nothing else (issue 58 case 10: a 3.8 MB
// SmolLM2 adapter took 12 s and 2.2 GB, the base loaded into a model built and initialised at
// random): the PEFT folder export_run_lora_adapter writes is the one the merged path wrote, byte for
// byte, for a run converted from a base (only what trained saved) and one trained without a base
// (every weight saved), in fp32 and bf16; with the base's weights gone it is still written, with
// a warning, where the merged path refused; a run without adapters is refused as before.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/error.h"
#include "models/modules/converters/converter.h"
#include "models/modules/converters/lora.h"
#include "models/modules/model_io.h"
#include "models/modules/peft_adapter.h"
#include "models/modules/safetensors.h"
#include "test_util.h"
#include "trainer/eval/adapter_export.h"
#include "trainer/eval/stored_model.h"

namespace segtrain {
namespace {

namespace fs = std::filesystem;
using test::kBin;
using test::run;

// What `export --adapter` did before: the model built, converted, every tensor (the base's too)
// loaded, then models::export_peft_adapter.
void merged_path_export(const trainer::StoredModel& stored, const fs::path& out, const std::string& origin,
                        at::ScalarType dtype) {
  const models::Converters converters = models::read_converters(stored.dir);
  const models::LoraConfig* lora = models::lora_settings(converters);
  ASSERT_NE(lora, nullptr);
  models::TransformerLM model(stored.config);
  models::apply_converters(converters, model);
  model->load_tensors(models::converted_tensors(stored.dir, stored.config), stored.dir);
  models::export_peft_adapter(model, *lora, out.string(), {origin, dtype});
}

void expect_same_folder(const fs::path& a, const fs::path& b, const std::string& what) {
  for (const char* name : {"adapter_config.json", "adapter_model.safetensors"}) {
    ASSERT_TRUE(fs::exists(a / name)) << what << ": " << (a / name);
    EXPECT_EQ(test::read_file(a / name), test::read_file(b / name)) << what << ": " << name << " differs";
  }
}

class AdapterExport : public test::SyntheticStoreSuite {
 protected:
  // A plain run exported as the HF base, a LoRA run from it (base.json: only what trained is
  // saved) with norms trained besides, and a LoRA run without a base (every weight saved).
  static void SetUpTestSuite() {
    SyntheticStoreSuite::SetUpTestSuite();
    if (HasFatalFailure()) return;
    auto plain = run(kBin, {"train", tiny_run_config("plain"), "--set", "train.budget.tokens=256"});
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    auto exported = run(kBin, {"export", "--model", run_dir("plain"), "--out", base()});
    ASSERT_EQ(exported.exit_code, 0) << exported.err;
    const std::vector<std::string> lora = {"--set", "model.adapters.lora.rank=2", "--set",
                                           "model.adapters.lora.targets=[qkv, o, down]", "--set",
                                           "train.trainable=[adapters, norms]", "--set", "train.budget.tokens=256"};
    std::vector<std::string> on_base = {"train", tiny_run_config("lora"), "--set", "model.init=hf:" + base()};
    on_base.insert(on_base.end(), lora.begin(), lora.end());
    auto trained = run(kBin, on_base);
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    ASSERT_TRUE(fs::exists(run_dir("lora") + "/final/base.json"));
    std::vector<std::string> scratch = {"train", tiny_run_config("lora-scratch")};
    scratch.insert(scratch.end(), lora.begin(), lora.end());
    trained = run(kBin, scratch);
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    ASSERT_FALSE(fs::exists(run_dir("lora-scratch") + "/final/base.json"));
  }
  static std::string base() { return *dir_ / "base-hf"; }
};

TEST_F(AdapterExport, WritesWhatTheMergedPathWroteFromTheRunsOwnFile) {
  test::TempDir out;
  for (const std::string name : {"lora", "lora-scratch"})
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      const std::string what = name + (dtype == at::kFloat ? " fp32" : " bf16");
      const auto stored = trainer::open_stored_model(run_dir(name), {});
      const fs::path lean = out.path() / (what + " lean"), merged = out.path() / (what + " merged");
      trainer::export_run_lora_adapter(stored, lean, base(), dtype);
      merged_path_export(stored, merged, base(), dtype);
      expect_same_folder(lean, merged, what);
    }
  // What the command writes today (the merged path) is the same folder too.
  auto cli = run(kBin, {"export", "--model", run_dir("lora"), "--adapter", "--out", out / "cli"});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  expect_same_folder(out.path() / "cli", out.path() / "lora fp32 lean", "segtrain export --adapter");
}

// The base's weights are not read: with them gone the adapter is exported as trained, saying the
// base changed; the merged path (the base loaded, checked against base.json) refused.
TEST_F(AdapterExport, ReadsNoneOfTheBasesWeights) {
  test::TempDir out;
  const auto stored = trainer::open_stored_model(run_dir("lora"), {});
  trainer::export_run_lora_adapter(stored, out.path() / "before", base(), at::kFloat);
  const fs::path weights = fs::path(base()) / "model.safetensors", aside = *dir_ / "aside.safetensors";
  fs::rename(weights, aside);
  testing::internal::CaptureStderr();
  std::string error;
  try {
    trainer::export_run_lora_adapter(stored, out.path() / "after", base(), at::kFloat);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const std::string said = testing::internal::GetCapturedStderr();
  const std::string merged =
      test::input_error_of([&] { merged_path_export(stored, out.path() / "merged", base(), at::kFloat); });
  fs::rename(aside, weights);
  ASSERT_EQ(error, "");
  expect_same_folder(out.path() / "after", out.path() / "before", "without the base's weights");
  EXPECT_NE(said.find("has no model.safetensors now: the adapters are exported as trained"), std::string::npos) << said;
  EXPECT_NE(merged.find("model.safetensors is gone"), std::string::npos) << merged;
}

TEST_F(AdapterExport, ARunWithoutAdaptersOrWithoutItsTensorsIsRefused) {
  test::TempDir out;
  const std::string plain = test::input_error_of([&] {
    trainer::export_run_lora_adapter(trainer::open_stored_model(run_dir("plain"), {}), out / "p", "", at::kFloat);
  });
  EXPECT_NE(plain.find("was not trained with LoRA adapters (model.adapters.lora); export it without --adapter"),
            std::string::npos)
      << plain;
  // A run folder whose file lacks a tensor that trains (a copy with one adapter dropped).
  const fs::path copy = out.path() / "copy";
  fs::copy(run_dir("lora") + "/final", copy);
  auto tensors = models::read_safetensors((copy / "model.safetensors").string());
  const auto dropped = std::find_if(tensors.begin(), tensors.end(),
                                    [](const auto& t) { return t.first.find(".lora_B.") != std::string::npos; });
  ASSERT_NE(dropped, tensors.end());
  const std::string name = dropped->first;
  tensors.erase(dropped);
  models::write_safetensors((copy / "model.safetensors").string(), tensors);
  const std::string missing = test::input_error_of([&] {
    trainer::export_run_lora_adapter(trainer::open_stored_model(copy.string(), {}), out / "m", "", at::kFloat);
  });
  EXPECT_NE(missing.find("model.safetensors: holds no " + name + ", a parameter its converters.json trains"),
            std::string::npos)
      << missing;
}

}  // namespace
}  // namespace segtrain
