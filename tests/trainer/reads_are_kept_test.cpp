// No command writes what it reads (issue 47): an output that is one of the command's
// inputs, lies inside an input folder or holds one is refused before any work with exit 2
// naming both, whatever path reaches it (a link, `..`, a hard link), and every file it
// would have written over keeps its bytes. A store re-split from a store's Megatron files
// keeps that store's vocabulary and tokenizer instead of a default. Sizes a user gives are
// bounded before work (exit 2 with the figure, never LibTorch's abort or std::bad_alloc), and
// segtrain-launch does not restart a worker whose input is wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>

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

// A run converted from a base reads the base through its base.json (issue 58): no command writes
// into it (old main: `eval --out BASE/model.safetensors` replaced the base's 538 MB of weights with
// eval's JSON and exited 0, and every later load of the run exited 2), nor over the PEFT adapter a
// `peft:` run continues (old main: `export --adapter --overwrite` replaced it, and the run's
// --resume exited 2), nor does a run's output folder go inside that adapter.
TEST_F(ReadsAreKept, NothingIsWrittenIntoALoraRunsBaseOrTheAdapterItContinues) {
  const std::string base = *dir_ / "lora-base-hf";
  auto exported = run(kBin, {"export", "--model", run_dir("run"), "--out", base});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const std::vector<std::string> lora_sets = {"--set", "model.adapters.lora.rank=2", "--set",
                                              "model.adapters.lora.targets=[o, down]", "--set",
                                              "train.budget.tokens=256"};
  std::vector<std::string> train = {"train", tiny_run_config("lora"), "--set", "model.init=hf:" + base};
  train.insert(train.end(), lora_sets.begin(), lora_sets.end());
  auto trained = run(kBin, train);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  ASSERT_TRUE(fs::exists(run_dir("lora") + "/final/base.json"));
  const std::string named = "' is inside the base of --model (its base.json) '" + fs::absolute(base).string() +
                            "', which this command reads";
  const std::vector<std::string> kept = {base + "/model.safetensors", base + "/config.json"};
  const std::vector<std::string> eval = {"eval", "--model", run_dir("lora"), "--data", store(), "--lengths", "32"};
  auto with = [](std::vector<std::string> command, const std::vector<std::string>& more) {
    command.insert(command.end(), more.begin(), more.end());
    return command;
  };
  refused(with(eval, {"--out", base + "/model.safetensors"}), {"--out '" + base + "/model.safetensors" + named}, kept);
  refused(with(eval, {"--out", *dir_ / "lora-eval.json", "--per-position", base + "/curve.csv"}),
          {"--per-position '" + base + "/curve.csv" + named}, kept);
  refused({"generate", "--model", run_dir("lora"), "--prompt-ids", "1,2,3", "--max-new-tokens", "2", "--out",
           base + "/model.safetensors"},
          {"--out '" + base + "/model.safetensors" + named}, kept);
  refused({"export", "--model", run_dir("lora"), "--out", base + "/merged"}, {"--out '" + base + "/merged" + named},
          kept);
  refused({"export", "--model", run_dir("lora"), "--adapter", "--out", base + "/adapter"},
          {"--out '" + base + "/adapter" + named}, kept);
  EXPECT_FALSE(fs::exists(*dir_ / "lora-eval.json"));
  EXPECT_FALSE(fs::exists(base + "/merged"));
  EXPECT_FALSE(fs::exists(base + "/adapter"));
  auto evaluated = run(kBin, with(eval, {"--out", *dir_ / "lora-eval.json"}));
  EXPECT_EQ(evaluated.exit_code, 0) << "the base is whole: " << evaluated.err;

  // The run's adapter as a PEFT folder, continued by a peft: run; exporting that run's adapter over
  // the folder it continues is refused, --overwrite or not, and so is a run inside it.
  const std::string adapter = *dir_ / "lora-adapter";
  auto peft = run(kBin, {"export", "--model", run_dir("lora"), "--adapter", "--out", adapter});
  ASSERT_EQ(peft.exit_code, 0) << peft.err;
  auto continued = run(kBin, {"train", tiny_run_config("lora-continued"), "--set", "model.init=peft:" + adapter,
                              "--set", "train.budget.tokens=256"});
  ASSERT_EQ(continued.exit_code, 0) << continued.err;
  const std::vector<std::string> adapter_files = {adapter + "/adapter_model.safetensors",
                                                  adapter + "/adapter_config.json"};
  refused({"export", "--model", run_dir("lora-continued"), "--adapter", "--out", adapter, "--overwrite"},
          {"--out '" + adapter + "' is the PEFT adapter --model continues (its config.yaml's model.init) '" +
           fs::absolute(adapter).string() + "'"},
          adapter_files);
  refused({"train", tiny_run_config("lora-inside"), "--set", "model.init=peft:" + adapter, "--set",
           "run.output_dir=" + adapter + "/run"},
          {"run.output_dir '" + adapter + "/run' is inside model.init '" + adapter + "'"}, adapter_files);
  EXPECT_FALSE(fs::exists(adapter + "/run"));
  auto resumed = run(kBin, {"train", tiny_run_config("lora-continued"), "--set", "model.init=peft:" + adapter,
                            "--set", "train.budget.tokens=256", "--resume"});
  EXPECT_EQ(resumed.exit_code, 0) << "the adapter is whole: " << resumed.err;
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

// An export onto a read-only mount is refused before any weights are read, exit 2 with the OS's
// reason, as train, prepare and eval refuse it (old main: exit 1, a raw "filesystem error").
TEST_F(ReadsAreKept, AnExportOntoAReadOnlyMountExitsTwo) {
  if (::geteuid() != 0) SKIP_NOT_APPLICABLE("mounting a read-only tmpfs needs root");
  const std::string mount = *dir_ / "read-only";
  fs::create_directories(mount);
  if (std::system(("mount -t tmpfs -o ro,size=1m tmpfs " + test::shell_quote(mount) + " 2>/dev/null").c_str()) != 0)
    SKIP_NOT_APPLICABLE("cannot mount a tmpfs here");
  const auto r = run(kBin, {"export", "--model", run_dir("run"), "--out", mount + "/hf"});
  std::system(("umount " + test::shell_quote(mount)).c_str());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--out '" + mount + "/hf': cannot write into '" + mount + "': Read-only file system"),
            std::string::npos) << r.err;
}

// An output where nothing can be created, though the permission bits allow it (root on /proc),
// is refused before the input is read (old main: exit 1 after reading, "cannot create
// directories"); a vocabulary below what the corpus's characters need says how large it must be
// (old main: sentencepiece's advice, then "try a smaller --vocab-size").
TEST_F(ReadsAreKept, PrepareSaysWhatItCannotCreateAndWhatVocabularyItNeeds) {
  const std::string corpus = *dir_ / "tiny-corpus";
  fs::create_directories(corpus);
  for (int i = 0; i < 20; ++i)
    std::ofstream(corpus + "/d" + std::to_string(i) + ".txt") << "Document " << i << " reads quickly; the zebra jumps.\n";
  if (::geteuid() == 0 && fs::is_directory("/proc/self")) {
    const auto r = run(kBin, {"prepare", "--input", corpus, "--out", "/proc/segtrain-store", "--vocab-size", "64"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--out '/proc/segtrain-store': cannot create anything in '/proc'"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("read "), std::string::npos) << "refused before reading: " << r.err;
  }
  const auto small = run(kBin, {"prepare", "--input", corpus, "--out", *dir_ / "tiny-store", "--vocab-size", "10"});
  EXPECT_EQ(small.exit_code, 2) << small.err;
  EXPECT_NE(small.err.find("--vocab-size 10 is smaller than the "), std::string::npos) << small.err;
  EXPECT_NE(small.err.find("pieces this corpus needs at least"), std::string::npos) << small.err;
  EXPECT_EQ(small.err.find("try a smaller"), std::string::npos) << small.err;
}

// --max-new-tokens against the KV cache it needs (old main: exit 134, LibTorch's "can't
// allocate memory: you tried to allocate 256000000768 bytes"), a temperature that is no number
// (old main: exit 1 from inside sampling), `sample --count` against the disk (old main: the
// samples built in memory until std::bad_alloc).
TEST_F(ReadsAreKept, SizesAreBoundedBeforeWork) {
  auto huge = run(kBin, {"generate", "--model", run_dir("run"), "--prompt-ids", "1,2,3", "--max-new-tokens",
                         "1000000000"});
  EXPECT_EQ(huge.exit_code, 2) << huge.err;
  EXPECT_NE(huge.err.find("--max-new-tokens 1000000000: 3 prompt tokens + 1000000000 new ones need a KV cache of"),
            std::string::npos) << huge.err;
  EXPECT_NE(huge.err.find("GiB available; ask for fewer tokens"), std::string::npos) << huge.err;
  for (const char* temperature : {"nan", "inf", "-1"}) {
    auto r = run(kBin, {"generate", "--model", run_dir("run"), "--prompt-ids", "1,2", "--temperature", temperature});
    EXPECT_EQ(r.exit_code, 2) << temperature << ": " << r.err;
    EXPECT_NE(r.err.find(std::string("--temperature: expected a number in [0, 1e+06], got '") + temperature),
              std::string::npos) << r.err;
  }
  const std::string config = tiny_run_config("counted");
  auto many = run(kBin, {"sample", config, "--count", "1000000000000", "--out", *dir_ / "many.jsonl"}, 60);
  EXPECT_EQ(many.exit_code, 2) << many.err;
  EXPECT_NE(many.err.find("--count 1000000000000: the samples would take about"), std::string::npos) << many.err;
  EXPECT_FALSE(fs::exists(*dir_ / "many.jsonl"));
  // A count that fits is written whole, one line a sample.
  auto some = run(kBin, {"sample", config, "--count", "25", "--out", *dir_ / "some.jsonl"});
  ASSERT_EQ(some.exit_code, 0) << some.err;
  const std::string text = test::read_file(*dir_ / "some.jsonl");
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 25);
}

// A worker that exits 2 (its config is wrong) is not restarted, whatever --max-restarts says,
// and the launcher ends with 2; a worker that keeps failing otherwise is restarted, then the
// launcher ends with that worker's code (old main: three restarts, then 1).
TEST(Launcher, AnInputErrorIsNotRestartedAndTheWorkersCodeIsKept) {
  test::TempDir dir;
  const std::string counter = dir / "attempts";
  auto worker = [&](int code) {
    return std::vector<std::string>{"--nproc-per-node", "1", "--max-restarts", "3", "--no-python", "sh", "-c",
                                    "echo x >> " + counter + "; exit " + std::to_string(code)};
  };
  auto config_error = run(test::kLaunch, worker(2));
  EXPECT_EQ(config_error.exit_code, 2) << config_error.err;
  EXPECT_NE(config_error.err.find("rank 0 exited with code 2 (an input or configuration error, which a restart "
                                  "cannot fix); not restarting"),
            std::string::npos) << config_error.err;
  EXPECT_EQ(test::read_file(counter), "x\n") << "started once";
  fs::remove(counter);
  auto failing = run(test::kLaunch, worker(3));
  EXPECT_EQ(failing.exit_code, 3) << failing.err;
  EXPECT_NE(failing.err.find("giving up after 3 restarts"), std::string::npos) << failing.err;
  EXPECT_EQ(test::read_file(counter), "x\nx\nx\nx\n") << "started 4 times";
}

}  // namespace
}  // namespace segtrain
