// synth -> prepare -> sample through the real binary, Megatron datasets as
// input, and every corrupt store: exit 2 with a message naming the file.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "data/token_store.h"
#include "data_test_util.h"
#include "test_util.h"

namespace segtrain {
namespace {

using test::kBin;
using test::run;
using test::TempDir;

// A corpus of random words on which sentencepiece trains this vocabulary for minutes (2 min 40 s here).
constexpr int kSlowTrainingDocuments = 20000;
constexpr int kSlowTrainingVocabulary = 16000;
namespace fs = std::filesystem;

std::string config_for(const std::string& store, const std::string& method, int64_t lt, int64_t le) {
  return "data:\n  store: " + store + "\n  train_length: " + std::to_string(lt) + "\n  extended_length: " +
         std::to_string(le) + "\n  sampler: {method: " + method + ", alpha: 0.25}\nmodel:\n  extension: {method: interpolate}\n";
}

std::vector<nlohmann::json> read_jsonl(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(test::read_file(path));
  for (std::string line; std::getline(lines, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

class Pipeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    auto r = run(kBin, {"synth", "--out", *dir_ / "corpus", "--docs", "16", "--min-tokens", "400", "--max-tokens", "800"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run("env", {"SEGTRAIN_PROGRESS_SECONDS=0", kBin, "prepare", "--input", *dir_ / "corpus", "--out",
                    *dir_ / "store", "--vocab-size", "300", "--valid-fraction", "0.25", "--threads", "2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    prepare_log_ = new std::string(r.err);
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete prepare_log_;
  }
  static TempDir* dir_;
  static std::string* prepare_log_;
};
TempDir* Pipeline::dir_ = nullptr;
std::string* Pipeline::prepare_log_ = nullptr;

TEST_F(Pipeline, SynthWritesBothSplitsAsJsonLines) {
  const auto train = read_jsonl(fs::path(*dir_ / "corpus") / "train.jsonl");
  const auto valid = read_jsonl(fs::path(*dir_ / "corpus") / "valid.jsonl");
  EXPECT_EQ(train.size() + valid.size(), 16u);
  EXPECT_EQ(valid.size(), 1u);  // max(1, 16 / 20)
  for (const auto& j : train) ASSERT_TRUE(j["text"].is_string());
  // Deterministic: the same command gives the same bytes.
  TempDir again;
  auto r = run(kBin, {"synth", "--out", again / "c", "--docs", "16", "--min-tokens", "400", "--max-tokens", "800"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(test::read_file(fs::path(again / "c") / "train.jsonl"), test::read_file(fs::path(*dir_ / "corpus") / "train.jsonl"));
}

TEST_F(Pipeline, PrepareWritesAValidStoreAndReportsThroughput) {
  const auto meta = nlohmann::json::parse(test::read_file(fs::path(*dir_ / "store") / "meta.json"));
  for (const char* key : {"vocab_size", "tokenizer", "eos_id", "documents", "tokens", "dtype"})
    EXPECT_TRUE(meta.contains(key)) << key;
  EXPECT_EQ(meta["documents"], 16);
  EXPECT_EQ(meta["dtype"], "uint16");
  EXPECT_TRUE(fs::exists(fs::path(*dir_ / "store") / "tokenizer.model"));
  auto store = data::TokenStore::open(*dir_ / "store");
  EXPECT_EQ(store.split(data::Split::valid).documents(), 4);  // round(0.25 * 16)
  EXPECT_EQ(store.meta().tokens, meta["tokens"].get<int64_t>());
  for (auto split : {data::Split::train, data::Split::valid})
    for (int64_t d = 0; d < store.split(split).documents(); ++d) {
      const auto& s = store.split(split);
      EXPECT_EQ(s.token(d, s.length(d) - 1), store.eos_id()) << "EOS ends every document";
    }
  EXPECT_NE(prepare_log_->find("MB/s"), std::string::npos) << *prepare_log_;
  EXPECT_NE(prepare_log_->find("16 documents"), std::string::npos) << *prepare_log_;
  // Encoding tells its progress (every update here: SEGTRAIN_PROGRESS_SECONDS=0).
  EXPECT_NE(prepare_log_->find("prepare: encoding: 16 documents in "), std::string::npos) << *prepare_log_;
}

TEST_F(Pipeline, PrepareWithTheStoresTokenizerReproducesTheTokens) {
  TempDir out;
  auto r = run(kBin, {"prepare", "--input", fs::path(*dir_ / "corpus") / "train.jsonl", fs::path(*dir_ / "corpus") / "valid.jsonl",
                      "--out", out / "store", "--tokenizer", fs::path(*dir_ / "store") / "tokenizer.model",
                      "--valid-fraction", "0.25"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"train.bin", "train.idx", "valid.bin", "valid.idx"})
    EXPECT_EQ(test::read_file(fs::path(out / "store") / f), test::read_file(fs::path(*dir_ / "store") / f)) << f;
}

// Threads that cannot be started (a pids cgroup holding the process to 4 tasks) end prepare with
// the OS's reason (exit 1), never std::terminate, and nothing is written.
TEST_F(Pipeline, PrepareSaysSoWhenItsThreadsCannotStart) {
  const fs::path cgroup = "/sys/fs/cgroup/pids/segtrain-prepare-" + std::to_string(getpid());
  std::error_code ec;
  if (!fs::create_directory(cgroup, ec)) SKIP_NOT_APPLICABLE("no pids cgroup (v1) to limit threads in: " << ec.message());
  test::write_file(cgroup / "pids.max", "4");
  TempDir out;
  auto r = run("sh", {"-c", "echo $$ > " + (cgroup / "cgroup.procs").string() + " && exec " + kBin +
                              " prepare --input " + (fs::path(*dir_ / "corpus") / "train.jsonl").string() + " --out " +
                              (out / "store") + " --tokenizer " + (fs::path(*dir_ / "store") / "tokenizer.model").string() +
                              " --threads 8"});
  fs::remove(cgroup, ec);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot start 9 threads (a reader and 8 encoders; --threads sets them): "), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out / "store"));
}

// Every file of a folder, by name.
std::map<std::string, std::string> folder_files(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) files[entry.path().filename().string()] = test::read_file(entry.path());
  return files;
}

// The store is the same byte for byte whatever the thread count: its tokenizer trained as
// sentencepiece reads the corpus, the documents encoded on 1 thread here and 2 in the fixture.
TEST_F(Pipeline, PrepareIsByteIdenticalAtOneAndTwoThreads) {
  TempDir out;
  auto r = run(kBin, {"prepare", "--input", *dir_ / "corpus", "--out", out / "store", "--vocab-size", "300",
                      "--valid-fraction", "0.25", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("on 1 encoding threads"), std::string::npos) << r.err;
  EXPECT_NE(prepare_log_->find("on 2 encoding threads"), std::string::npos) << *prepare_log_;
  const auto one = folder_files(out / "store"), two = folder_files(*dir_ / "store");
  ASSERT_EQ(one.size(), two.size());
  for (const auto& [name, bytes] : two) EXPECT_TRUE(one.count(name) && one.at(name) == bytes) << name;
}

TEST_F(Pipeline, SampleDumpsWhatEachSamplerFeedsTheModel) {
  auto store = data::TokenStore::open(*dir_ / "store");
  for (const std::string method : {"truncate", "full", "chunk", "prefix", "randompos", "pose"}) {
    TempDir io;
    test::write_file(io.path() / "c.yaml", config_for(*dir_ / "store", method, 32, 128));
    auto r = run(kBin, {"sample", io / "c.yaml", "--count", "50", "--out", io / "s.jsonl"});
    ASSERT_EQ(r.exit_code, 0) << method << ": " << r.err;
    const auto samples = read_jsonl(io.path() / "s.jsonl");
    ASSERT_EQ(samples.size(), 50u);
    const size_t T = method == "full" ? 128 : 32;
    for (const auto& s : samples) {
      for (const char* key : {"tokens", "offsets", "positions", "targets", "loss_mask"}) ASSERT_EQ(s[key].size(), T) << key;
      const int64_t doc = s["doc"], start = s["window_start"];
      for (size_t j = 0; j < T; ++j) {
        const int64_t off = s["offsets"][j];
        ASSERT_EQ(s["tokens"][j].get<int32_t>(), store.split(data::Split::train).token(doc, start + off)) << method;
        ASSERT_LT(s["positions"][j].get<int64_t>(), 128);
      }
    }
    // Same command, same samples.
    auto again = run(kBin, {"sample", io / "c.yaml", "--count", "50", "--out", io / "t.jsonl"});
    ASSERT_EQ(again.exit_code, 0);
    EXPECT_EQ(test::read_file(io.path() / "s.jsonl"), test::read_file(io.path() / "t.jsonl"));
  }
}

// The figures `segtrain sample --coverage` prints for offsets: min (at which
// offset), mean, max, as fractions.
struct PrintedCoverage {
  double min = -1, mean = -1, max = -1;
  int64_t min_at = -1, max_at = -1;
};
PrintedCoverage printed_coverage(const std::string& out, const std::string& what = "offset") {
  PrintedCoverage c;
  const std::regex line("min ([0-9.]+)% \\(" + what + " ([0-9]+)\\), mean ([0-9.]+)%, max ([0-9.]+)% \\(" + what +
                        " ([0-9]+)\\)");
  std::smatch m;
  if (std::regex_search(out, m, line)) {
    c.min = std::stod(m[1]) / 100, c.min_at = std::stoll(m[2]), c.mean = std::stod(m[3]) / 100;
    c.max = std::stod(m[4]) / 100, c.max_at = std::stoll(m[5]);
  }
  return c;
}

TEST_F(Pipeline, SampleCoverageShowsUniformEdgesAndAFlatRing) {
  TempDir io;
  const std::string store = *dir_ / "store";
  // L_t 32, L_e 128, four runs of 8. Uniform: offset 0 is covered only when
  // run 0 starts there, k / (L_e - k s + k) = 4 / 100 of placements; ring:
  // L_t / L_e = 25% everywhere.
  test::write_file(io.path() / "u.yaml", config_for(store, "chunk", 32, 128));
  test::write_file(io.path() / "r.yaml", config_for(store, "chunk", 32, 128) + "run: {seed: 5}\n");
  auto u = run(kBin, {"sample", io / "u.yaml", "--coverage", "--count", "20000"});
  ASSERT_EQ(u.exit_code, 0) << u.err;
  auto r = run(kBin, {"sample", io / "r.yaml", "--coverage", "--count", "20000", "--set", "data.sampler.placement=ring"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto uc = printed_coverage(u.out), rc = printed_coverage(r.out);
  ASSERT_GE(uc.min, 0) << u.out;
  ASSERT_GE(rc.min, 0) << r.out;
  EXPECT_NEAR(uc.mean, 0.25, 0.001);
  EXPECT_NEAR(rc.mean, 0.25, 0.001);
  EXPECT_TRUE(uc.min_at == 0 || uc.min_at == 127) << u.out;
  EXPECT_NEAR(uc.min, 0.04, 0.01) << u.out;
  EXPECT_GT(rc.min, 0.9 * 0.25) << r.out;
  EXPECT_LT(rc.max, 1.1 * 0.25) << r.out;
  EXPECT_NE(r.out.find("placement ring"), std::string::npos) << r.out;

  // The printed statistics are those of the samples `sample --out` writes: count
  // the dumped offsets independently and compare.
  auto both = run(kBin, {"sample", io / "u.yaml", "--coverage", "--count", "3000", "--out", io / "s.jsonl"});
  ASSERT_EQ(both.exit_code, 0) << both.err;
  std::vector<int64_t> counts(128, 0);
  const auto samples = read_jsonl(io.path() / "s.jsonl");
  ASSERT_EQ(samples.size(), 3000u);
  for (const auto& x : samples)
    for (const auto& o : x["offsets"]) ++counts[o.get<size_t>()];
  const auto lo = std::min_element(counts.begin(), counts.end()), hi = std::max_element(counts.begin(), counts.end());
  const auto bc = printed_coverage(both.out);
  EXPECT_EQ(bc.min_at, lo - counts.begin()) << both.out;
  EXPECT_EQ(bc.max_at, hi - counts.begin()) << both.out;
  EXPECT_NEAR(bc.min, static_cast<double>(*lo) / 3000, 0.0001);
  EXPECT_NEAR(bc.max, static_cast<double>(*hi) / 3000, 0.001);

  // Any method: randompos draws its position ids apart from its offsets, and both are shown.
  test::write_file(io.path() / "p.yaml", config_for(store, "randompos", 32, 128));
  auto p = run(kBin, {"sample", io / "p.yaml", "--coverage", "--count", "2000"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_GE(printed_coverage(p.out, "position").min, 0) << p.out;

  // ring is chunk's: refused for another method, naming the key; a sample
  // command with nothing to do is refused too.
  auto bad = run(kBin, {"sample", io / "p.yaml", "--coverage", "--set", "data.sampler.placement=ring"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("data.sampler.placement"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("randompos"), std::string::npos) << bad.err;
  auto nothing = run(kBin, {"sample", io / "u.yaml"});
  EXPECT_EQ(nothing.exit_code, 2);
  EXPECT_NE(nothing.err.find("--coverage"), std::string::npos) << nothing.err;
}

TEST_F(Pipeline, RingSamplesAreDeterministicAndReadTheWindow) {
  auto store = data::TokenStore::open(*dir_ / "store");
  TempDir io;
  test::write_file(io.path() / "c.yaml", config_for(*dir_ / "store", "chunk", 32, 128) + "run: {seed: 9}\n");
  auto r = run(kBin, {"sample", io / "c.yaml", "--count", "200", "--out", io / "s.jsonl", "--set",
                      "data.sampler.placement=ring"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto again = run(kBin, {"sample", io / "c.yaml", "--count", "200", "--out", io / "t.jsonl", "--set",
                          "data.sampler.placement=ring"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(test::read_file(io.path() / "s.jsonl"), test::read_file(io.path() / "t.jsonl"));
  auto uniform = run(kBin, {"sample", io / "c.yaml", "--count", "200", "--out", io / "u.jsonl"});
  ASSERT_EQ(uniform.exit_code, 0) << uniform.err;
  EXPECT_NE(test::read_file(io.path() / "s.jsonl"), test::read_file(io.path() / "u.jsonl"));
  int64_t wrapped = 0;
  for (const auto& s : read_jsonl(io.path() / "s.jsonl")) {
    const int64_t doc = s["doc"], start = s["window_start"];
    ASSERT_EQ(s["positions"], s["offsets"]);
    for (size_t j = 0; j < 32; ++j) {
      ASSERT_EQ(s["tokens"][j].get<int32_t>(), store.split(data::Split::train).token(doc, start + s["offsets"][j].get<int64_t>()));
      if (j > 0) {
        ASSERT_GT(s["offsets"][j].get<int64_t>(), s["offsets"][j - 1].get<int64_t>());
      }
    }
    wrapped += s["offsets"][0] == 0 && s["offsets"][31] == 127;
  }
  EXPECT_GT(wrapped, 0) << "some samples hold both ends of the window (the run that crosses the end)";
}

TEST_F(Pipeline, SampleReadsTheValidSplitWhenAsked) {
  auto store = data::TokenStore::open(*dir_ / "store");
  TempDir io;
  test::write_file(io.path() / "c.yaml", config_for(*dir_ / "store", "chunk", 32, 128));
  auto r = run(kBin, {"sample", io / "c.yaml", "--split", "valid", "--count", "20", "--out", io / "s.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto& valid = store.split(data::Split::valid);
  for (const auto& s : read_jsonl(io.path() / "s.jsonl")) {
    const int64_t doc = s["doc"], start = s["window_start"];
    ASSERT_LT(doc, valid.documents());
    for (size_t j = 0; j < 32; ++j)
      ASSERT_EQ(s["tokens"][j].get<int32_t>(), valid.token(doc, start + s["offsets"][j].get<int64_t>()));
  }
}

TEST(PrepareInputs, MegatronDatasetsAreAcceptedAndResplitByDocument) {
  TempDir dir;
  // As preprocess_data.py --split-sentences writes it: 3 documents of 2, 1 and 2 sentences.
  std::vector<uint16_t> tokens = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  test::write_file(dir.path() / "wiki_text_document.bin", std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2));
  std::string idx("MMIDIDX\0\0", 9);
  auto put = [&](auto v) { idx.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(uint64_t{1});
  idx += static_cast<char>(8);
  put(uint64_t{5});
  put(uint64_t{4});
  for (int32_t s : {2, 3, 2, 4, 1}) put(s);
  for (int64_t p : {0, 4, 10, 14, 22}) put(p);
  for (int64_t d : {0, 2, 3, 5}) put(d);
  test::write_file(dir.path() / "wiki_text_document.idx", idx);
  auto r = run(kBin, {"prepare", "--input", dir / "wiki_text_document.bin", "--out", dir / "store", "--vocab-size", "50",
                      "--valid-fraction", "0.34"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto store = data::TokenStore::open(dir / "store");
  EXPECT_EQ(store.meta().documents, 3);
  EXPECT_EQ(store.split(data::Split::valid).documents(), 1);
  std::vector<std::vector<int32_t>> docs;
  for (auto split : {data::Split::train, data::Split::valid})
    for (int64_t d = 0; d < store.split(split).documents(); ++d) docs.push_back(store.split(split).document(d));
  std::sort(docs.begin(), docs.end());
  EXPECT_EQ(docs, (std::vector<std::vector<int32_t>>{{5, 6, 7, 8, 9}, {10, 11}, {12, 13, 14, 15, 16}}));
  // Ids beyond --vocab-size are refused, naming the file.
  r = run(kBin, {"prepare", "--input", dir / "wiki_text_document", "--out", dir / "s2", "--vocab-size", "12"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("wiki_text_document.bin"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("outside the vocabulary"), std::string::npos) << r.err;
}

// `args` (a command line run through env) in a child whose stderr goes to `log`.
pid_t start_logging_to(const fs::path& log, const std::vector<std::string>& args) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (!freopen(log.c_str(), "w", stderr)) _exit(126);
    execvp("env", argv.data());
    _exit(127);
  }
  return pid;
}

// Whether `text` appears in `log` within a minute.
bool logged_within_a_minute(const fs::path& log, const std::string& text) {
  for (int i = 0; i < 12000; ++i) {
    if (test::read_file(log).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// SIGINT while prepare writes a store over another: exit 130, the earlier store as it was, byte
// for byte, and nothing else in the folder (no temporary split, no new tokenizer).
TEST(PrepareInputs, AStopLeavesTheStoreInOutAsItWasAndNoTemporaryFile) {
  TempDir dir;
  {
    std::ofstream corpus(dir.path() / "corpus.jsonl"), sample(dir.path() / "sample.jsonl");
    for (int d = 0; d < 40000; ++d) {
      std::string text;
      for (int w = 0; w < 60; ++w) text += "word" + std::to_string((d * 7 + w * 13) % 997) + " ";
      corpus << "{\"text\": \"" << text << "\"}\n";
      if (d < 500) sample << "{\"text\": \"" << text << "\"}\n";
    }
  }
  auto trained = run(kBin, {"prepare", "--input", dir / "sample.jsonl", "--out", dir / "tokenizer", "--vocab-size", "400"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  fs::copy_file(dir.path() / "tokenizer" / "tokenizer.model", dir.path() / "tokenizer.model");
  auto first = run(kBin, {"prepare", "--input", dir / "corpus.jsonl", "--out", dir / "store", "--tokenizer",
                          dir / "tokenizer.model"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto before = folder_files(dir / "store");

  const fs::path log = dir.path() / "prepare.log";
  const std::vector<std::string> args = {"env", "SEGTRAIN_PROGRESS_SECONDS=0", kBin, "prepare", "--input",
                                         dir / "corpus.jsonl", "--out", dir / "store", "--tokenizer",
                                         dir / "tokenizer.model", "--valid-fraction", "0.5", "--threads", "1"};
  const pid_t pid = start_logging_to(log, args);
  const bool encoding = logged_within_a_minute(log, "prepare: encoding: ");
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(encoding) << "the second prepare never started encoding: " << test::read_file(log);
  ASSERT_TRUE(WIFEXITED(status)) << test::read_file(log);
  ASSERT_EQ(WEXITSTATUS(status), 130) << "it ended before the stop: " << test::read_file(log);
  const auto after = folder_files(dir / "store");
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [name, bytes] : before) EXPECT_TRUE(after.count(name) && after.at(name) == bytes) << name;
}

// A stop while sentencepiece trains a tokenizer (which never asks whether to stop, and takes
// minutes on a large sample: 2 min 40 s for this corpus on the 2-core CI machine) ends prepare at once: exit 130
// with the stop's one line, and nothing in --out. Before, prepare waited for the training to end.
TEST(PrepareInputs, AStopWhileSentencepieceTrainsEndsPrepareAtOnce) {
  TempDir dir;
  {
    std::ofstream corpus(dir.path() / "corpus.jsonl");
    std::mt19937 rng(11);
    for (int d = 0; d < kSlowTrainingDocuments; ++d) {
      std::string text;
      for (int w = 0; w < 80; ++w) {
        for (int c = 0, letters = 3 + static_cast<int>(rng() % 7); c < letters; ++c)
          text += static_cast<char>('a' + rng() % 26);
        text += ' ';
      }
      corpus << "{\"text\": \"" << text << "\"}\n";
    }
  }
  const fs::path log = dir.path() / "prepare.log";
  const std::vector<std::string> args = {"env", "SEGTRAIN_PROGRESS_SECONDS=0", kBin, "prepare", "--input",
                                         dir / "corpus.jsonl", "--out", dir / "store", "--vocab-size",
                                         std::to_string(kSlowTrainingVocabulary)};
  const pid_t pid = start_logging_to(log, args);
  const bool training = logged_within_a_minute(log, "sentencepiece model with");
  std::this_thread::sleep_for(std::chrono::seconds(2));  // its reading done, sentencepiece computing
  kill(pid, SIGINT);
  // Not a speed figure: a process still training half a minute after the stop did not stop.
  int status = 0;
  bool ended = false;
  for (int i = 0; i < 3000 && !ended; ++i) {
    ended = waitpid(pid, &status, WNOHANG) == pid;
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!ended) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(training) << "prepare never began training: " << test::read_file(log);
  ASSERT_TRUE(ended) << "prepare went on training 30 s after SIGINT: " << test::read_file(log);
  ASSERT_TRUE(WIFEXITED(status)) << test::read_file(log);
  EXPECT_EQ(WEXITSTATUS(status), 130) << test::read_file(log);
  EXPECT_NE(test::read_file(log).find("segtrain prepare: error: interrupted by signal 2\n"), std::string::npos)
      << test::read_file(log);
  EXPECT_TRUE(!fs::exists(dir.path() / "store") || fs::is_empty(dir.path() / "store"));
}

TEST(PrepareInputs, NothingUsableIsAnInputError) {
  TempDir dir;
  test::write_file(dir.path() / "in" / "a.txt", "   ");
  test::write_file(dir.path() / "in" / "b.txt", "\xff\xfe");
  auto r = run(kBin, {"prepare", "--input", dir / "in", "--out", dir / "store"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(r.signaled);
  EXPECT_NE(r.err.find("no usable documents"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 empty and 1 invalid UTF-8"), std::string::npos) << r.err;
}

class CorruptStore : public ::testing::TestWithParam<test::Corruption> {};

TEST_P(CorruptStore, SampleExitsTwoNamingTheFile) {
  const auto& c = GetParam();
  TempDir dir;
  test::write_coded_store(dir / "store", {300, 200, 100});
  test::write_file(dir.path() / "c.yaml", config_for(dir / "store", "truncate", 64, 64));
  auto ok = run(kBin, {"sample", dir / "c.yaml", "--count", "2", "--out", dir / "s.jsonl"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  c.damage(dir / "store");
  auto r = run(kBin, {"sample", dir / "c.yaml", "--count", "2", "--out", dir / "t.jsonl"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(r.signaled);
  EXPECT_NE(r.err.find(c.file), std::string::npos) << r.err;
  if (c.name != "missing_meta") {
    EXPECT_NE(r.err.find(c.fault), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir.path() / "t.jsonl"));
}

INSTANTIATE_TEST_SUITE_P(Cases, CorruptStore, ::testing::ValuesIn(test::corruptions()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace segtrain
