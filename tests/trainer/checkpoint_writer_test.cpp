// Run checkpoints saved in the background (checkpoint_writer.h): what a save
// holds is its step's values whatever training does to them afterwards, and a
// save that another rank failed or did not finish in time is reported and
// leaves the earlier checkpoints as they were. The ranks' agreement is played
// by a stand-in (the 2- and 3-rank runs of train_cli_test do it for real).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "common/error.h"
#include "models/modules/safetensors.h"
#include "test_util.h"
#include "tiny_models.h"
#include "trainer/train/checkpoint_parts.h"
#include "trainer/train/checkpoint_writer.h"
#include "trainer/train/run_checkpoint.h"

namespace segtrain::trainer {
namespace {

// What a one-rank run saves, from the saved files its parts are made of (checkpoint_parts.h).
CheckpointContent content_of(const at::Tensor& weight, const at::Tensor& moment, int64_t step) {
  TrainerState state;
  state.step = step;
  return {saved_model(test::tiny_model_config(models::Arch::gpt2, 32, 64), {{"wte.weight", weight}}),
          saved_optimizer(step, {{"wte.weight", 0, moment.reshape(-1), moment.reshape(-1) * 2}}, 0, 1),
          saved_texts({{"trainer_state.json", state_to_json(state)}, {"config.yaml", "run: {}\n"}})};
}

// trainer_state.json: what training cost so far travels with the step; a state
// written before it existed reads as unknown (and is written so again), and a bad
// value is refused naming the key.
TEST(TrainerStateJson, TrainSecondsRoundTripsAndABadValueIsRefusedNamingIt) {
  TrainerState state;
  state.step = 3;
  state.train_seconds = 12.25;
  EXPECT_EQ(state_from_json(state_to_json(state), "s.json").train_seconds, 12.25);
  nlohmann::json j = nlohmann::json::parse(state_to_json(state));
  j["train_seconds"] = 12;  // an integer is a number of seconds too
  EXPECT_EQ(state_from_json(j.dump(), "s.json").train_seconds, 12.0);
  j.erase("train_seconds");
  const TrainerState old = state_from_json(j.dump(), "old.json");
  EXPECT_FALSE(old.train_seconds.has_value());
  EXPECT_FALSE(nlohmann::json::parse(state_to_json(old)).contains("train_seconds"));
  auto with_seconds = [&](const std::string& value) {
    return j.dump().substr(0, j.dump().size() - 1) + ", \"train_seconds\": " + value + "}";
  };
  EXPECT_THROW(state_from_json(with_seconds("1e400"), "bad.json"), InputError);  // the parser's overflow
  for (const char* bad : {"-1", "\"12\"", "null"}) {
    const std::string text = with_seconds(bad);
    try {
      state_from_json(text, "bad.json");
      ADD_FAILURE() << bad << " was taken";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.json: not a valid trainer state: \"train_seconds\" must be a number >= 0"),
                std::string::npos) << e.what();
    }
  }
}

// What a bf16 run on the CPU computed its matmuls in (trainer/runtime/cpu_matmul.h) travels with
// the step; a state without it (any other run, or one written before it existed) has none, and
// anything but "bf16" or "fp32" is refused naming the key.
TEST(TrainerStateJson, CpuMatmulRoundTripsAndABadValueIsRefusedNamingIt) {
  TrainerState state;
  EXPECT_FALSE(nlohmann::json::parse(state_to_json(state)).contains("cpu_matmul"));
  EXPECT_EQ(state_from_json(state_to_json(state), "s.json").cpu_matmul, "");
  for (const char* dtype : {"bf16", "fp32"}) {
    state.cpu_matmul = dtype;
    EXPECT_EQ(state_from_json(state_to_json(state), "s.json").cpu_matmul, dtype);
  }
  nlohmann::json j = nlohmann::json::parse(state_to_json(state));
  for (const nlohmann::json& bad : {nlohmann::json("fp16"), nlohmann::json(""), nlohmann::json(1), nlohmann::json(nullptr),
                                    nlohmann::json::array({"bf16"})}) {
    j["cpu_matmul"] = bad;
    try {
      state_from_json(j.dump(), "bad.json");
      ADD_FAILURE() << bad.dump() << " was taken";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.json: not a valid trainer state: \"cpu_matmul\" must be \"bf16\" or "
                                           "\"fp32\", got " + bad.dump()),
                std::string::npos) << e.what();
    }
  }
}

TEST(CheckpointWriter, ASaveHoldsItsStepsValuesWhileTrainingChangesThem) {
  test::TempDir tmp;
  const fs::path run = tmp.path() / "run", dir = run / "checkpoints" / "step-3";
  CheckpointWriter writer(0, 1, [](std::vector<double> v) { return v; }, run, 0, std::chrono::seconds(60));
  at::Tensor weight = at::ones({4, 2}), moment = at::arange(8, at::kFloat);
  writer.prepare(dir);
  writer.start(dir, content_of(weight, moment, 3), /*background=*/true);
  EXPECT_NE(writer.part(), SavePart::none);
  writer.wait_for_copy();
  weight.fill_(7), moment.fill_(-1);  // the next step's update
  while (writer.part() == SavePart::writing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(writer.part(), SavePart::written);
  EXPECT_FALSE(fs::exists(dir)) << "visible before the ranks agreed";
  writer.settle(0, 0);  // the step's totals: not every rank has written yet
  EXPECT_NE(writer.part(), SavePart::none);
  writer.settle(1, 0);  // all written: rank 0 renames it in
  ASSERT_TRUE(fs::exists(dir / "trainer_state.json"));
  EXPECT_NE(writer.part(), SavePart::none) << "the ranks have not heard yet that the rename worked";
  writer.settle(1, 0);
  EXPECT_EQ(writer.part(), SavePart::none);
  EXPECT_FALSE(fs::exists(shared_temp_dir(dir)));

  EXPECT_TRUE(torch::equal(models::read_safetensors((dir / "model.safetensors").string()).at("wte.weight"),
                           at::ones({4, 2})));
  const auto saved = read_optimizer_state(dir);
  ASSERT_TRUE(saved.has_value());
  EXPECT_EQ(saved->steps(), 3);
  EXPECT_TRUE(torch::equal(saved->read("exp_avg", "wte.weight", 8, 2, 4), at::arange(2, 6, at::kFloat)));
  EXPECT_TRUE(torch::equal(saved->read("exp_avg_sq", "wte.weight", 8, 0, 8), at::arange(8, at::kFloat) * 2));
  EXPECT_THROW(saved->read("exp_avg", "wte.weight", 9, 0, 9), InputError);  // another model's parameter
}

TEST(CheckpointWriter, AnotherRanksFailureOrLatenessFailsTheSaveAndKeepsTheEarlierOne) {
  test::TempDir tmp;
  const fs::path run = tmp.path() / "run";
  // The other rank's share of each agreement: {written, failed, late}.
  std::vector<double> others = {0, 0, 0};
  auto agree = [&](std::vector<double> v) {
    for (size_t i = 0; i < v.size(); ++i) v[i] += others[i];
    return v;
  };
  CheckpointWriter writer(0, 2, agree, run, 0, std::chrono::seconds(60));
  auto save = [&](int64_t step) {
    const fs::path dir = run / "checkpoints" / ("step-" + std::to_string(step));
    writer.prepare(dir);
    writer.start(dir, content_of(at::ones({4, 2}) * static_cast<double>(step), at::zeros({8}), step), step != 2);
    return dir;
  };
  others = {1, 0, 0};  // the other rank has written its part
  const fs::path first = save(1);
  writer.finish();
  ASSERT_TRUE(fs::exists(first / "trainer_state.json"));

  others = {0, 1, 0};  // the other rank could not write its part
  const fs::path second = save(2);
  try {
    writer.finish();
    FAIL() << "a failed part went unnoticed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint '" + second.string() + "' not saved (earlier checkpoints are "
                                         "intact): 1 rank(s) could not write or commit their part"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(writer.part(), SavePart::none);
  EXPECT_FALSE(fs::exists(second));
  EXPECT_FALSE(fs::exists(shared_temp_dir(second)));

  others = {0, 0, 1};  // the other rank still writing after distributed.save_timeout_s
  const fs::path third = save(3);
  try {
    writer.finish();
    FAIL() << "a late part went unnoticed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("1 rank(s) had not written their part after distributed.save_timeout_s "
                                         "(60 s)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(third));

  // This rank's own write fails (its directory is gone): its reason, and the same outcome.
  others = {1, 0, 0};
  const fs::path fourth = run / "checkpoints" / "step-4";
  writer.prepare(fourth);
  fs::remove_all(shared_temp_dir(fourth));
  writer.start(fourth, content_of(at::ones({4, 2}), at::zeros({8}), 4), true);
  try {
    writer.finish();
    FAIL() << "a failed write went unnoticed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint '" + fourth.string() + "' not saved (earlier checkpoints are "
                                         "intact): cannot create"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(fourth));
  EXPECT_TRUE(torch::equal(models::read_safetensors((first / "model.safetensors").string()).at("wte.weight"),
                           at::ones({4, 2})));
}

}  // namespace
}  // namespace segtrain::trainer
