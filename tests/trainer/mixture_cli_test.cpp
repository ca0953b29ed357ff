// data.mixture through the binary, as a user runs it: long-document windows cut by chunk
// mixed with short documents at their own positions; the run resumes exactly, counts each
// source's tokens in metrics.jsonl and trainer_state.json and each step's loss on each source (also
// through the captured step's static tensors), `segtrain sample` shows the mixed stream, and a store of another tokenizer or a source without a window is refused (exit 2).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>
#include <thread>

#include "test_util.h"

namespace segtrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::kBin;
using test::run;

class MixtureCli : public test::SyntheticStoreSuite {
 protected:
  static void SetUpTestSuite() {
    SyntheticStoreSuite::SetUpTestSuite();
    // Short documents (40 to 120 tokens) in the suite store's tokenizer, and a store of another one.
    auto synth = run(kBin, {"synth", "--out", *dir_ / "short-corpus", "--docs", "120", "--min-tokens", "40",
                            "--max-tokens", "120", "--seed", "9"});
    ASSERT_EQ(synth.exit_code, 0) << synth.err;
    auto same = run(kBin, {"prepare", "--input", *dir_ / "short-corpus/train.jsonl", "--out", *dir_ / "short",
                           "--tokenizer", *dir_ / "store/tokenizer.model"});
    ASSERT_EQ(same.exit_code, 0) << same.err;
    auto other = run(kBin, {"prepare", "--input", *dir_ / "short-corpus/train.jsonl", "--out", *dir_ / "other",
                            "--vocab-size", "120"});
    ASSERT_EQ(other.exit_code, 0) << other.err;
    auto bigger = run(kBin, {"prepare", "--input", *dir_ / "short-corpus/train.jsonl", "--out", *dir_ / "bigger",
                             "--vocab-size", "300"});
    ASSERT_EQ(bigger.exit_code, 0) << bigger.err;
  }
  // The long store's windows (chunk-0.25, L_e 128) at 3/4 and the short documents' 32-token
  // windows at positions 0..31 (truncate, L_e = L_t) at 1/4.
  static std::string mixture(const std::string& short_store, const std::string& short_le = "32") {
    return "data.mixture=[{name: long, weight: 0.75}, {name: short, store: " + short_store +
           ", weight: 0.25, extended_length: " + short_le + ", sampler: {method: truncate}}]";
  }
  static std::vector<std::string> train_args(const std::string& name, const std::string& short_store) {
    return {"train", tiny_run_config(name, {.arch = "llama"}), "--set", mixture(short_store), "--set",
            "train.budget.tokens=3840", "--set", "train.checkpoint_every=10", "--set", "train.keep_last=0"};
  }
  static json state_of(const fs::path& dir) { return json::parse(test::read_file(dir / "trainer_state.json")); }
};

TEST_F(MixtureCli, AMixtureTrainsResumesExactlyAndCountsEachSource) {
  auto whole = run(kBin, train_args("whole", *dir_ / "short"), 600);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_NE(whole.err.find("source short (25% of the samples, truncate, L_e 32)"), std::string::npos) << whole.err;
  const json final_state = state_of(run_dir("whole") + "/final");
  ASSERT_EQ(final_state["source_tokens"].size(), 2u) << final_state.dump();
  const int64_t from_long = final_state["source_tokens"][0]["tokens"], from_short = final_state["source_tokens"][1]["tokens"];
  EXPECT_EQ(final_state["source_tokens"][1]["name"], "short");
  EXPECT_EQ(from_long + from_short, final_state["tokens"].get<int64_t>()) << "every token comes from one source";
  EXPECT_GT(from_short, 0);
  EXPECT_GT(from_long, from_short) << "3/4 of 120 samples are expected from the long store";
  EXPECT_EQ(final_state["data_cursor"]["sources"].size(), 2u);
  // Each logged step's counts, the last one's the run's; and the step's loss on each source's
  // tokens, whose token-weighted mean is the step's loss.
  std::istringstream lines(test::read_file(fs::path(run_dir("whole")) / "metrics.jsonl"));
  json last;
  int64_t steps_with_both = 0;
  for (std::string line; std::getline(lines, line);) {
    last = json::parse(line);
    EXPECT_EQ(last["source_tokens"]["long"].get<int64_t>() + last["source_tokens"]["short"].get<int64_t>(),
              last["tokens"].get<int64_t>());
    const json& tokens = last["source_loss_tokens"];
    ASSERT_TRUE(tokens.is_object() && tokens.size() == 2) << line;
    EXPECT_EQ(tokens["long"].get<int64_t>() + tokens["short"].get<int64_t>(), last["loss_tokens"].get<int64_t>());
    double weighted = 0;
    for (const std::string name : {"long", "short"}) {
      const json& loss = last["source_loss"][name];
      if (tokens[name].get<int64_t>() == 0) {
        EXPECT_TRUE(loss.is_null()) << line;
        continue;
      }
      EXPECT_GT(loss.get<double>(), 0) << line;
      weighted += loss.get<double>() * tokens[name].get<double>();
    }
    const double loss = last["loss"];
    EXPECT_NEAR(weighted / last["loss_tokens"].get<double>(), loss, 1e-5 * loss) << line;
    steps_with_both += tokens["long"].get<int64_t>() > 0 && tokens["short"].get<int64_t>() > 0;
  }
  EXPECT_GT(steps_with_both, 0) << "no step drew from both sources";
  EXPECT_EQ(last["source_tokens"]["short"], from_short);

  // The same run stopped after its step-10 checkpoint and resumed: the same model and counts.
  fs::create_directories(run_dir("cut"));
  fs::copy(run_dir("whole") + "/checkpoints", run_dir("cut") + "/checkpoints", fs::copy_options::recursive);
  for (const auto& e : fs::directory_iterator(run_dir("cut") + "/checkpoints"))
    if (e.path().filename() != "step-10") fs::remove_all(e.path());
  std::vector<std::string> resume = train_args("cut", *dir_ / "short");
  resume.push_back("--resume");
  auto resumed = run(kBin, resume, 600);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("at step 10"), std::string::npos) << resumed.err;
  EXPECT_EQ(test::read_file(run_dir("cut") + "/final/model.safetensors"),
            test::read_file(run_dir("whole") + "/final/model.safetensors"));
  const json resumed_state = state_of(run_dir("cut") + "/final");
  EXPECT_EQ(resumed_state["data_cursor"], final_state["data_cursor"]);
  EXPECT_EQ(resumed_state["source_tokens"], final_state["source_tokens"]);
  // The resumed steps' losses by source are the uninterrupted run's.
  auto rows_after_10 = [](const std::string& run) {
    std::vector<json> out;
    std::istringstream rows(test::read_file(fs::path(run) / "metrics.jsonl"));
    for (std::string line; std::getline(rows, line);)
      if (json row = json::parse(line); row["step"].get<int64_t>() > 10) out.push_back(row["source_loss"]);
    return out;
  };
  const auto resumed_rows = rows_after_10(run_dir("cut"));
  EXPECT_FALSE(resumed_rows.empty());
  EXPECT_EQ(resumed_rows, rows_after_10(run_dir("whole")));
}

// Two ranks (2 samples each) count each source's loss over both: every logged step's split is
// one rank's with the same global batch (4 samples), its tokens exactly, its losses to fp32 rounding.
TEST_F(MixtureCli, TwoRanksSplitTheLossBySourceAsOneRank) {
  auto single = run(kBin, train_args("one-rank", *dir_ / "short"), 600);
  ASSERT_EQ(single.exit_code, 0) << single.err;
  std::vector<std::string> ranked = train_args("two-ranks", *dir_ / "short");
  for (const std::string a : {"--set", "train.micro_batch_size=2"}) ranked.push_back(a);
  const std::string port = std::to_string(test::unused_port());
  auto rank_args = [&](int rank) {
    std::vector<std::string> a = {"RANK=" + std::to_string(rank), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                                  "MASTER_PORT=" + port, kBin};
    a.insert(a.end(), ranked.begin(), ranked.end());
    return a;
  };
  test::RunResult second;
  std::thread other([&] { second = run("env", rank_args(1), 600); });
  const test::RunResult first = run("env", rank_args(0), 600);
  other.join();
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  auto rows = [](const std::string& run) {
    std::vector<json> out;
    std::istringstream lines(test::read_file(fs::path(run) / "metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) out.push_back(json::parse(line));
    return out;
  };
  const auto a = rows(run_dir("one-rank")), b = rows(run_dir("two-ranks"));
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["source_loss_tokens"], b[i]["source_loss_tokens"]) << "step " << i + 1;
    for (const std::string name : {"long", "short"}) {
      const json &x = a[i]["source_loss"][name], &y = b[i]["source_loss"][name];
      ASSERT_EQ(x.is_null(), y.is_null()) << "step " << i + 1 << " " << name;
      if (!x.is_null()) EXPECT_NEAR(x.get<double>(), y.get<double>(), 1e-5) << "step " << i + 1 << " " << name;
    }
  }
}

// SEGTRAIN_CUDA_GRAPH=static (the step a CUDA graph captures, run without capturing it: micro-batches
// copied into tensors that stay, the loss summed into ones that stay) splits a mixture's loss by source
// as the ordinary step does: every logged line and the final weights equal, with two micro-batches a step
// and evaluations between, which drop the static tensors and make them again.
TEST_F(MixtureCli, TheCapturedStepSplitsTheLossBySourceAsTheOrdinaryStep) {
  for (const std::string mode : {"0", "static"}) {
    std::vector<std::string> args = {"SEGTRAIN_CUDA_GRAPH=" + mode, kBin};
    for (const std::string& a : train_args("graph-" + mode, *dir_ / "short")) args.push_back(a);
    for (const std::string a : {"--set", "train.micro_batch_size=2", "--set", "train.grad_accum=2", "--set",
                                "train.eval_every=5"})
      args.push_back(a);
    auto r = run("env", args, 600);
    ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.err;
  }
  auto rows = [](const std::string& run) {
    std::vector<json> out;
    std::istringstream lines(test::read_file(fs::path(run) / "metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) {
      json row = json::parse(line);
      out.push_back({row["step"], row["loss"], row["source_loss"], row["source_loss_tokens"]});
    }
    return out;
  };
  const auto ordinary = rows(run_dir("graph-0")), captured = rows(run_dir("graph-static"));
  ASSERT_FALSE(ordinary.empty());
  EXPECT_TRUE(ordinary.front()[2].is_object()) << ordinary.front().dump();
  EXPECT_EQ(captured, ordinary);
  EXPECT_TRUE(test::read_file(run_dir("graph-static") + "/final/model.safetensors") ==
              test::read_file(run_dir("graph-0") + "/final/model.safetensors"));
}

TEST_F(MixtureCli, SampleShowsTheMixedStream) {
  const std::string out = *dir_ / "mixed.jsonl";
  auto sampled = run(kBin, {"sample", tiny_run_config("sample", {.arch = "llama"}), "--set", mixture(*dir_ / "short"),
                            "--count", "80", "--out", out});
  ASSERT_EQ(sampled.exit_code, 0) << sampled.err;
  std::istringstream lines(test::read_file(out));
  int64_t from_short = 0, count = 0;
  for (std::string line; std::getline(lines, line); ++count) {
    const json s = json::parse(line);
    ASSERT_TRUE(s.contains("source")) << line;
    ASSERT_EQ(s["tokens"].size(), 32u);
    if (s["source"] != "short") continue;
    ++from_short;
    for (int j = 0; j < 32; ++j) {  // short documents at their own positions, uncut
      EXPECT_EQ(s["positions"][j], j);
      EXPECT_EQ(s["offsets"][j], j);
    }
  }
  EXPECT_EQ(count, 80);
  EXPECT_GT(from_short, 5);
  EXPECT_LT(from_short, 40);
}

TEST_F(MixtureCli, AnotherTokenizerOrASourceWithoutAWindowIsRefused) {
  auto other = run(kBin, train_args("other", *dir_ / "other"), 300);
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_NE(other.err.find("data.mixture[1].store: the store '" + (*dir_ / "other") +
                           "' was made with another tokenizer than data.store's"),
            std::string::npos) << other.err;
  EXPECT_FALSE(fs::exists(run_dir("other") + "/final"));
  // Ids past the model's table (160, data.store's vocabulary) are refused even when a mismatch is allowed.
  std::vector<std::string> allowed = train_args("bigger", *dir_ / "bigger");
  allowed.insert(allowed.end(), {"--set", "data.allow_tokenizer_mismatch=true"});
  auto bigger = run(kBin, allowed, 300);
  EXPECT_EQ(bigger.exit_code, 2) << bigger.err;
  EXPECT_NE(bigger.err.find("has a vocabulary of 300 tokens, past the model's 160"), std::string::npos) << bigger.err;

  // Short documents of at most 120 words hold no window of 512 tokens.
  auto empty = run(kBin, {"train", tiny_run_config("empty", {.arch = "llama"}), "--set", "data.extended_length=512",
                          "--set", mixture(*dir_ / "short", "512"), "--set", "train.budget.tokens=640"}, 300);
  EXPECT_EQ(empty.exit_code, 2) << empty.err;
  EXPECT_NE(empty.err.find("data.mixture[1]: " + (*dir_ / "short") + ": the train split has no document of at least "
                           "L_e = 512 tokens"),
            std::string::npos) << empty.err;
  EXPECT_EQ(empty.err.find("terminate"), std::string::npos) << empty.err;
}

}  // namespace
}  // namespace segtrain
