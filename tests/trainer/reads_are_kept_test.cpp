// No command writes what it reads (issue 47): an output that is one of the command's
// inputs, lies inside an input folder or holds one is refused before any work with exit 2
// naming both, whatever path reaches it (a link, `..`, a hard link), and every file it
// would have written over keeps its bytes. And a store re-split from a store's Megatron
// files keeps that store's vocabulary and tokenizer instead of a default.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace segtrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::kBin;
using test::run;

class ReadsAreKept : public test::SyntheticStoreSuite {
 protected:
  static void SetUpTestSuite() {
    SyntheticStoreSuite::SetUpTestSuite();
    if (HasFatalFailure()) return;
    auto trained = run(kBin, {"train", tiny_run_config("run"), "--set", "train.budget.tokens=256"});
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
  }

  // Runs `args`, expects exit 2 with every one of `needles` in stderr, and `kept`'s
  // bytes as they were.
  static void refused(const std::vector<std::string>& args, const std::vector<std::string>& needles,
                      const std::vector<std::string>& kept) {
    std::vector<std::string> before;
    for (const auto& file : kept) before.push_back(test::read_file(file));
    const auto r = run(kBin, args);
    std::string command;
    for (const auto& a : args) command += a + " ";
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.err;
    for (const auto& needle : needles) EXPECT_NE(r.err.find(needle), std::string::npos) << command << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(test::read_file(kept[i]), before[i]) << kept[i] << " changed";
  }
  static std::string store() { return *dir_ / "store"; }
  static std::string weights() { return run_dir("run") + "/final/model.safetensors"; }
};

TEST_F(ReadsAreKept, EvalNeverWritesOverTheStoreOrTheModel) {
  const std::vector<std::string> eval = {"eval", "--model", run_dir("run"), "--data", store(), "--lengths", "32"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), eval.begin(), eval.end());
    return more;
  };
  const std::vector<std::string> kept = {store() + "/meta.json", store() + "/train.idx", weights()};
  refused(with({"--out", store() + "/meta.json"}), {"--out '" + store() + "/meta.json' is inside --data"}, kept);
  refused(with({"--out", store() + "/train.idx"}), {"is inside --data"}, kept);
  refused(with({"--out", weights()}), {"is inside --model", "which this command reads"}, kept);
  // The same file reached through `..` and through a link.
  refused(with({"--out", run_dir("run") + "/final/../final/model.safetensors"}), {"is inside --model"}, kept);
  fs::create_symlink(store() + "/meta.json", *dir_ / "meta-link.json");
  refused(with({"--out", *dir_ / "meta-link.json"}), {"is inside --data"}, kept);
  refused(with({"--out", *dir_ / "eval.json", "--per-position", store() + "/curve.csv"}),
          {"--per-position '" + store() + "/curve.csv' is inside --data"}, kept);
  EXPECT_FALSE(fs::exists(*dir_ / "eval.json")) << "refused before anything was written";
  // Beside the weights, in the run's own folder, is not what the command reads.
  auto beside = run(kBin, with({"--out", run_dir("run") + "/eval-32.json"}));
  EXPECT_EQ(beside.exit_code, 0) << beside.err;
}

TEST_F(ReadsAreKept, GenerateNeverWritesOverTheModelOrThePrompt) {
  test::write_file(*dir_ / "prompt.txt", "the prompt\n");
  ASSERT_EQ(::link((*dir_ / "prompt.txt").c_str(), (*dir_ / "prompt-hardlink.txt").c_str()), 0);
  const std::vector<std::string> kept = {*dir_ / "prompt.txt", weights()};
  const std::vector<std::string> generate = {"generate", "--model", run_dir("run"), "--max-new-tokens", "4"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), generate.begin(), generate.end());
    return more;
  };
  refused(with({"--prompt-ids", "1,2,3", "--out", weights()}), {"is inside --model"}, kept);
  refused(with({"--prompt-file", *dir_ / "prompt.txt", "--out", *dir_ / "prompt.txt"}),
          {"--out '" + (*dir_ / "prompt.txt") + "' is --prompt-file", "would destroy it"}, kept);
  refused(with({"--prompt-file", *dir_ / "prompt.txt", "--out", *dir_ / "prompt-hardlink.txt"}), {"is --prompt-file"},
          kept);
}

TEST_F(ReadsAreKept, SampleNeverWritesOverItsConfigOrTheStore) {
  const std::string config = tiny_run_config("sampled");
  refused({"sample", config, "--out", config}, {"--out '" + config + "' is the config"}, {config});
  refused({"sample", config, "--out", store() + "/samples.jsonl"}, {"is inside data.store"}, {config});
  EXPECT_FALSE(fs::exists(store() + "/samples.jsonl"));
}

TEST_F(ReadsAreKept, PrepareNeverMakesAStoreFromItselfOrInsideItsInput) {
  const std::vector<std::string> kept = {store() + "/meta.json", store() + "/train.bin", store() + "/valid.idx"};
  refused({"prepare", "--input", store() + "/train.bin", "--out", store()},
          {"--out '" + store() + "' holds --input '" + store() + "/train.bin'"}, kept);
  refused({"prepare", "--input", *dir_ / "corpus", "--out", *dir_ / "corpus/store"}, {"is inside --input"}, kept);
  EXPECT_FALSE(fs::exists(*dir_ / "corpus/store"));
}

TEST_F(ReadsAreKept, ARunNeverWritesIntoItsStoreOrItsBase) {
  const std::string config = tiny_run_config("into-store");
  refused({"train", config, "--set", "run.output_dir=" + store()}, {"run.output_dir '" + store() + "' is data.store"},
          {store() + "/meta.json"});
  refused({"train", config, "--set", "run.output_dir=" + store() + "/run"}, {"is inside data.store"},
          {store() + "/meta.json"});
  refused({"train", config, "--set", "model.init=checkpoint:" + run_dir("run") + "/final", "--set",
           "run.output_dir=" + run_dir("run") + "/final/more"},
          {"is inside model.init"}, {weights()});
}

// A store's own Megatron files re-split into another store: its vocabulary, EOS and
// tokenizer, not --vocab-size's default; Megatron files with no store around them: their
// largest token id + 1, said in a warning.
TEST_F(ReadsAreKept, AMegatronInputKeepsItsOwnVocabulary) {
  const json source = json::parse(test::read_file(store() + "/meta.json"));
  auto resplit = run(kBin, {"prepare", "--input", store() + "/train.bin", store() + "/valid.bin", "--out",
                            *dir_ / "resplit"});
  ASSERT_EQ(resplit.exit_code, 0) << resplit.err;
  const json got = json::parse(test::read_file(*dir_ / "resplit/meta.json"));
  for (const char* key : {"vocab_size", "eos_id", "bos_id", "tokenizer"}) EXPECT_EQ(got[key], source[key]) << key;
  EXPECT_EQ(got["vocab_size"], 160);
  EXPECT_EQ(test::read_file(*dir_ / "resplit/tokenizer.model"), test::read_file(store() + "/tokenizer.model"));

  fs::create_directories(*dir_ / "bare");
  for (const char* ext : {".bin", ".idx"}) fs::copy_file(store() + "/train" + ext, *dir_ / (std::string("bare/part") + ext));
  auto bare = run(kBin, {"prepare", "--input", *dir_ / "bare/part.bin", "--out", *dir_ / "bare-store"});
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  EXPECT_NE(bare.err.find("record no vocabulary: the store's is their largest token id + 1"), std::string::npos)
      << bare.err;
  const int64_t vocab = json::parse(test::read_file(*dir_ / "bare-store/meta.json"))["vocab_size"].get<int64_t>();
  EXPECT_LE(vocab, 160);
  EXPECT_GT(vocab, 100) << "the largest id of 40 documents of a 160-piece vocabulary";
  auto given = run(kBin, {"prepare", "--input", *dir_ / "bare/part.bin", "--out", *dir_ / "given-store",
                          "--vocab-size", "300"});
  ASSERT_EQ(given.exit_code, 0) << given.err;
  EXPECT_EQ(json::parse(test::read_file(*dir_ / "given-store/meta.json"))["vocab_size"], 300);
}

}  // namespace
}  // namespace segtrain
