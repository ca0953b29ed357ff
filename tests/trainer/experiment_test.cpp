// `segtrain experiment` as a user runs it: a tiny grid end to end, its
// invariants checked against independent paths (`segtrain eval`, the base's own
// evaluation, Karypis et al.'s equal budgets), resuming after SIGTERM, reuse of
// finished rows, and clear refusals of bad experiment files.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/error.h"
#include "models/modules/transformer.h"
#include "test_util.h"
#include "trainer/config/config.h"
#include "trainer/eval/passkey.h"
#include "trainer/eval/perplexity_task.h"
#include "trainer/eval/plot.h"
#include "trainer/eval/suite.h"
#include "trainer/experiment/experiment.h"
#include "trainer/experiment/more_windows.h"
#include "trainer/experiment/plan.h"
#include "trainer/experiment/report.h"

namespace segtrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::kBin;
using test::run;

// A grid small enough for a test: one factor, five trained rows, a 2-layer model.
std::string tiny_experiment(const std::string& out, const std::string& arch, const std::string& extra = "") {
  return "experiment:\n"
         "  name: tiny\n"
         "  output_dir: " + out + "\n"
         "  factors: [2]\n"
         "  methods: [da, full, chunk-0.5, prefix-0.5, randompos]\n"
         "  corpora:\n"
         "    - name: synthetic\n"
         "      synthetic: {docs: 40, min_tokens: 300, max_tokens: 500, seed: 3}\n"
         "      vocab_size: 200\n"
         "  base:\n"
         "    set: {train.budget.tokens: 30000, train.lr: 3.0e-3}\n" +
         extra +
         "run: {seed: 7, threads: 1}\n"
         "model: {arch: " + arch + ", d_model: 32, n_layers: 2, n_heads: 2}\n"
         "data: {train_length: 32}\n"
         "train: {micro_batch_size: 8, lr: 1.0e-3, warmup_steps: 2, log_every: 5, checkpoint_every: 20, "
         "tensorboard: false}\n"
         "eval: {max_sequences: 6}\n";
}

json results_of(const std::string& out) { return json::parse(test::read_file(fs::path(out) / "results.json")); }

const json& row(const json& corpus, const std::string& key) {
  for (const auto& r : corpus["rows"])
    if (r["key"] == key) return r;
  throw std::runtime_error("no row " + key);
}

double ppl(const json& r, int64_t length) {
  for (const auto& x : r["results"])
    if (x["length"] == length) return x["ppl"].get<double>();
  return NAN;
}

TEST(Experiment, TinyRopeGridEndToEnd) {
  test::TempDir dir;
  const std::string out = dir / "out";
  test::write_file(dir / "x.yaml", tiny_experiment(out, "gpt_neox"));
  auto r = run(kBin, {"experiment", dir / "x.yaml"}, 600);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Where the grid stands, row by row: the base, 6 OOTB and 5 trained rows.
  for (const char* line : {" row 1 of 12: base at L_t (scored)", " row 12 of 12: ", " (trained unless done, then scored)"})
    EXPECT_NE(r.err.find(line), std::string::npos) << line << "\n" << r.err;

  // --render writes the same report again from results.json alone (nothing trained or evaluated),
  // into another folder; into the folder it reads, or from another experiment's file, it is refused.
  const std::string again = dir / "again";
  auto rendered = run(kBin, {"experiment", dir / "x.yaml", "--render", out + "/results.json", "--out", again});
  ASSERT_EQ(rendered.exit_code, 0) << rendered.err;
  EXPECT_EQ(test::read_file(again + "/results.md"), test::read_file(out + "/results.md"));
  EXPECT_EQ(json::parse(test::read_file(again + "/results.json"))["corpora"], results_of(out)["corpora"]);
  EXPECT_NE(rendered.err.find("nothing trained or evaluated"), std::string::npos) << rendered.err;
  auto onto = run(kBin, {"experiment", dir / "x.yaml", "--render", out + "/results.json"});
  EXPECT_EQ(onto.exit_code, 2) << onto.err;
  test::write_file(dir / "other.json", "{\"experiment\": \"other\", \"corpora\": []}");
  auto other = run(kBin, {"experiment", dir / "x.yaml", "--render", dir / "other.json", "--out", dir / "third"});
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_NE(other.err.find("records experiment \"other\""), std::string::npos) << other.err;

  const json results = results_of(out);
  ASSERT_EQ(results["corpora"].size(), 1u);
  const json& c = results["corpora"][0];
  EXPECT_EQ(c["arch"], "gpt_neox");
  EXPECT_EQ(c["train_length"], 32);
  // Every OOTB method that applies to RoPE, then every trained method.
  std::vector<std::string> keys;
  for (const auto& x : c["rows"]) keys.push_back(x["key"]);
  EXPECT_EQ(keys, (std::vector<std::string>{"ootb-none", "ootb-interpolate", "ootb-ntk", "ootb-dynamic_ntk", "ootb-yarn",
                                            "ootb-llama3", "da", "full", "chunk-0.5", "prefix-0.5", "randompos"}));
  for (const auto& x : c["rows"]) {
    EXPECT_TRUE(std::isfinite(ppl(x, 32)) && std::isfinite(ppl(x, 64))) << x["key"];
    EXPECT_EQ(x["position_loss"].size(), 63u) << x["key"];  // L_e - 1 scored positions
  }
  // The base with no extension at L_t is the base: the same windows give the same number.
  EXPECT_DOUBLE_EQ(ppl(row(c, "ootb-none"), 32), ppl(c["base"], 32));
  // Seed 004 eq. 2: every trained row sees N * L_e tokens, rounded up to whole
  // batches of its own sequence length (full's are L_e long).
  const int64_t tokens = row(c, "chunk-0.5")["train_tokens"];
  EXPECT_GT(tokens, 0);
  for (const char* key : {"da", "full", "prefix-0.5", "randompos"})
    EXPECT_LE(std::abs(row(c, key)["train_tokens"].get<int64_t>() - tokens), 8 * 64) << key;
  // What each trained row's training took, from its run's trainer_state.json.
  for (const char* key : {"da", "full", "chunk-0.5", "prefix-0.5", "randompos"}) {
    const double seconds = row(c, key)["train_seconds"];
    const json state = json::parse(test::read_file(fs::path(out) / "synthetic/x2" / key / "final/trainer_state.json"));
    EXPECT_GT(seconds, 0) << key;
    EXPECT_DOUBLE_EQ(seconds, state["train_seconds"].get<double>()) << key;
  }
  // The grid's numbers are `segtrain eval`'s numbers for the same model.
  auto eval = run(kBin, {"eval", "--model", out + "/synthetic/x2/chunk-0.5", "--data", out + "/synthetic/store",
                         "--lengths", "32,64", "--max-sequences", "6", "--out", dir / "eval.json"});
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  const json direct = json::parse(test::read_file(dir / "eval.json"));
  EXPECT_NEAR(direct["results"][1]["ppl"].get<double>(), ppl(row(c, "chunk-0.5"), 64), 1e-9);
  // OOTB ntk evaluated by hand with the same override.
  eval = run(kBin, {"eval", "--model", out + "/synthetic/base", "--data", out + "/synthetic/store", "--lengths", "32,64",
                    "--max-sequences", "6", "--set", "model.extension.method=ntk", "--set", "model.extension.factor=2",
                    "--out", dir / "ntk.json"});
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_NEAR(json::parse(test::read_file(dir / "ntk.json"))["results"][1]["ppl"].get<double>(),
              ppl(row(c, "ootb-ntk"), 64), 1e-9);

  // The report: a table row per method with the numbers of results.json, and a plot.
  const std::string md = test::read_file(fs::path(out) / "results.md");
  EXPECT_NE(md.find("| method | 2·L_t = 64 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| chunk-0.5 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| OOTB ntk |"), std::string::npos) << md;
  EXPECT_NE(md.find("| DA |"), std::string::npos) << md;
  EXPECT_NE(md.find("| row | training | perplexity | total |"), std::string::npos) << md;
  EXPECT_TRUE(std::regex_search(md, std::regex("Training tokens per trained row \\(budget-curve rows aside\\): "
                                               "[0-9]+(,[0-9]{3})* at 2·L_t\\.\n")))
      << md;
  const std::string svg = test::read_file(fs::path(out) / "plots/synthetic-x2.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("randompos"), std::string::npos);

  // Run again: nothing is trained or evaluated twice, and the results stand.
  const auto stamp = fs::last_write_time(fs::path(out) / "synthetic/x2/full/row.json");
  r = run(kBin, {"experiment", dir / "x.yaml"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("training "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is trained"), std::string::npos) << r.err;
  EXPECT_EQ(fs::last_write_time(fs::path(out) / "synthetic/x2/full/row.json"), stamp);
  EXPECT_EQ(results_of(out)["corpora"][0]["rows"], c["rows"]);

  // One writer per grid: while another process holds its directory (util-linux's flock
  // here), the grid exits 2 and touches nothing.
  const pid_t holder = fork();
  if (holder == 0) {
    setpgid(0, 0);  // flock's child (sleep) holds the lock too: both are killed by group
    execlp("flock", "flock", (out + "/.segtrain.lock").c_str(), "sleep", "60", static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 500; ++i) {  // until flock holds it
    if (test::run("flock", {"--nonblock", out + "/.segtrain.lock", "true"}).exit_code != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  r = run(kBin, {"experiment", dir / "x.yaml"}, 120);
  kill(-holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  // flock(1) writes no record; the last segtrain writer's (gone) is not named as the holder.
  EXPECT_NE(r.err.find("experiment.output_dir: '" + out + "' is in use by another process"), std::string::npos)
      << r.err;
  EXPECT_EQ(fs::last_write_time(fs::path(out) / "synthetic/x2/full/row.json"), stamp);

  // Changing a trained row's settings is refused, not silently reused.
  test::write_file(dir / "changed.yaml",
                   tiny_experiment(out, "gpt_neox", "  extend:\n    set: {train.weight_decay: 0.01}\n"));
  r = run(kBin, {"experiment", dir / "changed.yaml"}, 120);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("train.weight_decay"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("delete " + out + "/synthetic/x2/da"), std::string::npos) << r.err;

  // A base trained again invalidates what was built on it: refused, not reused.
  fs::remove_all(fs::path(out) / "synthetic/base");
  r = run(kBin, {"experiment", dir / "x.yaml"}, 300);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("was trained from another base"), std::string::npos) << r.err;
}

TEST(Experiment, InterruptedGridResumesToTheSameResults) {
  test::TempDir dir;
  test::write_file(dir / "a.yaml", tiny_experiment(dir / "a", "gpt2"));
  test::write_file(dir / "b.yaml", tiny_experiment(dir / "b", "gpt2"));
  auto whole = run(kBin, {"experiment", dir / "a.yaml"}, 600);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;

  // Stop the second grid with SIGTERM once its first extension run is under way.
  const pid_t child = fork();
  if (child == 0) {
    freopen((dir / "b.log").c_str(), "w", stderr);
    execl(kBin.c_str(), kBin.c_str(), "experiment", (dir / "b.yaml").c_str(), nullptr);
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (!fs::exists(dir / "b/synthetic/x2/da/metrics.jsonl") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(child, SIGTERM);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << test::read_file(dir / "b.log");
  // 143 after a checkpoint; 0 if the grid had already finished when the signal came.
  const int code = WEXITSTATUS(status);
  ASSERT_TRUE(code == 143 || code == 0) << code << test::read_file(dir / "b.log");
  // The rows finished before the signal are in the tables already (rewritten after
  // every row): the OOTB row was evaluated before da began training.
  if (code == 143) {
    const json partial = results_of(dir / "b")["corpora"][0];
    ASSERT_GE(partial["rows"].size(), 1u);
    EXPECT_EQ(partial["rows"][0]["key"], "ootb-interpolate");
    EXPECT_NE(test::read_file(dir / "b/results.md").find("| OOTB |"), std::string::npos);
  }

  auto rest = run(kBin, {"experiment", dir / "b.yaml"}, 600);
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  const json a = results_of(dir / "a")["corpora"][0], b = results_of(dir / "b")["corpora"][0];
  ASSERT_EQ(a["rows"].size(), b["rows"].size());
  for (size_t i = 0; i < a["rows"].size(); ++i) {
    EXPECT_EQ(a["rows"][i]["key"], b["rows"][i]["key"]);
    EXPECT_EQ(a["rows"][i]["results"], b["rows"][i]["results"]) << a["rows"][i]["key"];
  }
  // APE's OOTB row is the interpolated table (Karypis et al. 2024, 3.2), its only one.
  EXPECT_EQ(a["rows"][0]["key"], "ootb-interpolate");
  EXPECT_EQ(a["rows"][0]["label"], "OOTB");
}

// A grid split in two (another machine's rows, or a published results.json whose run
// folders are gone): `--import-rows` reports the recorded rows as they were, trains
// and evaluates only the rest, and gives the tables a grid run whole gives.
TEST(Experiment, ImportedRowsAreReportedAsRecordedAndOnlyTheRestRuns) {
  test::TempDir dir;
  const std::string lengths = "  eval_lengths: [32, 64]\n";  // the table by length, with intervals
  test::write_file(dir / "a.yaml", tiny_experiment(dir / "a", "gpt2", lengths));
  test::write_file(dir / "b.yaml", tiny_experiment(dir / "b", "gpt2", lengths));
  auto whole = run(kBin, {"experiment", dir / "a.yaml"}, 600);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  // Published as scripts/publish_results.py does (no per-position curves), and
  // without the full row: that one the second grid must train and evaluate.
  json published = results_of(dir / "a");
  json kept = json::array();
  for (auto r : published["corpora"][0]["rows"]) {
    r.erase("position_loss");
    if (r["key"] != "full") kept.push_back(r);
  }
  published["corpora"][0]["base"].erase("position_loss");
  json stray = kept[0];  // a row this grid does not have: named, not used
  stray["key"] = "ootb-nope";
  kept.push_back(stray);
  published["corpora"][0]["rows"] = kept;
  const std::string file = dir / "published.json";
  test::write_file(file, published.dump(2));

  // The file named twice counts once (the wall time below).
  auto split = run(kBin, {"experiment", dir / "b.yaml", "--import-rows", file, "--import-rows", file}, 600);
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_NE(split.err.find("--import-rows " + file + ": row 'ootb-nope' (corpus 'synthetic', x2) is no row of"),
            std::string::npos)
      << split.err;
  for (const char* key : {"da", "chunk-0.5", "prefix-0.5", "randompos"})
    EXPECT_FALSE(fs::exists(fs::path(dir / "b/synthetic/x2") / key)) << key << " was trained again";
  EXPECT_FALSE(fs::exists(dir / "b/synthetic/x2/ootb-interpolate")) << "the OOTB row was evaluated again";
  EXPECT_TRUE(fs::exists(dir / "b/synthetic/x2/full/final/model_config.json"));

  const json a = results_of(dir / "a")["corpora"][0], b = results_of(dir / "b")["corpora"][0];
  ASSERT_EQ(a["rows"].size(), b["rows"].size());
  for (size_t i = 0; i < a["rows"].size(); ++i) {
    const json &want = a["rows"][i], &got = b["rows"][i];
    EXPECT_EQ(got["key"], want["key"]);
    EXPECT_EQ(got["results"], want["results"]) << want["key"];
    EXPECT_EQ(got["train_tokens"], want["train_tokens"]) << want["key"];
    EXPECT_EQ(got.value("imported_from", ""), want["key"] == "full" ? "" : file) << want["key"];
  }
  // The base row is scored here too (it checks the base and store) and reported as imported.
  EXPECT_TRUE(fs::exists(dir / "b/synthetic/base-eval/row.json"));
  EXPECT_EQ(b["base"]["results"], a["base"]["results"]);
  EXPECT_EQ(b["base"].value("imported_from", ""), file);
  // The wall time counts the imported grid's invocations and this one.
  EXPECT_EQ(results_of(dir / "b")["invocations"], results_of(dir / "a")["invocations"].get<int64_t>() + 1);

  // Every figure with an interval (the table by length, the paired comparisons) is the whole grid's.
  const std::string md_a = test::read_file(dir / "a/results.md"), md_b = test::read_file(dir / "b/results.md");
  std::istringstream lines(md_a);
  int compared = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.find(" [") != std::string::npos) {
      ++compared;
      EXPECT_NE(md_b.find(line + "\n"), std::string::npos) << line << "\n----\n" << md_b;
    }
  EXPECT_GT(compared, 5);
  EXPECT_NE(md_b.find("Imported from `" + file + "`"), std::string::npos) << md_b;
  EXPECT_NE(md_b.find("chunk-0.5 (2·L_t)"), std::string::npos) << md_b;
  // The plot draws a solid curve for every row, the imported ones from their windows' block losses.
  auto solid_curves = [](const std::string& svg) {  // polylines of width 2 with points
    int n = 0;
    for (size_t at = svg.find("stroke-width='2'"); at != std::string::npos; at = svg.find("stroke-width='2'", at + 1)) {
      const size_t points = svg.find("points='", at);
      if (points != std::string::npos && std::isdigit(static_cast<unsigned char>(svg[points + 8]))) ++n;
    }
    return n;
  };
  EXPECT_EQ(solid_curves(test::read_file(dir / "b/plots/synthetic-x2.svg")), static_cast<int>(a["rows"].size()));

  // Rows measured with other evaluation settings are refused, naming the row and the setting.
  test::write_file(dir / "c.yaml", tiny_experiment(dir / "c", "gpt2", lengths));
  auto other = run(kBin, {"experiment", dir / "c.yaml", "--import-rows", file, "--set", "eval.max_sequences=5"}, 600);
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_NE(other.err.find("--import-rows " + file + ": row 'base at L_t'"), std::string::npos) << other.err;
  EXPECT_NE(other.err.find("max_sequences is 6 there, 5 here"), std::string::npos) << other.err;
  EXPECT_FALSE(fs::exists(dir / "c")) << "refused before anything is written";
  // So are rows scored on another base or store: the base row scored here differs.
  test::write_file(dir / "seed.yaml", tiny_experiment(dir / "seed", "gpt2", lengths));
  std::string reseeded = test::read_file(dir / "seed.yaml");
  reseeded.replace(reseeded.find("seed: 3}"), 8, "seed: 4}");
  test::write_file(dir / "seed.yaml", reseeded);
  auto other_base = run(kBin, {"experiment", dir / "seed.yaml", "--import-rows", file}, 600);
  EXPECT_EQ(other_base.exit_code, 2) << other_base.err;
  EXPECT_NE(other_base.err.find("--import-rows " + file + ": its base row scores"), std::string::npos) << other_base.err;
  EXPECT_FALSE(fs::exists(dir / "seed/synthetic/x2/full")) << "nothing is trained on a base that differs";
  // A file that is not this experiment's results is refused before anything is written.
  test::write_file(dir / "d.yaml", tiny_experiment(dir / "d", "gpt2", lengths));
  published["experiment"] = "another";
  test::write_file(dir / "another.json", published.dump());
  test::write_file(dir / "not.json", "{\"rows\": ");
  json cut = results_of(dir / "a");  // a window short of its block losses
  cut["experiment"] = "tiny";
  cut["corpora"][0]["rows"][1]["results"][1]["windows"][0]["block_nll"].erase(0);
  test::write_file(dir / "cut.json", cut.dump());
  for (const auto& [bad, expected] : {std::pair<std::string, std::string>{dir / "another.json", "records experiment \"another\", not \"tiny\""},
                                      {dir / "not.json", "not JSON"},
                                      {dir / "cut.json", "block losses, expected"},
                                      {dir / "missing.json", "missing.json"}}) {
    auto r = run(kBin, {"experiment", dir / "d.yaml", "--import-rows", bad}, 60);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--import-rows " + bad), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir / "d")) << bad;
  }
}

// Asking a finished grid, or a published one's rows, for more documents (eval.max_sequences
// raised) keeps the windows recorded and scores only the new ones: the tables are those of
// a grid that scored every window at once. An imported row's model is rebuilt and must
// first give its recorded first window back.
TEST(Experiment, MoreWindowsKeepTheRecordedOnesAndScoreOnlyTheNew) {
  test::TempDir dir;
  auto small = [&](const std::string& out) {
    std::string yaml = tiny_experiment(out, "gpt2", "  eval_lengths: [32, 64]\n");
    yaml.replace(yaml.find("methods: [da, full, chunk-0.5, prefix-0.5, randompos]"), 53, "methods: [chunk-0.5]");
    return yaml;
  };
  for (const char* name : {"few", "all", "imported", "bad"}) test::write_file(dir / (std::string(name) + ".yaml"), small(dir / name));
  const std::string three = "eval.max_sequences=3", six = "eval.max_sequences=6";
  auto all = run(kBin, {"experiment", dir / "all.yaml", "--set", six}, 600);
  ASSERT_EQ(all.exit_code, 0) << all.err;
  auto few = run(kBin, {"experiment", dir / "few.yaml", "--set", three}, 600);
  ASSERT_EQ(few.exit_code, 0) << few.err;
  const json recorded = results_of(dir / "few");
  const auto trained_at = fs::last_write_time(dir / "few/synthetic/x2/chunk-0.5/final/model.safetensors");

  // The same windows, whichever way they were scored: every length's windows, perplexity and curve.
  auto same_as_all = [&](const json& c, double margin) {
    const json whole = results_of(dir / "all")["corpora"][0];
    ASSERT_EQ(c["rows"].size(), whole["rows"].size());
    auto check = [&](const json& got, const json& want) {
      ASSERT_EQ(got["results"].size(), want["results"].size()) << want["key"];
      for (size_t l = 0; l < want["results"].size(); ++l) {
        const json &g = got["results"][l], &w = want["results"][l];
        EXPECT_EQ(g["sequences"], 6) << want["key"];
        EXPECT_EQ(g["tokens"], w["tokens"]) << want["key"];
        EXPECT_NEAR(g["ppl"].get<double>(), w["ppl"].get<double>(), margin * w["ppl"].get<double>()) << want["key"];
        ASSERT_EQ(g["windows"].size(), w["windows"].size()) << want["key"];
        for (size_t i = 0; i < w["windows"].size(); ++i) {
          EXPECT_EQ(g["windows"][i]["doc"], w["windows"][i]["doc"]);
          EXPECT_EQ(g["windows"][i]["start"], w["windows"][i]["start"]);
          for (size_t b = 0; b < w["windows"][i]["block_nll"].size(); ++b)
            EXPECT_NEAR(g["windows"][i]["block_nll"][b].get<double>(), w["windows"][i]["block_nll"][b].get<double>(),
                        1e-5) << want["key"] << " window " << i;
        }
      }
    };
    check(c["base"], whole["base"]);
    for (size_t i = 0; i < whole["rows"].size(); ++i) check(c["rows"][i], whole["rows"][i]);
  };

  // 1. The grid's own rows: the 3 windows kept, 3 more scored, nothing trained again.
  auto more = run(kBin, {"experiment", dir / "few.yaml", "--set", six}, 600);
  ASSERT_EQ(more.exit_code, 0) << more.err;
  EXPECT_NE(more.err.find("on the windows after the 3 recorded"), std::string::npos) << more.err;
  EXPECT_EQ(more.err.find("training "), std::string::npos) << more.err;
  EXPECT_EQ(fs::last_write_time(dir / "few/synthetic/x2/chunk-0.5/final/model.safetensors"), trained_at);
  same_as_all(results_of(dir / "few")["corpora"][0], 1e-9);
  // Each row's evaluation time adds the new windows' to the recorded.
  EXPECT_GT(row(results_of(dir / "few")["corpora"][0], "chunk-0.5")["eval_seconds"].get<double>(),
            row(recorded["corpora"][0], "chunk-0.5")["eval_seconds"].get<double>());

  // More windows than the split holds: every one of them, then nothing to add (the figures stay).
  auto every = run(kBin, {"experiment", dir / "few.yaml", "--set", "eval.max_sequences=1000"}, 600);
  ASSERT_EQ(every.exit_code, 0) << every.err;
  const json all_windows = results_of(dir / "few");
  auto none_left = run(kBin, {"experiment", dir / "few.yaml", "--set", "eval.max_sequences=2000"}, 600);
  ASSERT_EQ(none_left.exit_code, 0) << none_left.err;
  EXPECT_EQ(none_left.err.find("reported as null"), std::string::npos) << none_left.err;
  const json still = results_of(dir / "few");
  EXPECT_GT(row(all_windows["corpora"][0], "chunk-0.5")["results"][0]["sequences"].get<int64_t>(), 6);
  for (const char* key : {"ootb-interpolate", "chunk-0.5"})
    EXPECT_EQ(row(still["corpora"][0], key)["results"], row(all_windows["corpora"][0], key)["results"]) << key;

  // 2. A published results.json of 3 windows, its run folders gone: the rows' models are
  // rebuilt (the OOTB row's is the base), checked on their first window, and scored on
  // the 3 new windows alone; the report says which windows came from where.
  json published = recorded;
  for (auto& r : published["corpora"][0]["rows"]) r.erase("position_loss");
  const std::string file = dir / "published.json";
  test::write_file(file, published.dump(2));
  auto imported = run(kBin, {"experiment", dir / "imported.yaml", "--set", six, "--import-rows", file}, 600);
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_NE(imported.err.find("(imported; trained unless done, then scored on the windows it lacks)"), std::string::npos)
      << imported.err;
  const json c = results_of(dir / "imported")["corpora"][0];
  same_as_all(c, 1e-6);  // the imported windows' block losses are rounded to 1e-6 nats
  EXPECT_EQ(row(c, "chunk-0.5")["imported_windows"], 3);
  EXPECT_EQ(row(c, "chunk-0.5")["imported_from"], file);
  EXPECT_EQ(c["base"].value("imported_from", ""), "") << "the base row is scored here on every window";
  const std::string md = test::read_file(dir / "imported/results.md");
  EXPECT_NE(md.find("Scored on more windows than `" + file + "`"), std::string::npos) << md;
  EXPECT_NE(md.find("chunk-0.5 (2·L_t)"), std::string::npos) << md;

  // 3. A record its rebuilt model does not give back (here: its first window altered) is
  // refused, naming the row, before any window is added to it.
  json altered = published;
  for (auto& r : altered["corpora"][0]["rows"])
    if (r["key"] == "chunk-0.5") r["results"][0]["windows"][0]["block_nll"][0] = r["results"][0]["windows"][0]["block_nll"][0].get<double>() + 1.0;
  test::write_file(dir / "altered.json", altered.dump());
  auto bad = run(kBin, {"experiment", dir / "bad.yaml", "--set", six, "--import-rows", dir / "altered.json"}, 600);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("row 'chunk-0.5': the model rebuilt here scores its first window at L = 32"), std::string::npos)
      << bad.err;
  EXPECT_FALSE(fs::exists(dir / "bad/synthetic/x2/chunk-0.5/row.json"));
}

// Which records a grid continues with more windows: the same settings but a lower positive
// max_sequences; anything else is evaluated afresh (or refused, for an imported row).
TEST(MoreWindows, OnlyALowerWindowCountIsContinued) {
  const json four = {{"lengths", {2048, 32768}}, {"max_sequences", 4}, {"split", "valid"}, {"model_files", "a"}};
  auto with = [&](const std::string& key, const json& value) {
    json j = four;
    j[key] = value;
    return j;
  };
  EXPECT_TRUE(trainer::adds_windows(four, with("max_sequences", 8)));
  EXPECT_TRUE(trainer::adds_windows(four, with("max_sequences", 0))) << "0: every window";
  EXPECT_FALSE(trainer::adds_windows(four, four)) << "nothing to add";
  EXPECT_FALSE(trainer::adds_windows(four, with("max_sequences", 3))) << "fewer windows are another evaluation";
  EXPECT_FALSE(trainer::adds_windows(with("max_sequences", 0), with("max_sequences", 8))) << "it had every window";
  json other_model = with("model_files", "b");
  other_model["max_sequences"] = 8;
  EXPECT_FALSE(trainer::adds_windows(four, other_model)) << "another model";
  json other_lengths = with("lengths", json{2048});
  other_lengths["max_sequences"] = 8;
  EXPECT_FALSE(trainer::adds_windows(four, other_lengths)) << "other lengths";
  EXPECT_EQ(trainer::with_max_sequences(four, 8)["max_sequences"], 8);
}

struct BadExperiment {
  std::string name;
  std::string experiment;  // the experiment: section's body lines
  std::string expected;    // in the error message
  std::string arch = "gpt_neox";
};

// A grid of one text corpus (`input`, a JSONL file), one DA row at x2, writing `out`.
std::string one_text_corpus_grid(const std::string& out, const std::string& input) {
  return "experiment:\n"
         "  name: text\n"
         "  output_dir: " + out + "\n"
         "  factors: [2]\n"
         "  methods: [da]\n"
         "  ootb: [none]\n"
         "  corpora:\n"
         "    - {name: text, inputs: [\"" + input + "\"], vocab_size: 200, valid_fraction: 0.2}\n"
         "  base:\n"
         "    set: {train.budget.tokens: 4000}\n"
         "run: {seed: 7, threads: 1}\n"
         "model: {arch: gpt_neox, d_model: 16, n_layers: 1, n_heads: 2}\n"
         "data: {train_length: 32}\n"
         "train: {micro_batch_size: 8, warmup_steps: 2, log_every: 5, tensorboard: false}\n"
         "eval: {max_sequences: 2}\n";
}

// `segtrain synth`'s 30 documents in DIR/text (train.jsonl among them).
void write_synth_text(const test::TempDir& dir) {
  auto synth = run(kBin, {"synth", "--out", dir / "text", "--docs", "30", "--min-tokens", "300", "--max-tokens",
                          "500", "--seed", "4"});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
}

// A store built from text inputs records each file's size and digest: after a
// file is edited, the grid refuses to reuse the store (and every run made from
// it), naming the file, instead of reporting results of the old text.
TEST(Experiment, AnEditedInputFileMakesTheStoreStale) {
  test::TempDir dir;
  ASSERT_NO_FATAL_FAILURE(write_synth_text(dir));
  const std::string out = dir / "out", input = dir / "text/train.jsonl";
  test::write_file(dir / "x.yaml", one_text_corpus_grid(out, input));
  auto first = run(kBin, {"experiment", dir / "x.yaml"}, 600);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const json record = json::parse(test::read_file(fs::path(out) / "text" / "corpus.json"));
  ASSERT_EQ(record["files"].size(), 1u);
  EXPECT_EQ(record["files"][0]["bytes"], fs::file_size(input));
  auto again = run(kBin, {"experiment", dir / "x.yaml"}, 600);
  ASSERT_EQ(again.exit_code, 0) << "an unchanged corpus is reused: " << again.err;

  std::ofstream(input, std::ios::app) << "{\"text\": \"one more document\"}\n";
  auto edited = run(kBin, {"experiment", dir / "x.yaml"}, 600);
  EXPECT_EQ(edited.exit_code, 2) << edited.err;
  EXPECT_NE(edited.err.find(input + " changed"), std::string::npos) << edited.err;

  // A damaged record (not JSON, or a file entry that is not an object with a path) is a stale
  // corpus too: one line, exit 2, never nlohmann's own exception.
  const fs::path corpus_json = fs::path(out) / "text" / "corpus.json";
  json damaged = record;
  damaged["files"][0] = json::array({1});
  for (const auto& [text, why] : {std::pair{std::string("{oops"), std::string("corpus.json: not valid JSON)")},
                                   std::pair{damaged.dump(), input + " is new"}}) {
    test::write_file(corpus_json, text);
    auto stale = run(kBin, {"experiment", dir / "x.yaml"}, 600);
    EXPECT_EQ(stale.exit_code, 2) << text << ": " << stale.err;
    EXPECT_NE(stale.err.find("differs from the corpus"), std::string::npos) << stale.err;
    EXPECT_NE(stale.err.find(why), std::string::npos) << stale.err;
    EXPECT_EQ(stale.err.find("json.exception"), std::string::npos) << stale.err;
  }
}

// A Linux file name may be any bytes: an input whose path is not UTF-8 is recorded in corpus.json
// (U+FFFD for the bad byte) once its store is built, and the grid run again reuses that store.
TEST(Experiment, AnInputPathThatIsNotUtf8IsRecordedAndItsStoreReused) {
  test::TempDir dir;
  ASSERT_NO_FATAL_FAILURE(write_synth_text(dir));
  const std::string input = dir / "in\xff/train.jsonl", out = dir / "out";
  fs::create_directories(fs::path(input).parent_path());
  fs::copy_file(dir / "text/train.jsonl", input);
  test::write_file(dir / "x.yaml", one_text_corpus_grid(out, input));
  auto first = run(kBin, {"experiment", dir / "x.yaml"}, 600);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const json record = json::parse(test::read_file(fs::path(out) / "text" / "corpus.json"));
  EXPECT_EQ(record["files"][0]["path"], (dir / "in\uFFFD/train.jsonl")) << record.dump();
  auto again = run(kBin, {"experiment", dir / "x.yaml"}, 600);
  EXPECT_EQ(again.exit_code, 0) << "the same corpus is reused: " << again.err;
}

// A grid whose disk fills up (a tmpfs smaller than the whole grid needs; root
// only) exits 1 with the OS's reason; with space freed, running it again
// finishes with exactly the rows of a grid that never ran out of space.
TEST(Experiment, AFullDiskLosesNoRowAndTheGridFinishesAfterwards) {
  if (::geteuid() != 0) SKIP_NOT_APPLICABLE("mounting a small tmpfs needs root");
  test::TempDir dir;
  const std::string whole = dir / "whole", small = dir / "small";
  test::write_file(dir / "whole.yaml", tiny_experiment(whole, "gpt_neox"));
  auto complete = run(kBin, {"experiment", dir / "whole.yaml"}, 600);
  ASSERT_EQ(complete.exit_code, 0) << complete.err;
  uintmax_t bytes = 0;  // in tmpfs pages, as the small disk will count them
  for (const auto& e : fs::recursive_directory_iterator(whole))
    if (e.is_regular_file()) bytes += (e.file_size() + 4095) / 4096 * 4096;

  fs::create_directories(small);
  const std::string mount = "mount -t tmpfs -o size=" + std::to_string(bytes * 6 / 10) + " segtrain-test " +
                            test::shell_quote(small);
  if (std::system((mount + " 2>/dev/null").c_str()) != 0) SKIP_NOT_APPLICABLE("cannot mount a tmpfs here");
  struct Unmount {
    std::string dir;
    ~Unmount() { std::system(("umount " + test::shell_quote(dir)).c_str()); }
  } unmount{small};
  test::write_file(dir / "small.yaml", tiny_experiment(small + "/out", "gpt_neox"));
  auto full = run(kBin, {"experiment", dir / "small.yaml"}, 600);
  EXPECT_EQ(full.exit_code, 1) << full.err;
  EXPECT_NE(full.err.find("No space left on device"), std::string::npos) << full.err;

  ASSERT_EQ(std::system(("mount -o remount,size=" + std::to_string(bytes * 3) + " " + test::shell_quote(small)).c_str()),
            0);
  auto again = run(kBin, {"experiment", dir / "small.yaml"}, 600);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  const json want = results_of(whole), got = results_of(small + "/out");
  ASSERT_EQ(got["corpora"][0]["rows"].size(), want["corpora"][0]["rows"].size());
  for (const auto& r : want["corpora"][0]["rows"])
    EXPECT_EQ(row(got["corpora"][0], r["key"])["results"], r["results"]) << r["key"];
}

TEST(Experiment, BadFilesExitTwoNamingTheLineAndKey) {
  test::TempDir dir;
  const std::string corpus = "  corpora:\n    - name: s\n      synthetic: {docs: 20}\n";
  const std::vector<BadExperiment> cases = {
      {"method", "  methods: [chunk-0.25, chunkk-0.5]\n" + corpus, ":2:25: experiment.methods: unknown method 'chunkk-0.5'"},
      {"factor", "  factors: [2, 1]\n" + corpus, ":2:16: experiment.factors: expected a non-empty list of integers >= 2"},
      {"factor twice", "  factors: [2, 4, 2]\n" + corpus, ":2:19: experiment.factors: 2 is listed twice"},
      {"unknown key", "  factor: [2]\n" + corpus, ":2:3: unknown key 'experiment.factor'; did you mean 'experiment.factors'?"},
      {"budget not an integer", "  train_tokens: 2.5\n" + corpus,
       ":2:17: experiment.train_tokens: expected null or an integer >= 1, got '2.5'"},
      {"unknown corpus key", "  corpora:\n    - name: s\n      synthetic: {docs: 20, seeed: 3}\n",
       ":4:29: unknown key 'experiment.corpora[0].synthetic.seeed'; did you mean 'experiment.corpora[0].synthetic.seed'?"},
      {"fraction out of range", corpus + "      valid_fraction: 1.5\n",
       ":5:23: experiment.corpora[0].valid_fraction: expected a number in (0, 1), got '1.5'"},
      {"ootb twice", "  ootb: [none, yarn, none]\n" + corpus, ":2:22: experiment.ootb: none is listed twice"},
      {"train extension", "  train_extension: yarnn\n" + corpus,
       ":2:20: experiment.train_extension: expected auto or one of none|"},
      {"retired passkey section", "  passkey: {lengths: [64], style: digits}\n" + corpus,
       ":2:3: unknown key 'experiment.passkey': replaced by the evaluation tasks of the run sections: eval.tasks: "
       "[perplexity, passkey] and eval.passkey: {lengths: [...], trials: N, style: digits|recall}"},
      {"ootb for the wrong scheme", "  ootb: [ntk_alibi]\n" + corpus, "experiment.ootb: ntk_alibi does not apply"},
      {"ape without a table", "  ootb: [none]\n" + corpus, "experiment.ootb: none does not apply", "gpt2"},
      {"two sources", "  corpora:\n    - name: s\n      synthetic: {docs: 20}\n      store: /nonexistent\n",
       "give exactly one of synthetic, inputs or store"},
      {"no corpora", "  factors: [2]\n", "experiment.corpora: required"},
      {"missing input", "  corpora:\n    - name: s\n      inputs: [/nonexistent/linux-doc-6.1]\n",
       ":4:7: experiment.corpora[0].inputs: '/nonexistent/linux-doc-6.1' does not exist (scripts/setup.sh installs"},
      {"grid key in set", corpus + "  extend:\n    set: {data.sampler.method: full}\n",
       ":6:11: experiment.extend.set.data.sampler.method: the experiment sets this key"},
      {"evaluation lengths in set", corpus + "  base:\n    set: {eval.lengths: [64]}\n",
       ":6:11: experiment.base.set.eval.lengths: the experiment sets this key"},
      {"budget of trained rows", corpus + "  extend:\n    set: {train.budget.tokens: 5}\n",
       "experiment.extend.set.train.budget.tokens: every trained row has the same budget so that rows compare: "
       "the compute-equivalent one (Karypis et al. 2024, eq. 2), or experiment.train_tokens"},
      // The file, line and `set:` key it was written under, never a --set the user did not give.
      {"bad value in set", corpus + "  base:\n    set: {train.lr: fast}\n",
       ":6:11 (experiment.base.set): train.lr: expected auto or a number > 0, got 'fast'"},
      {"unknown key in set", corpus + "  extend:\n    set: {train.lrr: 1}\n",
       ":6:11 (experiment.extend.set): unknown key 'train.lrr'"},
  };
  for (const auto& c : cases) {
    test::write_file(dir / "bad.yaml", "experiment:\n" + c.experiment + "model: {arch: " + c.arch + "}\n");
    auto r = run(kBin, {"experiment", dir / "bad.yaml"});
    EXPECT_EQ(r.exit_code, 2) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.name << ": " << r.err;
    EXPECT_FALSE(fs::exists("runs/experiments/bad")) << c.name << ": nothing may run";
  }
  // A template problem is found before anything runs, once, naming the runs it breaks.
  test::write_file(dir / "heads.yaml", "experiment:\n" + corpus + "model: {arch: gpt_neox, d_model: 30, n_heads: 4}\n");
  auto r = run(kBin, {"experiment", dir / "heads.yaml"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("heads.yaml:5:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("d_model = 30 is not divisible by n_heads = 4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(in run s/base)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("s/x2/da"), std::string::npos) << r.err;  // trained rows take the base's shape
  // A run config without an experiment section says what is missing.
  test::write_file(dir / "plain.yaml", "data: {store: x}\n");
  r = run(kBin, {"experiment", dir / "plain.yaml"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("needs an `experiment:` section"), std::string::npos) << r.err;
}

TEST(ExperimentPlan, TrainedRowsFollowSeed004) {
  test::TempDir dir;
  for (const char* arch : {"gpt2", "gpt_neox", "bloom"}) {
    test::write_file(dir / "x.yaml", tiny_experiment(dir / "out", arch));
    const auto x = trainer::load_experiment(dir / "x.yaml", {"train.grad_clip=0.5"});
    const auto runs = trainer::plan_training_runs(x, x.corpora[0]);
    ASSERT_EQ(runs.size(), 1u + 5u);
    const auto& base = runs[0].config.config;
    EXPECT_EQ(base.data.extended_length, 32);
    EXPECT_EQ(base.data.sampler.method, "truncate");
    EXPECT_EQ(base.train.budget.tokens, 30000);
    EXPECT_EQ(base.train.lr, 3.0e-3);  // base.set
    EXPECT_EQ(base.train.grad_clip, 0.5);  // --set reaches every run
    const bool ape = std::string(arch) == "gpt2";
    for (size_t i = 1; i < runs.size(); ++i) {
      const auto& c = runs[i].config.config;
      const auto& m = *runs[i].method;
      EXPECT_EQ(c.model.init, "checkpoint:" + (dir / "out") + "/synthetic/base/final");
      EXPECT_EQ(c.data.extended_length, 64);
      EXPECT_TRUE(c.train.budget.compute_equivalent && !c.train.budget.tokens);
      EXPECT_EQ(c.train.lr, 1.0e-3);
      EXPECT_EQ(c.train.grad_clip, 0.5);
      // DA stays at the base's positions; APE's segmented rows interpolate the table, RoPE/ALiBi train on plain positions.
      const auto expected = m.domain_adaptation ? models::ExtensionMethod::none
                            : ape               ? models::ExtensionMethod::interpolate
                                                : models::ExtensionMethod::none;
      EXPECT_EQ(c.model.spec.extension.method, expected) << arch << " " << m.name;
      if (expected != models::ExtensionMethod::none) {
        EXPECT_EQ(c.model.spec.extension.factor, 2.0);
      }
      EXPECT_EQ(c.data.sampler.method, m.domain_adaptation ? std::string("truncate") : m.sampler);
      EXPECT_EQ(fs::path(c.run.output_dir), dir.path() / "out/synthetic/x2" / m.name);
    }
  }
}

// A given base trained at its own context (config.json's max_position_embeddings,
// here 256) is extended by L_e over that context, not over L_t; experiment.train_tokens
// gives every trained row the same fixed budget; truncate trains with the rows' extension.
TEST(ExperimentPlan, AGivenBaseIsExtendedFromItsOwnContextUnderOneTokenBudget) {
  test::TempDir dir;
  fs::create_directories(dir / "base");
  test::write_file(dir / "base/config.json",
                   R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 200,
                       "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "num_key_value_heads": 1, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
                       "rope_theta": 10000.0, "tie_word_embeddings": true})");
  fs::create_directories(dir / "store");
  test::write_file(dir / "store/meta.json", "{}");
  const std::string yaml = "experiment:\n"
                           "  output_dir: " + (dir / "out") + "\n"
                           "  factors: [16]\n"
                           "  methods: [truncate, chunk-0.25, da]\n"
                           "  train_extension: yarn\n"
                           "  train_tokens: 4096\n"
                           "  eval_lengths: [32, 128, 256, 512]\n"
                           "  eval_from_longest: true\n"
                           "  corpora:\n"
                           "    - {name: given, store: " + (dir / "store") + ", base: hf:" + (dir / "base") + "}\n"
                           "run: {seed: 7}\n"
                           "data: {train_length: 32}\n"
                           "train: {micro_batch_size: 2}\n";
  test::write_file(dir / "x.yaml", yaml);
  const auto x = trainer::load_experiment(dir / "x.yaml", {});
  EXPECT_EQ(trainer::base_context(x, x.corpora[0]), 256);
  EXPECT_EQ(trainer::extension_factor(x, x.corpora[0], 4), 1.0);   // L_e = 128 < 256: no scaling needed
  EXPECT_EQ(trainer::extension_factor(x, x.corpora[0], 16), 2.0);  // L_e = 512 = 2 x 256
  EXPECT_EQ(trainer::row_lengths(x, 16), (std::vector<int64_t>{32, 128, 256, 512}));
  const auto runs = trainer::plan_training_runs(x, x.corpora[0]);
  ASSERT_EQ(runs.size(), 3u);  // no base run: the base is given
  for (const auto& run : runs) {
    const auto& c = run.config.config;
    EXPECT_FALSE(c.train.budget.compute_equivalent) << run.label;
    EXPECT_EQ(c.train.budget.tokens, 4096) << run.label;
    EXPECT_TRUE(trainer::validate_config(run.config, /*check_paths=*/false).empty()) << run.label;
    if (run.method->domain_adaptation) {
      EXPECT_EQ(c.model.spec.extension.method, models::ExtensionMethod::none);
      continue;
    }
    EXPECT_EQ(c.data.sampler.method, run.method->sampler) << run.label;
    EXPECT_EQ(c.model.spec.extension.method, models::ExtensionMethod::yarn) << run.label;
    EXPECT_EQ(c.model.spec.extension.factor, run.factor == 16 ? 2.0 : 1.0) << run.label;
  }

  // The lengths must hold L_t and every L_e.
  // refusal(from, to): what loading the file with `from` replaced by `to` is refused with.
  auto refusal = [&](const std::string& from, const std::string& to) {
    std::string bad = yaml;
    bad.replace(bad.find(from), from.size(), to);
    test::write_file(dir / "bad.yaml", bad);
    return test::input_error_of([&] { trainer::load_experiment(dir / "bad.yaml", {}); });
  };
  std::string msg = refusal("[32, 128, 256, 512]", "[32, 256]");
  EXPECT_NE(msg.find("experiment.eval_lengths: 512 is missing"), std::string::npos) << "eval_lengths without L_e: " << msg;
  // truncate without an extension would be the da row again.
  msg = refusal("  train_extension: yarn\n", "");
  EXPECT_NE(msg.find("truncate trains with the rows' extension, which is none"), std::string::npos)
      << "truncate with no extension: " << msg;
  // Lengths of its own go with one factor and stop at its L_e (the plots are drawn there).
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"factors: [16]", "factors: [4, 16]"},
                                 {"[32, 128, 256, 512]", "[32, 128, 256, 512, 1024]"}}) {
    msg = refusal(from, to);
    EXPECT_NE(msg.find("give them with one factor and none longer than its L_e"), std::string::npos) << to << ": " << msg;
  }
  // The grid's tables are perplexity's: a template whose tasks leave it out is refused.
  msg = refusal("\nrun:", "\neval: {tasks: [passkey]}\nrun:");
  EXPECT_NE(msg.find("eval.tasks: an experiment scores every row's perplexity"), std::string::npos)
      << "tasks without perplexity: " << msg;
}

// The experiment section reads numbers as the run config does (its schema's rules):
// 1e6 is an integer there too, and a corpus's keys are typed like any other.
TEST(ExperimentPlan, TheSectionReadsNumbersAsTheRunConfigDoes) {
  test::TempDir dir;
  std::string text = tiny_experiment(dir / "out", "llama", "  train_tokens: 1e6\n  eval_lengths: [6.4e1, 32]\n");
  text.replace(text.find("vocab_size: 200"), 15, "vocab_size: 2e2");
  test::write_file(dir / "x.yaml", text);
  const auto x = trainer::load_experiment(dir / "x.yaml", {});
  EXPECT_EQ(x.train_tokens, 1000000);
  EXPECT_EQ(x.eval_lengths, (std::vector<int64_t>{32, 64}));  // sorted
  EXPECT_EQ(x.corpora[0].vocab_size, 200);
  ASSERT_TRUE(x.corpora[0].synthetic);
  EXPECT_EQ(x.corpora[0].synthetic->seed, 3u);
  EXPECT_EQ(x.name, "tiny");
  // Defaults the reader works out: the file's stem names an unnamed experiment.
  text.replace(text.find("  name: tiny\n"), 13, "");
  text.replace(text.find("  output_dir: "), text.find("\n", text.find("  output_dir: ")) - text.find("  output_dir: ") + 1, "");
  test::write_file(dir / "stem.yaml", text);
  const auto y = trainer::load_experiment(dir / "stem.yaml", {});
  EXPECT_EQ(y.name, "stem");
  EXPECT_EQ(y.output_dir, "runs/experiments/stem");
}

TEST(ExperimentPlan, AMethodsOwnSettingsAndBudgetsReachItsRunsAlone) {
  test::TempDir dir;
  std::string text = tiny_experiment(dir / "out", "llama", "  train_tokens: 4096\n");
  const std::string methods = "  methods: [da, full, chunk-0.5, prefix-0.5, randompos]\n";
  text.replace(text.find(methods), methods.size(),
               "  methods:\n"
               "    - {name: da, budgets: [16384]}\n"
               "    - {name: full, set: {model.activation_checkpointing: true, train.warmup_steps: 0}}\n"
               "    - {name: chunk-0.5, budgets: [8192, 16384]}\n");
  test::write_file(dir / "x.yaml", text);
  const auto x = trainer::load_experiment(dir / "x.yaml", {});
  std::vector<std::string> names;
  for (const auto& m : x.methods) names.push_back(m.name);
  // The rows the text compares first, then the budget curve.
  EXPECT_EQ(names, (std::vector<std::string>{"da", "full", "chunk-0.5", "da@16384", "chunk-0.5@8192", "chunk-0.5@16384"}));
  for (const auto& run : trainer::plan_training_runs(x, x.corpora[0])) {
    if (!run.method) continue;
    const auto& c = run.config.config;
    const auto& m = *run.method;
    const bool full = m.name == "full";
    EXPECT_EQ(c.model.spec.activation_checkpointing, models::ActivationCheckpointing::every_block_if(full)) << m.name;
    EXPECT_EQ(c.train.warmup_steps, full ? 0 : 2) << m.name;
    EXPECT_EQ(c.train.budget.tokens, m.budget.value_or(4096)) << m.name;
    EXPECT_FALSE(c.train.budget.compute_equivalent);
    EXPECT_EQ(fs::path(c.run.output_dir).filename(), m.name);
    EXPECT_EQ(c.data.sampler.alpha, m.name.rfind("chunk", 0) == 0 ? 0.5 : 0.25) << m.name;
  }
  // A method's budget list cannot repeat the experiment's, and a method's set cannot change its budget.
  auto error_of = [&](const std::string& item) {
    std::string bad = tiny_experiment(dir / "out2", "llama", "  train_tokens: 4096\n");
    bad.replace(bad.find(methods), methods.size(), "  methods:\n    - " + item + "\n");
    test::write_file(dir / "bad.yaml", bad);
    try {
      trainer::load_experiment(dir / "bad.yaml", {});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error_of("{name: da, budgets: [4096]}")
                .find("bad.yaml:6:7: experiment.methods[0].budgets: 4096 is experiment.train_tokens"),
            std::string::npos)
      << error_of("{name: da, budgets: [4096]}");
  EXPECT_NE(error_of("{name: da, set: {train.budget.tokens: 100}}")
                .find("bad.yaml:6:24: experiment.methods[0].set.train.budget.tokens: every trained row has the same budget"),
            std::string::npos)
      << error_of("{name: da, set: {train.budget.tokens: 100}}");
  EXPECT_NE(error_of("{name: chunk-0.5, alpha: 3}").find("unknown key 'experiment.methods[0].alpha'"), std::string::npos)
      << error_of("{name: chunk-0.5, alpha: 3}");
  EXPECT_NE(error_of("{budgets: [10]}").find("experiment.methods[0].name: required"), std::string::npos);
}

// experiment.variants: the rows they name trained again with their settings after the row's own
// (its budget, its method's settings), as <row>+<variant>, after every method's row.
TEST(ExperimentPlan, AVariantTrainsItsRowsAgainWithItsSettingsAfterTheirOwn) {
  test::TempDir dir;
  const std::string methods = "  methods: [da, full, chunk-0.5, prefix-0.5, randompos]\n";
  auto with = [&](const std::string& variants) {
    std::string text = tiny_experiment(dir / "out", "llama", "  train_tokens: 4096\n");
    text.replace(text.find(methods), methods.size(),
                 "  methods:\n"
                 "    - {name: full, set: {model.activation_checkpointing: true, train.warmup_steps: 0}}\n"
                 "    - {name: chunk-0.5, budgets: [8192]}\n" +
                     variants);
    return text;
  };
  test::write_file(dir / "x.yaml", with("  variants:\n"
                                        "    - {name: lora, of: [chunk-0.5@8192, full], set: {model.adapters.lora.rank: 4,"
                                        " train.trainable: [adapters, norms], train.lr: 2.0e-3}}\n"));
  const auto x = trainer::load_experiment(dir / "x.yaml", {});
  std::vector<std::string> names;
  for (const auto& m : x.methods) names.push_back(m.name + "<" + m.variant_of);
  EXPECT_EQ(names, (std::vector<std::string>{"full<", "chunk-0.5<", "chunk-0.5@8192<", "chunk-0.5@8192+lora<chunk-0.5@8192",
                                             "full+lora<full"}));
  int variants = 0;
  for (const auto& run : trainer::plan_training_runs(x, x.corpora[0])) {
    if (!run.method) continue;
    const auto& c = run.config.config;
    const auto& m = *run.method;
    const bool variant = !m.variant_of.empty();
    const std::string row = variant ? m.variant_of : m.name;
    variants += variant;
    EXPECT_EQ(c.model.adapters.lora.rank, variant ? 4 : 0) << m.name;
    EXPECT_EQ(c.model.adapters.lora.trainable, variant ? std::vector<std::string>({"adapters", "norms"}) : std::vector<std::string>{"adapters"})
        << m.name;
    EXPECT_DOUBLE_EQ(c.train.lr.value(), variant ? 2e-3 : 1e-3) << m.name;
    // Its row's own settings and budget.
    EXPECT_EQ(c.model.spec.activation_checkpointing, models::ActivationCheckpointing::every_block_if(row == "full")) << m.name;
    EXPECT_EQ(c.train.warmup_steps, row == "full" ? 0 : 2) << m.name;
    EXPECT_EQ(c.train.budget.tokens, row == "chunk-0.5@8192" ? 8192 : 4096) << m.name;
    EXPECT_EQ(c.data.sampler.alpha, row.rfind("chunk", 0) == 0 ? 0.5 : 0.25) << m.name;
    EXPECT_EQ(fs::path(c.run.output_dir).filename(), m.name);
  }
  EXPECT_EQ(variants, 2);
  auto error_of = [&](const std::string& variants) {
    test::write_file(dir / "bad.yaml", with(variants));
    try {
      trainer::load_experiment(dir / "bad.yaml", {});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string unknown = error_of("  variants: [{name: lora, of: [chunk-0.5@4096], set: {train.lr: 1.0e-3}}]\n");
  EXPECT_NE(unknown.find("bad.yaml:8:27: experiment.variants[0].of: 'chunk-0.5@4096' is not a trained row of "
                         "experiment.methods; expected one of full, chunk-0.5, chunk-0.5@8192"),
            std::string::npos)
      << unknown;
  const std::string path = error_of("  variants: [{name: ../x, of: [full], set: {train.lr: 1.0e-3}}]\n");
  EXPECT_NE(path.find("experiment.variants[0].name: '../x' must be letters, digits, - and _"), std::string::npos) << path;
  const std::string twice = error_of("  variants: [{name: a, of: [full, full], set: {train.lr: 1.0e-3}}]\n");
  EXPECT_NE(twice.find("experiment.variants[0].of: 'full' is listed twice"), std::string::npos) << twice;
  const std::string same = error_of("  variants: [{name: a, of: [full], set: {train.lr: 1.0e-3}},"
                                    " {name: a, of: [chunk-0.5], set: {train.lr: 1.0e-3}}]\n");
  EXPECT_NE(same.find("experiment.variants[1].name: 'a' is used by experiment.variants[0]"), std::string::npos) << same;
  const std::string no_set = error_of("  variants: [{name: a, of: [full]}]\n");
  EXPECT_NE(no_set.find("experiment.variants[0].set: required"), std::string::npos) << no_set;
  const std::string budget = error_of("  variants: [{name: a, of: [full], set: {train.budget.tokens: 10}}]\n");
  EXPECT_NE(budget.find("experiment.variants[0].set.train.budget.tokens: every trained row has the same budget"),
            std::string::npos)
      << budget;
  // versus: more rows its rows are compared with, at their budget; a data.mixture set through it.
  test::write_file(dir / "v.yaml", with("  variants:\n"
                                        "    - {name: mix, of: [chunk-0.5, chunk-0.5@8192], versus: [full], set: "
                                        "{data.mixture: [{name: a, weight: 3}, {name: b, weight: 1, sampler: {method: truncate}}]}}\n"));
  const std::string no_point = [&] {
    try {
      trainer::load_experiment(dir / "v.yaml", {});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  }();
  EXPECT_NE(no_point.find("experiment.variants[0].versus: 'full' has no row full@8192 beside chunk-0.5@8192"),
            std::string::npos) << no_point;
  test::write_file(dir / "v.yaml", with("  variants:\n"
                                        "    - {name: mix, of: [chunk-0.5], versus: [full], set: "
                                        "{data.mixture: [{name: a, weight: 3}, {name: b, weight: 1, sampler: {method: truncate}}]}}\n"));
  const auto v = trainer::load_experiment(dir / "v.yaml", {});
  const auto mix = std::find_if(v.methods.begin(), v.methods.end(), [](const auto& m) { return m.name == "chunk-0.5+mix"; });
  ASSERT_NE(mix, v.methods.end());
  EXPECT_EQ(mix->variant_versus, std::vector<std::string>{"full"});
  int planned = 0;
  for (const auto& run : trainer::plan_training_runs(v, v.corpora[0]))
    if (run.method && run.method->name == "chunk-0.5+mix") {
      ++planned;
      const auto& mixture = run.config.config.data.mixture;
      ASSERT_EQ(mixture.size(), 2u);
      EXPECT_EQ(mixture[1].name, "b");
      EXPECT_EQ(mixture[1].sampler->method, "truncate");
    }
  EXPECT_EQ(planned, 1);
  // Its settings are checked as every run's are: a LoRA rank below 0 names the variant's row.
  const std::string rank = error_of("  variants: [{name: a, of: [full], set: {model.adapters.lora.rank: -1}}]\n");
  EXPECT_NE(rank.find("model.adapters.lora.rank"), std::string::npos) << rank;
  // A value its key does not take names the file, line, the variant and its `set:` key, not --set
  // (issue 58 case 10); so does a check of the run its setting fails.
  const std::string value = error_of("  variants: [{name: a, of: [full], set: {model.adapters.lora.rank: abc}}]\n");
  EXPECT_EQ(value, dir / "bad.yaml:8:42 (experiment.variants[0].set, variant a): model.adapters.lora.rank: expected an "
                         "integer >= 0, got 'abc'");
  const std::string key = error_of("  variants: [{name: a, of: [full], set: {model.adapters.lora.rnak: 4}}]\n");
  EXPECT_EQ(key.find(dir / "bad.yaml:8:42 (experiment.variants[0].set, variant a): unknown key 'model.adapters.lora.rnak'"),
            0u)
      << key;
  const std::string checked = error_of("  variants: [{name: a, of: [full], set: {model.adapters.lora.rank: 4, "
                                       "model.adapters.lora.targets: [qkv]}}]\n");
  EXPECT_NE(checked.find("bad.yaml:8:71 (experiment.variants[0].set, variant a): model.adapters.lora.targets: "),
            std::string::npos)
      << checked;
  for (const auto& message : {value, key, checked}) EXPECT_EQ(message.find("--set"), std::string::npos) << message;
}

// A variant's rank too large for the base (its adapters larger than the projections they adapt) is
// refused when the experiment is planned, naming the variant's setting and its row: it once aborted
// (LibTorch asking for terabytes) after every other row had trained.
TEST(ExperimentPlan, AVariantsAdaptersAreSizedWhenTheExperimentIsPlanned) {
  test::TempDir dir;
  const std::string methods = "  methods: [da, full, chunk-0.5, prefix-0.5, randompos]\n";
  auto error_of = [&](int64_t rank) {
    std::string text = tiny_experiment(dir / "out", "llama");
    text.replace(text.find(methods), methods.size(),
                 "  methods: [full, chunk-0.5]\n  variants:\n    - {name: lora, of: [chunk-0.5], set: "
                 "{model.adapters.lora.rank: " + std::to_string(rank) + "}}\n");
    test::write_file(dir / "x.yaml", text);
    return test::input_error_of([&] { trainer::load_experiment(dir / "x.yaml", {}); });
  };
  // d_model 32, 2 heads: q, k, v and o 32 x 32 hold 4,096 weights a layer, an adapter rank x 256: at most 16.
  EXPECT_EQ(error_of(16), "(no InputError)");
  const std::string refused = error_of(1'000'000'000);
  EXPECT_NE(refused.find("x.yaml:7:43 (experiment.variants[0].set, variant lora): model.adapters.lora.rank: 1000000000 "
                         "would make"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.find("model.adapters.lora.rank: 1000000000 would make the adapters 1.86 TiB in fp32"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.find("at most 16 here"), std::string::npos) << refused;
  EXPECT_NE(refused.find("(row synthetic/x2/chunk-0.5+lora)"), std::string::npos) << refused;
  EXPECT_EQ(refused.find('\n'), std::string::npos) << refused;
  EXPECT_NE(error_of(17).find("model.adapters.lora.rank: 17 would make the adapters"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// More checkpointed blocks than the base has, set for one row, is refused when the experiment is
// planned, as a variant's adapters are: the row's own run would have refused it after the base and
// every row before it had trained.
TEST(ExperimentPlan, AVariantsCheckpointedBlocksAreCountedAgainstTheBaseWhenPlanned) {
  test::TempDir dir;
  const std::string methods = "  methods: [da, full, chunk-0.5, prefix-0.5, randompos]\n";
  auto error_of = [&](const std::string& blocks) {
    std::string text = tiny_experiment(dir / "out", "llama");
    text.replace(text.find(methods), methods.size(),
                 "  methods: [full, chunk-0.5]\n  variants:\n    - {name: ac, of: [chunk-0.5], set: "
                 "{model.activation_checkpointing: " + blocks + "}}\n");
    test::write_file(dir / "x.yaml", text);
    return test::input_error_of([&] { trainer::load_experiment(dir / "x.yaml", {}); });
  };
  // The tiny base has 2 blocks (n_layers: 2).
  for (const std::string fits : {"2", "1", "true", "auto"}) EXPECT_EQ(error_of(fits), "(no InputError)") << fits;
  const std::string refused = error_of("3");
  EXPECT_NE(refused.find("x.yaml:7:41 (experiment.variants[0].set, variant ac): model.activation_checkpointing: 3 "
                         "blocks, but the model has 2 (true recomputes every block) (row synthetic/x2/chunk-0.5+ac)"),
            std::string::npos)
      << refused;
  EXPECT_EQ(refused.find('\n'), std::string::npos) << refused;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(ExperimentPlan, MethodNamesAndApplicableOotbMethods) {
  using trainer::parse_trained_method;
  EXPECT_EQ(parse_trained_method("chunk-0.125")->sampler, "chunk");
  EXPECT_EQ(parse_trained_method("chunk-0.125")->alpha, 0.125);
  EXPECT_EQ(parse_trained_method("prefix-0.5")->sampler, "prefix");
  EXPECT_TRUE(parse_trained_method("da")->domain_adaptation);
  EXPECT_EQ(parse_trained_method("randompos")->sampler, "randompos");
  EXPECT_EQ(parse_trained_method("chunk-0.25")->placement, data::ChunkPlacement::uniform);
  const auto ring = parse_trained_method("chunk-ring-0.25");
  ASSERT_TRUE(ring);
  EXPECT_EQ(ring->name, "chunk-ring-0.25");
  EXPECT_EQ(ring->sampler, "chunk");
  EXPECT_EQ(ring->alpha, 0.25);
  EXPECT_EQ(ring->placement, data::ChunkPlacement::ring);
  EXPECT_EQ(parse_trained_method("truncate")->sampler, "truncate");
  EXPECT_FALSE(parse_trained_method("truncate")->domain_adaptation);
  for (const char* bad : {"chunk", "chunk-", "chunk-0.25x", "prefix-abc", "truncated", "", "chunk-ring-",
                          "chunk-ring-x", "prefix-ring-0.25", "chunk-nan"})
    EXPECT_FALSE(parse_trained_method(bad)) << bad;
  // A number's range is not the name's business: data/sampler_rules.h refuses it
  // when the grid's runs are validated (ExperimentConfig.AlphaOneIsRefusedInTheWordsOfAConfigFile).
  EXPECT_EQ(parse_trained_method("chunk-1.5")->alpha, 1.5);
  using E = models::ExtensionMethod;
  EXPECT_EQ(trainer::ootb_methods_for(models::Arch::gpt2), (std::vector<E>{E::interpolate}));
  EXPECT_EQ(trainer::ootb_methods_for(models::Arch::bloom),
            (std::vector<E>{E::none, E::interpolate, E::dynamic_interpolate, E::ntk_alibi}));
}

// The same bad alpha, as an experiment's method name and as a run config's key,
// is refused in the same words (data/sampler_rules.h, the one home of the rule);
// the Sampler's own guard says them too (tests/data/sampler_test.cpp).
TEST(ExperimentConfig, AlphaOneIsRefusedInTheWordsOfAConfigFile) {
  test::TempDir dir;
  const std::string words = "data.sampler.alpha: 1 is not in (0, 1): chunk cuts L_t into 1/alpha segments, prefix "
                            "trains on a suffix of alpha * L_t tokens";
  for (const char* method : {"chunk-1", "chunk-ring-1", "prefix-1"}) {
    test::write_file(dir / "x.yaml",
                     "experiment:\n  name: r\n  output_dir: " + dir / "out" + "\n  factors: [4]\n  methods: [" +
                         method + "]\n  corpora:\n    - name: synthetic\n      synthetic: {docs: 10}\n"
                         "run: {seed: 1}\nmodel: {arch: gpt2, d_model: 32, n_layers: 1, n_heads: 2}\n"
                         "data: {train_length: 32}\n");
    try {
      trainer::load_experiment(dir / "x.yaml", {});
      ADD_FAILURE() << method << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << method << ": " << e.what();
    }
  }
  test::make_store_stub(dir / "store");
  test::write_file(dir / "run.yaml", "data:\n  store: " + dir / "store" +
                                         "\n  sampler: {method: chunk, alpha: 1}\nmodel:\n  extension: {method: "
                                         "interpolate}\n");
  try {
    trainer::load_config(dir / "run.yaml", {});
    ADD_FAILURE() << "alpha: 1 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "run.yaml" + ":3:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

// The model's rules have one home too (models/spec/config_rules.h): a run config and
// the model's constructor refuse the same bad value with the same "key: message".
TEST(ModelRules, AConfigFileAndTheModelRefuseABadValueInTheSameWords) {
  test::TempDir dir;
  test::make_store_stub(dir / "store");
  test::write_file(dir / "run.yaml", "data:\n  store: " + dir / "store" + "\nmodel:\n  n_heads: 4\n");
  const std::vector<std::vector<std::string>> bad = {
      {"model.extension.method=ntk"},
      {"model.arch=gpt_neox", "model.rope.rotary_pct=0.3"},
      {"model.arch=llama", "model.n_kv_heads=3"},
      {"model.arch=bloom", "model.tie_embeddings=true"},
      {"model.arch=llama", "model.extension.method=llama3", "model.extension.factor=2",
       "model.extension.llama3.low_freq_factor=4", "model.extension.llama3.high_freq_factor=2"},
      {"model.arch=llama", "model.extension.method=longrope", "model.extension.factor=2",
       "model.extension.longrope.long_factor=[2, 2]", "model.extension.longrope.short_factor=[1, 1]"}};
  for (const auto& sets : bad) {
    const std::string what = sets.back();  // the value that breaks the rule
    std::string from_file, from_model;
    try {
      trainer::load_config(dir / "run.yaml", sets);
      ADD_FAILURE() << what << " accepted by the config";
    } catch (const InputError& e) {
      from_file = e.what();
    }
    auto loaded = trainer::parse_config_file(dir / "run.yaml");
    for (const auto& s : sets) trainer::apply_override(loaded, s);
    auto spec = loaded.config.model.spec;
    spec.vocab_size = 64, spec.max_positions = 128;
    try {
      models::TransformerLM model(spec);
      ADD_FAILURE() << what << " accepted by the model";
    } catch (const InputError& e) {
      from_model = e.what();
    }
    ASSERT_FALSE(from_model.empty()) << what;
    EXPECT_NE(from_file.find("--set " + what), std::string::npos) << from_file;  // where it was set
    EXPECT_NE(from_file.find(from_model), std::string::npos) << "config: " << from_file << "\nmodel: " << from_model;
  }
}

// A plan's chunk-ring row is chunk with placement ring; every other row, and the
// base, keeps the paper's uniform placement.
TEST(ExperimentPlan, ChunkRingRowsSetThePlacement) {
  test::TempDir dir;
  test::write_file(dir / "x.yaml",
                   "experiment:\n  name: r\n  output_dir: " + dir / "out" +
                       "\n  factors: [4]\n  methods: [da, chunk-0.25, chunk-ring-0.25, prefix-0.25]\n"
                       "  corpora:\n    - name: synthetic\n      synthetic: {docs: 10}\n"
                       "run: {seed: 1}\nmodel: {arch: gpt2, d_model: 32, n_layers: 1, n_heads: 2}\ndata: {train_length: 32}\n");
  const auto x = trainer::load_experiment(dir / "x.yaml", {});
  const auto runs = trainer::plan_training_runs(x, x.corpora.at(0));
  ASSERT_EQ(runs.size(), 5u);  // base + 4 rows
  for (const auto& r : runs) {
    const auto& sampler = r.config.config.data.sampler;
    const bool ring = r.method && r.method->name == "chunk-ring-0.25";
    EXPECT_EQ(sampler.placement, ring ? data::ChunkPlacement::ring : data::ChunkPlacement::uniform) << r.label;
    if (ring) {
      EXPECT_EQ(sampler.method, "chunk");
      EXPECT_EQ(sampler.alpha, 0.25);
      EXPECT_EQ(r.config.config.data.extended_length, 128);
    }
  }
}

// The ring section of results.md and the plots, from made-up curves whose
// figures are computed here independently.
// A 32k-position raw curve is drawn as each pixel column's lowest and highest
// point: the file stays small, the curve runs left to right, and its extremes
// (a spike, a dip) are still drawn.
TEST(ExperimentReport, ALongRawCurveIsDrawnAsItsColumnsExtremes) {
  std::vector<double> loss(32768);
  for (size_t i = 0; i < loss.size(); ++i) loss[i] = 2.0 + 0.5 * std::sin(static_cast<double>(i) * 0.37);
  loss[20000] = 2.45, loss[30000] = 1.55;  // inside the plotted range; their neighbours differ
  const auto series = trainer::position_curve("row", loss, trainer::position_bucket(32768));
  const std::string svg = trainer::line_plot_svg({}, {series});
  EXPECT_LT(svg.size(), 60000u) << "a raw curve of 32768 points was written point by point";
  const auto start = svg.find("stroke-opacity");  // the faint raw polyline
  ASSERT_NE(start, std::string::npos);
  const auto from = svg.find("points='", start) + 8, to = svg.find('\'', from);
  std::istringstream points(svg.substr(from, to - from));
  std::vector<std::pair<double, double>> xy;
  for (std::string p; points >> p;) xy.emplace_back(std::stod(p.substr(0, p.find(','))), std::stod(p.substr(p.find(',') + 1)));
  EXPECT_GE(xy.size(), 500u);
  EXPECT_LE(xy.size(), 2u * 558u);
  for (size_t i = 1; i < xy.size(); ++i) EXPECT_LE(xy[i - 1].first, xy[i].first) << i;
  // Every column keeps the sine's full swing: the envelope spans the same y range as the data.
  double lowest = 1e9, highest = -1e9;
  for (const auto& [x, y] : xy) lowest = std::min(lowest, y), highest = std::max(highest, y);
  EXPECT_GT(highest - lowest, 200.0) << "pixels between the envelope's lowest and highest point";
}

// The corpus a report test fills with rows: one factor, 4.
trainer::CorpusResults report_corpus(const std::string& name, const std::string& arch, int64_t train_length) {
  trainer::CorpusResults c;
  c.name = name;
  c.arch = arch;
  c.train_length = train_length;
  c.factors = {4};
  return c;
}

// The experiment a report test writes into `out` (name t, file t.yaml).
trainer::ExperimentConfig report_config(const fs::path& out) {
  trainer::ExperimentConfig x;
  x.name = "t";
  x.file = "t.yaml";
  x.output_dir = out;
  return x;
}

TEST(ExperimentReport, RingSectionComparesEndsAndPlotsReadAtAGlance) {
  test::TempDir dir;
  trainer::ExperimentConfig x = report_config(dir / "out");
  trainer::CorpusResults c = report_corpus("synthetic", "gpt2", 32);
  const int64_t le = 128;
  auto make_row = [&](const std::string& label, double level, double tail) {
    trainer::RowResult row;
    row.key = row.label = label;
    row.kind = "trained";
    row.factor = 4;
    row.lengths = {32, le};
    std::vector<double> curve(le - 1);
    for (int64_t i = 0; i < le - 1; ++i) curve[static_cast<size_t>(i)] = level + (i >= le - 14 ? tail : 0) + 0.01 * (i % 3);
    double sum = 0;
    for (double v : curve) sum += v;
    const double mean = sum / static_cast<double>(curve.size());
    row.results = {{32, level, std::exp(level), 4, 100, {}, {}}, {le, mean, std::exp(mean), 4, 508, curve, {}}};
    return row;
  };
  c.rows = {make_row("chunk-0.25", 1.0, 0.5), make_row("chunk-ring-0.25", 1.0, 0.1), make_row("full", 0.9, 0.0)};
  trainer::write_reports(x, {c});
  const std::string md = test::read_file(dir / "out/results.md");
  // Last 10% = the last ceil(127 / 10) = 13 positions of 127 (all in the raised tail of 14).
  auto mean_of = [&](const trainer::RowResult& row, size_t first, size_t last) {
    const auto& v = row.results.back().position_loss;
    double sum = 0;
    for (size_t i = first; i < last; ++i) sum += v[i];
    return sum / static_cast<double>(last - first);
  };
  std::ostringstream expected_last;
  expected_last << std::fixed << std::setprecision(4) << mean_of(c.rows[0], 127 - 13, 127) << " |";
  EXPECT_NE(md.find("| 4·L_t = 128 | chunk-0.25 |"), std::string::npos) << md;
  EXPECT_NE(md.find(expected_last.str()), std::string::npos) << expected_last.str() << "\n" << md;
  std::ostringstream diff;
  diff << std::showpos << std::fixed << std::setprecision(4)
       << mean_of(c.rows[1], 127 - 13, 127) - mean_of(c.rows[0], 127 - 13, 127);
  EXPECT_NE(md.find("- at 4·L_t = 128: chunk-ring-0.25 beats chunk-0.25 at L_e"), std::string::npos) << md;
  EXPECT_NE(md.find("its loss is " + diff.str() + " nats per token (better)"), std::string::npos) << diff.str() << "\n" << md;
  // The comparisons take the paper's uniform chunk row, not the ring one.
  EXPECT_NE(md.find("| chunk-0.25 vs full |"), std::string::npos) << md;
  EXPECT_EQ(md.find("| chunk-ring-0.25 vs "), std::string::npos) << md;
  EXPECT_NE(md.find("plots/synthetic-x4-ring.svg"), std::string::npos) << md;

  for (const char* name : {"synthetic-x4.svg", "synthetic-x4-ring.svg"}) {
    const std::string svg = test::read_file(fs::path(dir / "out/plots") / name);
    auto count = [&](const std::string& what) {
      size_t n = 0;
      for (size_t at = svg.find(what); at != std::string::npos; at = svg.find(what, at + 1)) ++n;
      return n;
    };
    const size_t series = std::string(name).find("ring") != std::string::npos ? 2 : 3;
    EXPECT_EQ(count("stroke-opacity="), series) << name << ": one faint raw curve per row";
    EXPECT_EQ(count("<polyline"), 2 * series) << name << ": and one solid curve on top";
    EXPECT_NE(svg.find(">L_t = 32</text>"), std::string::npos) << name;
    EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos) << name << ": L_t as a dashed vertical line";
    EXPECT_NE(svg.find(">chunk-ring-0.25</text>"), std::string::npos) << name << ": legend";
    EXPECT_NE(svg.find(">mean loss (nats)</text>"), std::string::npos) << name;
    EXPECT_NE(svg.find(">position (tokens of context before the predicted token)</text>"), std::string::npos) << name;
    EXPECT_GE(count("stroke='#e3e3e3'"), 8u) << name << ": gridlines";
    EXPECT_NE(svg.find(">100</text>"), std::string::npos) << name << ": x ticks";
  }
}

// The report's intervals on rows whose differences are known: chunk is DA shifted
// 0.3 nats lower at 8192 only, full equals chunk, the OOTB row is far worse; each
// window has its own difficulty, shared by every row (what a paired comparison cancels).
TEST(ExperimentReport, ComparisonsStateOnlyWhatTheirIntervalsFindAndTheBudgetCurveIsTabled) {
  test::TempDir dir;
  trainer::ExperimentConfig x = report_config(dir / "out");
  x.eval_lengths = {2048, 8192};
  trainer::CorpusResults c = report_corpus("code", "llama", 2048);
  // Each block's loss per token: the window's difficulty, a wobble by block, and the row's shift at L.
  // only_doc >= 0: the shift in that window (document) alone.
  auto length_result = [](int64_t length, double level, double shift_at_8192, int64_t only_doc = -1) {
    trainer::LengthResult r;
    r.length = length;
    const int64_t predictions = length - 1;
    double total = 0;
    for (int64_t doc = 0; doc < 4; ++doc) {
      trainer::WindowLoss w{doc, 0, {}};
      for (int64_t first = 0, b = 0; first < predictions; first += trainer::kLossBlock, ++b) {
        const int64_t n = std::min(trainer::kLossBlock, predictions - first);
        const bool shifted = length == 8192 && (only_doc < 0 || doc == only_doc);
        const double per_token = level + 0.2 * static_cast<double>(doc) + 0.1 * std::sin(static_cast<double>(b)) +
                                 (shifted ? shift_at_8192 : 0.0);
        w.block_nll.push_back(per_token * static_cast<double>(n));
        total += per_token * static_cast<double>(n);
      }
      r.windows.push_back(w);
    }
    r.sequences = 4;
    r.tokens = 4 * predictions;
    r.loss = total / static_cast<double>(r.tokens);
    r.ppl = std::exp(r.loss);
    return r;
  };
  auto make_row = [&](const std::string& label, const std::string& kind, double level, double shift,
                      int64_t tokens, int64_t budget, int64_t only_doc = -1) {
    trainer::RowResult row;
    row.key = row.label = label;
    row.kind = kind;
    row.factor = 4;
    row.lengths = {2048, 8192};
    row.train_tokens = tokens;
    row.budget = budget;
    row.results = {length_result(2048, level, shift, only_doc), length_result(8192, level, shift, only_doc)};
    return row;
  };
  c.rows = {make_row("OOTB", "ootb", 2.0, 0.0, 0, 0),           make_row("DA", "trained", 1.0, 0.0, 65536, 0),
            make_row("chunk-0.25", "trained", 1.0, -0.3, 65536, 0), make_row("full", "trained", 1.0, -0.3, 65536, 0),
            make_row("chunk-0.25@1048576", "trained", 1.0, -0.6, 1048576, 1048576),
            make_row("chunk-0.25@262144", "trained", 1.0, -0.5, 262144, 262144),
            make_row("pose", "trained", 1.0, -0.3, 65536, 0, /*only_doc=*/0),
            make_row("chunk-0.25@262144+lora", "trained", 1.0, -0.3, 262144, 262144)};
  c.rows.back().variant_of = "chunk-0.25@262144";
  c.rows[2].tasks["passkey"] = {{{16384, 3, 3, "", {}}}, "{}", 1.0};
  trainer::write_reports(x, {c});
  const std::string md = test::read_file(dir / "out/results.md");
  // chunk vs DA: 0.3 nats lower at 8192 in every block, the same at 2048.
  const double ratio = std::exp(-0.3) - 1;
  std::ostringstream lower;
  lower << "- chunk-0.25 vs DA: lower perplexity at 8192 (" << std::showpos << std::fixed << std::setprecision(1)
        << 100 * ratio << "% [" << 100 * ratio << "%, " << 100 * ratio
        << "%], 4 of 4 windows lower); no difference found at 2048.";
  EXPECT_NE(md.find(lower.str()), std::string::npos) << lower.str() << "\n" << md;
  EXPECT_NE(md.find("- chunk-0.25 vs full: no difference found at 2048, 8192."), std::string::npos) << md;
  // chunk vs a row as good in one window and 0.3 nats worse in the 3 others: 3 of 4 windows lower,
  // which 4 documents do not make a finding (the interval alone would: a resample rarely draws
  // window 0 four times).
  EXPECT_NE(md.find("- chunk-0.25 vs pose: no difference found at 2048, 8192."), std::string::npos) << md;
  EXPECT_NE(md.find("3 of 4 windows lower)"), std::string::npos) << md;
  // More budget, paired against the method's smallest: 0.2 nats lower at 8192 for 262,144, 0.3 for 1,048,576.
  std::ostringstream more;
  more << "- chunk-0.25 at 262,144 vs 65,536 tokens: lower perplexity at 8192 (" << std::showpos << std::fixed
       << std::setprecision(1) << 100 * (std::exp(-0.2) - 1) << "% [";
  EXPECT_NE(md.find(more.str()), std::string::npos) << more.str() << "\n" << md;
  EXPECT_NE(md.find("%], 4 of 4 windows lower); no difference found at 2048.\n- chunk-0.25 at 1,048,576 vs 65,536 tokens: "
                    "lower perplexity at 8192 ("),
            std::string::npos) << md;
  EXPECT_NE(md.find("- DA vs the best untrained row: lower perplexity at 2048"), std::string::npos) << md;
  EXPECT_NE(md.find("Every row is scored on the same 4 windows of 8192 tokens, each from another held-out "
                    "document (documents 0, 1, 2, 3"),
            std::string::npos) << md;
  // Each row's perplexity with its interval; the curve's points only in the budget table, by tokens.
  const size_t main_table = md.find("| method | 2048 | 8192 |");
  const size_t curve_table = md.find("| method | training tokens | 2048 | 8192 |");
  ASSERT_NE(main_table, std::string::npos) << md;
  ASSERT_NE(curve_table, std::string::npos) << md;
  EXPECT_EQ(md.substr(main_table, curve_table - main_table).find("@"), std::string::npos) << md;
  EXPECT_EQ(md.find("Perplexity at L_e, for models extended to L_e"), std::string::npos) << md;  // the length table has it
  const size_t t65 = md.find("| chunk-0.25 | 65,536 |"), t262 = md.find("| chunk-0.25 | 262,144 |"),
               t1m = md.find("| chunk-0.25 | 1,048,576 |");
  EXPECT_TRUE(t65 != std::string::npos && t65 < t262 && t262 < t1m && t1m != std::string::npos) << md;
  EXPECT_NE(md.find("| 3/3 [0.44, 1.00] |"), std::string::npos) << md;
  std::ostringstream ootb;  // the row's own perplexity at 2048 (above 10: two decimals), then its interval
  ootb << "| OOTB | " << std::fixed << std::setprecision(2) << c.rows[0].results[0].ppl << " [";
  EXPECT_NE(md.find(ootb.str()), std::string::npos) << ootb.str() << "\n" << md;
  // A variant: beside its row, and against it (0.2 nats higher at 8192), in neither the main table nor the curve.
  const size_t variants = md.find("Variants (experiment.variants)");
  ASSERT_NE(variants, std::string::npos) << md;
  EXPECT_EQ(md.substr(0, variants).find("+lora"), std::string::npos) << md;
  EXPECT_NE(md.find("| chunk-0.25@262144 | 262,144 |", variants), std::string::npos) << md;
  EXPECT_NE(md.find("| chunk-0.25@262144+lora | 262,144 |", variants), std::string::npos) << md;
  std::ostringstream variant;
  variant << "- chunk-0.25@262144+lora vs chunk-0.25@262144: higher perplexity at 8192 (" << std::showpos << std::fixed
          << std::setprecision(1) << 100 * (std::exp(0.2) - 1) << "% [";
  EXPECT_NE(md.find(variant.str(), variants), std::string::npos) << variant.str() << "\n" << md;
  EXPECT_NE(md.find("4 of 4 windows higher); no difference found at 2048.", variants), std::string::npos) << md;
  const std::string budget_svg = test::read_file(dir / "out/plots/code-x4-budget.svg");
  EXPECT_NE(budget_svg.find(">band: 95% interval</text>"), std::string::npos);
  EXPECT_NE(budget_svg.find(">1,048,576</text>"), std::string::npos);
  EXPECT_NE(test::read_file(dir / "out/plots/code-x4.svg").find("<polygon"), std::string::npos);  // the band over windows
}

// Robustness beside each finding: with 8 documents, chunk-0.25's gain over DA that one document
// carries (0.9 nats there, small and mixed in the 7 others) is found but marked fragile, naming
// document 0; its gain over full, about the same in all 8, is found and not marked.
TEST(ExperimentReport, AFindingOneDocumentCarriesIsMarkedFragileAndOneEveryDocumentCarriesIsNot) {
  test::TempDir dir;
  trainer::ExperimentConfig x = report_config(dir / "out");
  x.eval_lengths = {2048, 8192};
  trainer::CorpusResults c = report_corpus("code", "llama", 2048);
  // Each document's loss per token at 8192 is `level - gain[doc]`; at 2048 the rows are equal.
  auto make_row = [](const std::string& label, const std::string& kind, const std::vector<double>& gain) {
    trainer::RowResult row;
    row.key = row.label = label;
    row.kind = kind;
    row.factor = 4;
    row.lengths = {2048, 8192};
    row.train_tokens = 65536;
    for (const int64_t length : {2048, 8192}) {
      trainer::LengthResult r;
      r.length = length;
      const int64_t predictions = length - 1;
      double total = 0;
      for (int64_t doc = 0; doc < 8; ++doc) {
        trainer::WindowLoss w{doc, 0, {}};
        for (int64_t first = 0, b = 0; first < predictions; first += trainer::kLossBlock, ++b) {
          const int64_t n = std::min(trainer::kLossBlock, predictions - first);
          const double per_token = 2.0 + 0.1 * static_cast<double>(doc) + 0.1 * std::sin(static_cast<double>(b)) -
                                   (length == 8192 ? gain[static_cast<size_t>(doc)] : 0.0);
          w.block_nll.push_back(per_token * static_cast<double>(n));
          total += per_token * static_cast<double>(n);
        }
        r.windows.push_back(w);
      }
      r.sequences = 8;
      r.tokens = 8 * predictions;
      r.loss = total / static_cast<double>(r.tokens);
      r.ppl = std::exp(r.loss);
      row.results.push_back(r);
    }
    return row;
  };
  const std::vector<double> none(8, 0.0);
  const std::vector<double> chunk_gain = {0.9, 0.030, -0.015, 0.027, 0.012, -0.012, 0.021, 0.012};
  // full: chunk's gain less one of about 0.05 in every document.
  std::vector<double> below_chunk(8);
  const std::vector<double> robust = {0.05, 0.04, 0.06, 0.05, 0.045, 0.055, 0.05, 0.05};
  for (size_t d = 0; d < 8; ++d) below_chunk[d] = chunk_gain[d] - robust[d];
  c.rows = {make_row("OOTB", "ootb", none), make_row("DA", "trained", none),
            make_row("chunk-0.25", "trained", chunk_gain), make_row("full", "trained", below_chunk)};
  trainer::write_reports(x, {c});
  const std::string md = test::read_file(dir / "out/results.md");
  const size_t vs_da = md.find("- chunk-0.25 vs DA: lower perplexity at 8192 (");
  ASSERT_NE(vs_da, std::string::npos) << md;
  const std::string da_line = md.substr(vs_da, md.find('\n', vs_da) - vs_da);
  EXPECT_NE(da_line.find("; fragile: not found without document"), std::string::npos) << da_line;
  EXPECT_NE(da_line.find(" 0"), std::string::npos) << da_line;
  const size_t vs_full = md.find("- chunk-0.25 vs full: lower perplexity at 8192 (");
  ASSERT_NE(vs_full, std::string::npos) << md;
  const std::string full_line = md.substr(vs_full, md.find('\n', vs_full) - vs_full);
  EXPECT_EQ(full_line.find("fragile"), std::string::npos) << full_line;
  EXPECT_NE(full_line.find("8 of 8 windows lower)"), std::string::npos) << full_line;
  // The table marks the one and not the other; the method text says what the mark means.
  EXPECT_NE(md.find("| chunk-0.25 vs DA |"), std::string::npos) << md;
  const size_t da_row = md.find("| chunk-0.25 vs DA |");
  EXPECT_NE(md.substr(da_row, md.find('\n', da_row) - da_row).find("*fragile*"), std::string::npos) << md;
  const size_t full_row = md.find("| chunk-0.25 vs full |");
  ASSERT_NE(full_row, std::string::npos) << md;
  EXPECT_EQ(md.substr(full_row, md.find('\n', full_row) - full_row).find("fragile"), std::string::npos) << md;
  EXPECT_NE(md.find("*fragile*: found, but leaving one document out"), std::string::npos) << md;
}

// What each row cost: its training and each evaluation task, summed per row and
// for the corpus; a trained row that recorded no training time says so.
TEST(ExperimentReport, TheCostTableAddsEachRowsTrainingAndEvaluation) {
  test::TempDir dir;
  trainer::ExperimentConfig x = report_config(dir / "out");
  trainer::CorpusResults c = report_corpus("code", "llama", 2048);
  auto make_row = [](const std::string& label, const std::string& kind, double train, double eval) {
    trainer::RowResult row;
    row.key = row.label = label;
    row.kind = kind;
    row.factor = 4;
    row.lengths = {2048, 8192};
    row.train_seconds = train;
    row.eval_seconds = eval;
    return row;
  };
  c.rows = {make_row("OOTB", "ootb", 0, 100), make_row("DA", "trained", 320, 1300),
            make_row("old", "trained", 0, 60)};
  c.rows[0].tasks["passkey"] = {{}, "{}", 30};
  trainer::write_reports(x, {c});
  const std::string md = test::read_file(dir / "out/results.md");
  EXPECT_NE(md.find("| row | training | perplexity | passkey | total |"), std::string::npos) << md;
  EXPECT_NE(md.find("| OOTB |  | 1 min 40 s | 30 s | 2 min 10 s |"), std::string::npos) << md;
  EXPECT_NE(md.find("| DA | 5 min 20 s | 21 min 40 s |  | 27 min 0 s |"), std::string::npos) << md;
  EXPECT_NE(md.find("| old | - | 1 min 0 s |  | 1 min 0 s |"), std::string::npos) << md;
  // 130 + 1620 + 60 seconds.
  EXPECT_NE(md.find("Together: 30 min 10 s, without the 1 figure marked -.\n\n"), std::string::npos) << md;
  EXPECT_EQ(json::parse(test::read_file(dir / "out/results.json"))["corpora"][0]["rows"][1]["train_seconds"], 320.0);
  // With several factors each label is a row at each: the factor tells them apart.
  c.factors = {4, 8};
  c.rows.push_back(make_row("DA", "trained", 0, 60));
  c.rows.back().factor = 8;
  trainer::write_reports(x, {c});
  const std::string two = test::read_file(dir / "out/results.md");
  EXPECT_NE(two.find("| DA (4·L_t) | 5 min 20 s | 21 min 40 s |"), std::string::npos) << two;
  EXPECT_NE(two.find("| DA (8·L_t) | - | 1 min 0 s |"), std::string::npos) << two;
}

TEST(ExperimentReport, RowRecordsRoundTripAndMissingLengthsStayMissing) {
  trainer::RowResult row;
  row.key = "chunk-0.25";
  row.label = "chunk-0.25";
  row.kind = "trained";
  row.factor = 4;
  row.lengths = {128, 512};
  row.evaluated_with = R"({"model":"m"})";
  trainer::LengthResult at_lt{128, 1.5, std::exp(1.5), 3, 381, {}, {}};
  trainer::LengthResult at_le{512, NAN, NAN, 0, 0, {2.0, NAN, 1.0}, {}};  // no validation document is 512 long
  at_lt.windows = {{2, 64, {100.25, 27.5}}};
  row.budget = 262144;
  row.variant_of = "chunk-0.25@262144";
  row.train_seconds = 321.5;
  row.results = {at_lt, at_le};
  const auto back = trainer::row_from_json(trainer::row_to_json(row), "row.json");
  EXPECT_EQ(back.budget, 262144);
  EXPECT_EQ(back.variant_of, "chunk-0.25@262144");
  EXPECT_EQ(trainer::row_from_json(R"({"key": "a", "label": "a", "kind": "trained", "factor": 2, "lengths": [8],
                                       "model": "m", "train_tokens": 1, "results": []})",
                                   "row.json")
                .variant_of,
            "");  // a record from before variants: a method's own row
  EXPECT_DOUBLE_EQ(back.train_seconds, 321.5);
  ASSERT_EQ(back.results[0].windows.size(), 1u);
  EXPECT_EQ(back.results[0].windows[0].doc, 2);
  EXPECT_EQ(back.results[0].windows[0].start, 64);
  EXPECT_EQ(back.results[0].windows[0].block_nll, (std::vector<double>{100.25, 27.5}));
  EXPECT_EQ(back.key, row.key);
  EXPECT_EQ(back.evaluated_with, row.evaluated_with);
  ASSERT_EQ(back.results.size(), 2u);
  EXPECT_DOUBLE_EQ(back.results[0].ppl, std::exp(1.5));
  EXPECT_TRUE(std::isnan(back.results[1].ppl));  // "no data", not an infinite perplexity
  ASSERT_EQ(back.results[1].position_loss.size(), 3u);
  EXPECT_TRUE(std::isnan(back.results[1].position_loss[1]));
  // A damaged record is never taken for a finished row.
  EXPECT_NE(trainer::row_from_json("{\"key\": ", "row.json").evaluated_with, row.evaluated_with);
}


// A grid's row records from before eval.tasks (session 13's smollm2-noscale rows, as
// written then) keep their figures: the passkey part is read as the passkey task's, and
// the tasks' settings are the keys those records hold, so no finished row is scored again.
TEST(ExperimentReport, RecordsFromBeforeEvalTasksAreReusedAsTheTasksFigures) {
  const std::string files = "model.safetensors:538086080:-4642021601564424260;";
  const std::string old = R"({"key": "da", "label": "DA", "kind": "trained", "factor": 16, "lengths": [2048, 32768],
    "model": "runs/x/da/final", "train_tokens": 65536, "eval_seconds": 1316.5, "results": [],
    "evaluated_with": {"lengths": [2048, 32768], "max_sequences": 4, "model": "runs/x/da/final",
                       "model_files": ")" + files + R"(", "overrides": [], "per_window": 128,
                       "prefixes_of_longest": true, "split": "valid", "stride": 0, "windows_per_document": 1},
    "passkey": [{"accuracy": 1.0, "correct": 3, "length": 4096, "trials": 3},
                {"accuracy": 0.0, "correct": 0, "length": 16384, "trials": 3}],
    "passkey_with": {"lengths": [4096, 16384], "model": "runs/x/da/final", "model_files": ")" + files + R"(",
                     "overrides": [], "seed": 1234, "style": "digits", "trials": 3},
    "passkey_seconds": 285.08})";
  const trainer::RowResult row = trainer::row_from_json(old, "row.json");
  ASSERT_EQ(row.tasks.count("passkey"), 1u);
  const auto& passkey = row.tasks.at("passkey");
  ASSERT_EQ(passkey.scores.size(), 2u);
  EXPECT_EQ(passkey.scores[0].length, 4096);
  EXPECT_EQ(passkey.scores[0].correct, 3.0);
  EXPECT_EQ(passkey.scores[1].correct, 0.0);
  EXPECT_DOUBLE_EQ(passkey.seconds, 285.08);

  // What the grid records for each task today: the task's settings plus the model's.
  auto with = [&](const trainer::EvalTask& task) {
    nlohmann::json j = task.settings();
    j["model"] = "runs/x/da/final";
    j["model_files"] = files;
    j["overrides"] = nlohmann::json::array();
    return j.dump();
  };
  trainer::TaskSetup setup;
  setup.options = {{4096, 16384}, 3, "digits"};
  setup.seed = trainer::kEvalPromptSeed;
  setup.perplexity.lengths = {2048, 32768};
  setup.perplexity.max_sequences = 4;
  setup.perplexity.windows_per_document = 1;
  setup.perplexity.per_window = true;
  setup.perplexity.window_length = 32768;
  setup.split = "valid";
  EXPECT_EQ(with(*trainer::make_passkey_task(setup)), passkey.with);
  EXPECT_EQ(with(*trainer::make_perplexity_task(setup)), row.evaluated_with);
  setup.options.trials = 4;  // another setting: another record
  EXPECT_NE(with(*trainer::make_passkey_task(setup)), passkey.with);

  // Today's records read back as written.
  const trainer::RowResult again = trainer::row_from_json(trainer::row_to_json(row), "row.json");
  ASSERT_EQ(again.tasks.count("passkey"), 1u);
  EXPECT_EQ(again.tasks.at("passkey").with, passkey.with);
  EXPECT_EQ(again.tasks.at("passkey").scores[1].length, 16384);
  EXPECT_EQ(again.evaluated_with, row.evaluated_with);
}

}  // namespace
}  // namespace segtrain
