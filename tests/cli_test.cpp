// The `segtrain` binary as a user runs it: exit codes, help, version, and every
// broken config under tests/configs/broken/ (each names the message it expects).
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>

#include "test_util.h"

namespace segtrain {
namespace {

using test::kBin;
using test::kLaunch;
using test::run;
using test::TempDir;
namespace fs = std::filesystem;

const fs::path kSource = SEGTRAIN_SOURCE_DIR;

TEST(Cli, VersionNamesLibTorchBuildTypeAndDevices) {
  auto r = run(kBin, {"--version"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("^segtrain \\d+\\.\\d+\\.\\d+")));
  EXPECT_TRUE(std::regex_search(r.out, std::regex("LibTorch 2\\.\\d+")));
  EXPECT_NE(r.out.find("build type "), std::string::npos);
  EXPECT_TRUE(std::regex_search(r.out, std::regex("CUDA (yes|no)")));
  EXPECT_TRUE(std::regex_search(r.out, std::regex("NCCL (yes|no)")));
}

TEST(Cli, EverySubcommandHasHelp) {
  const std::vector<std::vector<std::string>> commands = {
      {"synth"}, {"prepare"}, {"sample"}, {"train"}, {"eval"}, {"export"}, {"inspect"},
      {"inspect", "positions"}, {"inspect", "alibi-precision"}, {"experiment"}, {"config"},
      {"config", "check"}, {"config", "reference"}};
  for (auto args : commands) {
    const std::string name = args.back();
    args.push_back("--help");
    auto r = run(kBin, args);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << name;
  }
  auto r = run(kLaunch, {"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--nproc-per-node"), std::string::npos);
}

TEST(Cli, UsageErrorsExitTwo) {
  const std::vector<std::vector<std::string>> bad = {
      {},                                      // no subcommand
      {"fly"},                                 // unknown subcommand
      {"synth"},                               // missing required --out
      {"synth", "--out", "x", "--docs", "-3"}, // invalid number
      {"synth", "--out", "x", "--seed", "-1"}, // a seed is never negative
      {"eval", "--model", "m", "--data", "d", "--lengths", "256,abc", "--out", "o"},
      {"config", "check"},                     // missing file
      {"config", "check", "/nonexistent/config.yaml"},
      {"inspect"},
      {"inspect", "positions"},                // neither --model nor --config
      {"inspect", "alibi-precision", "--heads", "4", "--head", "4"},
  };
  for (const auto& args : bad) {
    auto r = run(kBin, args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\n" << r.err;
    EXPECT_FALSE(r.signaled) << joined;
    EXPECT_FALSE(r.err.empty()) << joined;
  }
}

// A command line CLI11 refuses (unknown option or command, missing option or value, bad value)
// is one line as every other error: `segtrain CMD: error: ...`, exit 2 (issue 58 case 10).
TEST(Cli, UsageErrorsAreOneLineNamingTheCommand) {
  struct Bad {
    std::vector<std::string> args;
    std::string line;  // what the line says after the prefix (part of it)
  };
  const std::vector<Bad> bad = {
      {{}, "segtrain: error: a command is required: one of synth, prepare,"},
      {{"fly"}, "segtrain: error: unknown command 'fly'; expected one of synth, prepare,"},
      {{"--bogus"}, "segtrain: error: a command is required: one of synth,"},
      {{"synth"}, "segtrain synth: error: --out is required (segtrain synth --help lists its options)"},
      {{"synth", "--out", "x", "--docs", "-3"}, "segtrain synth: error: --docs: expected an integer >= 1, got '-3'"},
      {{"synth", "--out", "x", "--docs"}, "segtrain synth: error: --docs: 1 required INT missing"},
      {{"synth", "--out", "x", "--bogus"}, "segtrain synth: error: the following argument was not expected: --bogus"},
      {{"eval", "--modle", "m", "--data", "d"}, "segtrain eval: error: --model is required; not expected: --modle m"},
      {{"eval", "--model", "m", "--data", "d", "--lengths", "256,abc", "--out", "o"},
       "segtrain eval: error: --lengths: expected an integer >= 1, got 'abc'"},
      {{"train", "a", "b"}, "segtrain train: error: the following argument was not expected: b"},
      {{"inspect"}, "segtrain inspect: error: a command is required: one of positions, alibi-precision"},
      {{"inspect", "fly"}, "segtrain inspect: error: unknown command 'fly'; expected one of positions, alibi-precision"},
      {{"inspect", "positions", "--bogus"}, "segtrain inspect positions: error: the following argument was not expected"},
      {{"config", "check"}, "segtrain config check: error: file is required"},
      {{"config", "check", "c.yaml", "--set"}, "segtrain config check: error: --set: 1 required KEY=VALUE missing"},
  };
  for (const auto& b : bad) {
    auto r = run(kBin, b.args);
    std::string joined;
    for (const auto& a : b.args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\n" << r.err;
    EXPECT_EQ(r.err.find(b.line), 0u) << joined << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << joined << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << joined << "\n" << r.out;
  }
}

// Commands whose owning issue has not landed must say so and exit 2.
TEST(Cli, ConfigCheckPrintsResolvedYamlThatRoundTrips) {
  TempDir dir;
  test::make_store_stub(dir.path() / "store");
  test::write_file(dir.path() / "c.yaml", "data:\n  store: " + (dir / "store") +
                                              "\n  sampler: {method: chunk, alpha: 0.25}\n"
                                              "model:\n  extension: {method: interpolate}\n");
  auto first = run(kBin, {"config", "check", dir / "c.yaml", "--set", "train.lr=2e-4"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.out.find("lr: 2e-04"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("method: chunk"), std::string::npos) << first.out;
  test::write_file(dir.path() / "resolved.yaml", first.out);
  auto second = run(kBin, {"config", "check", dir / "resolved.yaml"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(first.out, second.out);
}

TEST(Cli, ConfigReferenceListsEveryKey) {
  auto r = run(kBin, {"config", "reference"});
  ASSERT_EQ(r.exit_code, 0);
  for (const char* key : {"run.seed", "model.extension.method", "data.sampler.alpha", "train.budget.tokens",
                          "eval.lengths", "distributed.timeout_s", "experiment.factors", "eval.tasks", "eval.passkey.trials",
                          "experiment.corpora[].synthetic.docs", "experiment.methods[].budgets"})
    EXPECT_NE(r.out.find(std::string("`") + key + "`"), std::string::npos) << key;
}

// --- broken configs ----------------------------------------------------------

struct BrokenConfig {
  std::string name;
  std::string text;
  std::string expect;
  std::vector<std::string> args;
};

void PrintTo(const BrokenConfig& c, std::ostream* os) { *os << c.name; }

std::vector<BrokenConfig> broken_configs() {
  std::vector<BrokenConfig> out;
  for (const auto& entry : fs::directory_iterator(kSource / "tests/configs/broken")) {
    BrokenConfig c;
    c.name = entry.path().stem().string();
    c.text = test::read_file(entry.path());
    std::istringstream lines(c.text);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("# expect: ", 0) == 0) c.expect = line.substr(10);
      if (line.rfind("# args: ", 0) == 0) {
        std::istringstream words(line.substr(8));
        for (std::string w; words >> w;) c.args.push_back(w);
      }
    }
    if (c.text.empty()) c.expect = "the config is empty";
    out.push_back(c);
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.name < b.name; });
  return out;
}

class BrokenConfigTest : public ::testing::TestWithParam<BrokenConfig> {};

TEST_P(BrokenConfigTest, ExitsTwoNamingTheProblem) {
  const BrokenConfig& c = GetParam();
  ASSERT_FALSE(c.expect.empty()) << c.name << " has no '# expect:' line";
  TempDir dir;
  test::make_store_stub(dir.path() / "store");
  std::string text = std::regex_replace(c.text, std::regex("@STORE@"), dir / "store");
  test::write_file(dir.path() / (c.name + ".yaml"), text);
  std::vector<std::string> args = {"config", "check", dir / (c.name + ".yaml")};
  args.insert(args.end(), c.args.begin(), c.args.end());
  auto r = run(kBin, args, 30);
  EXPECT_FALSE(r.signaled) << "crashed or hung";
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << "printed a config despite the error:\n" << r.out;
  EXPECT_NE(r.err.find(c.expect), std::string::npos) << "expected: " << c.expect << "\ngot: " << r.err;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BrokenConfigTest, ::testing::ValuesIn(broken_configs()),
                         [](const auto& info) { return info.param.name; });

TEST(BrokenConfigFixtures, AtLeastTwentyDistinctCases) { EXPECT_GE(broken_configs().size(), 20u); }

}  // namespace
}  // namespace segtrain

namespace segtrain {
namespace {

TEST(Readme, ConfigReferenceMatchesTheSchema) {
  const std::string readme = test::read_file(kSource / "docs" / "configuration.md");
  const auto begin = readme.find("<!-- config-reference:begin");
  const auto end = readme.find("<!-- config-reference:end -->");
  ASSERT_NE(begin, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  const auto table_start = readme.find('\n', begin) + 1;
  const std::string in_readme = readme.substr(table_start, end - table_start);
  auto r = run(kBin, {"config", "reference"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(in_readme, r.out) << "docs/configuration.md's config reference is stale: run scripts/update_readme_reference.sh";
}

}  // namespace
}  // namespace segtrain
