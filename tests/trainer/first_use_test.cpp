// What a new user hits first (issue 33), through the binary on a small generated
// corpus: no command writes over what it did not write, every output path is
// checked before any work, messages say what to do, a run shows progress from its
// first step and ends with a summary, and final/ holds the model alone.
#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <regex>
#include <sstream>
#include <thread>

#include "test_util.h"

namespace segtrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::kBin;
using test::run;

class FirstUse : public test::SyntheticStoreSuite {
 protected:
  // A 4-step run's config (512 tokens of 4 x 32), step checkpoints every 2 steps,
  // logging every `log_every`; `more_train_keys` are added to train:.
  static std::string four_step_config(const std::string& name, const std::string& more_train_keys = "",
                                      const std::string& log_every = "1") {
    const std::string path = tiny_run_config(name, {.train_keys = ", budget: {tokens: 512}" + more_train_keys});
    std::string text = test::read_file(path);
    text = std::regex_replace(text, std::regex("checkpoint_every: 0"), "checkpoint_every: 2");
    text = std::regex_replace(text, std::regex("log_every: 1,"), "log_every: " + log_every + ",");
    test::write_file(path, text);
    return path;
  }
  // That run, trained.
  static std::string trained_run(const std::string& name, const std::string& more_train_keys = "") {
    auto r = run(kBin, {"train", four_step_config(name, more_train_keys)});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return run_dir(name);
  }
  // A folder holding a file of the user's.
  static fs::path folder_with_notes(const std::string& name) {
    const fs::path folder = dir_->path() / name;
    fs::create_directories(folder);
    test::write_file(folder / "notes.txt", "keep");
    return folder;
  }
  static void expect_refused(const test::RunResult& r, const std::string& needle, const std::string& what) {
    EXPECT_EQ(r.exit_code, 2) << what << ": " << r.err;
    EXPECT_FALSE(r.signaled) << what;
    EXPECT_NE(r.err.find(needle), std::string::npos) << what << ": " << r.err;
  }
};

// Old main: synth and prepare wrote into any folder, train wrote config.yaml,
// metrics.jsonl and train.log beside the user's files.
TEST_F(FirstUse, NoCommandFillsAFolderHoldingFilesItDidNotWrite) {
  const fs::path synth_out = folder_with_notes("synth_out");
  expect_refused(run(kBin, {"synth", "--out", synth_out, "--docs", "4"}), "notes.txt", "synth into a used folder");
  EXPECT_FALSE(fs::exists(synth_out / "train.jsonl"));

  const fs::path store_out = folder_with_notes("store_out");
  expect_refused(run(kBin, {"prepare", "--input", *dir_ / "corpus/train.jsonl", "--out", store_out, "--vocab-size",
                            "160"}),
                 "notes.txt", "prepare into a used folder");
  EXPECT_FALSE(fs::exists(store_out / "meta.json"));

  const fs::path run_out = folder_with_notes("run_out");
  const std::string config = tiny_run_config("used_run_dir", {.train_keys = ", budget: {tokens: 128}"});
  expect_refused(run(kBin, {"train", config, "--set", "run.output_dir=" + run_out.string()}), "notes.txt",
                 "train into a used folder");
  EXPECT_FALSE(fs::exists(run_out / "config.yaml"));
  EXPECT_FALSE(fs::exists(run_out / ".segtrain.lock"));

  // A file is never replaced by a folder.
  const fs::path file = dir_->path() / "a_file.yaml";
  test::write_file(file, "keep");
  expect_refused(run(kBin, {"synth", "--out", file, "--docs", "4"}), "is a file", "synth over a file");
  for (const fs::path& kept : {synth_out / "notes.txt", store_out / "notes.txt", run_out / "notes.txt", file})
    EXPECT_EQ(test::read_file(kept), "keep") << kept;

  // Their own earlier output is theirs: a corpus and a store are replaced.
  const fs::path corpus = dir_->path() / "again";
  ASSERT_EQ(run(kBin, {"synth", "--out", corpus, "--docs", "4"}).exit_code, 0);
  auto again = run(kBin, {"synth", "--out", corpus, "--docs", "6"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

// Old main: eval spent the whole evaluation, then failed with exit 1.
TEST_F(FirstUse, OutputPathsAreCheckedBeforeAnyWork) {
  const std::string model = trained_run("for_outputs");
  const std::vector<std::string> eval = {"eval", "--model", model, "--data", *dir_ / "store", "--lengths", "32"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = eval;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  expect_refused(run(kBin, with({"--out", *dir_ / "missing/dir/e.json"})), "does not exist", "eval into no folder");
  expect_refused(run(kBin, with({"--out", dir_->path().string()})), "is a folder", "eval onto a folder");
  expect_refused(run(kBin, with({"--out", *dir_ / "e.json", "--per-position", *dir_ / "missing/p.csv"})),
                 "--per-position", "per-position into no folder");
  EXPECT_FALSE(fs::exists(dir_->path() / "e.json"));
  const std::string sample_config = tiny_run_config("sampled");
  expect_refused(run(kBin, {"sample", sample_config, "--out", *dir_ / "missing/s.jsonl"}), "does not exist",
                 "sample into no folder");

  // What works: eval says where it wrote; --threads and --set run.threads are taken.
  auto ok = run(kBin, with({"--out", *dir_ / "e.json", "--threads", "1"}));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.err.find("wrote " + (*dir_ / "e.json")), std::string::npos) << ok.err;
  auto threads = run(kBin, with({"--out", *dir_ / "e2.json", "--set", "run.threads=1"}));
  EXPECT_EQ(threads.exit_code, 0) << threads.err;
  expect_refused(run(kBin, with({"--out", *dir_ / "e3.json", "--set", "run.threads=x"})),
                 "--set run.threads: expected an integer", "a bad thread count");
}

// Old main: "Value abc not in range 0.000000 to 179769313486231570...".
TEST_F(FirstUse, NumericFlagsAnswerLikeTheConfig) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--lengths", "64,abc"}, "--lengths: expected an integer >= 1, got 'abc'"},
      {{"--lengths", "0"}, "--lengths: expected an integer >= 1, got '0'"},
      {{"--lengths", "64", "--max-sequences", "-1"}, "--max-sequences: expected an integer >= 0, got '-1'"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"eval", "--model", "m", "--data", "d", "--out", "o.json"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto r = run(kBin, args);
    expect_refused(r, message, message);
    EXPECT_EQ(r.err.find("17976931348623157"), std::string::npos) << r.err;
  }
  expect_refused(run(kBin, {"prepare", "--input", "x", "--out", "y", "--valid-fraction", "2"}),
                 "--valid-fraction: expected a number in [0, 0.9], got '2'", "a fraction out of range");
  // --help states the defaults: eval's max-sequences is a run's (64), prepare's vocabulary 4096
  // for a trained tokenizer (a Megatron input's own otherwise).
  auto eval_help = run(kBin, {"eval", "--help"});
  EXPECT_NE(eval_help.out.find("--max-sequences INT=64"), std::string::npos) << eval_help.out;
  EXPECT_NE(eval_help.out.find("--threads"), std::string::npos) << eval_help.out;
  auto prepare_help = run(kBin, {"prepare", "--help"});
  EXPECT_NE(prepare_help.out.find("Vocabulary of a newly trained tokenizer (default 4096)"), std::string::npos)
      << prepare_help.out;
}

// Old main: "unknown key 'experiment'", "illegal map value", "not a model directory".
TEST_F(FirstUse, MessagesNameWhatToDo) {
  const fs::path experiment = dir_->path() / "grid.yaml";
  test::write_file(experiment, "experiment:\n  name: g\n");
  for (const std::string command : {"train", "config"}) {
    std::vector<std::string> args = command == "config" ? std::vector<std::string>{"config", "check", experiment}
                                                        : std::vector<std::string>{"train", experiment};
    expect_refused(run(kBin, args), "segtrain experiment FILE", command + " on an experiment file");
  }
  const fs::path tabbed = dir_->path() / "tabbed.yaml";
  test::write_file(tabbed, "data:\n  store: " + (*dir_ / "store") + "\ntrain:\n\tlr: 1.0e-3\n");
  expect_refused(run(kBin, {"config", "check", tabbed}), "tabbed.yaml:4: indented with a tab", "a tab");

  // A run that stopped before final/: eval names its newest checkpoint.
  const std::string model = trained_run("no_final");
  fs::remove_all(fs::path(model) / "final");
  auto r = run(kBin, {"eval", "--model", model, "--data", *dir_ / "store", "--lengths", "32", "--out",
                      *dir_ / "nf.json"});
  expect_refused(r, "is a run without final/", "eval of a run without final/");
  EXPECT_NE(r.err.find(model + "/checkpoints/step-2"), std::string::npos) << r.err;

  // docs/models.md's TinyLlama example: lr 2e-5 with min_lr left at auto (lr / 10).
  const std::string low_lr = tiny_run_config("low_lr", {.train_keys = ", lr: 2.0e-5, min_lr: auto"});
  test::write_file(low_lr, [&] {
    std::string text = test::read_file(low_lr);
    return text.replace(text.find("lr: 3.0e-3, "), 12, "");
  }());
  auto checked = run(kBin, {"config", "check", low_lr});
  EXPECT_EQ(checked.exit_code, 0) << checked.err;

  // An HF tokenizer's file given for its folder (old main: sentencepiece's ParseFromArray error).
  test::write_file(*dir_ / "hf-tok/tokenizer.json", "{}\n");
  expect_refused(run(kBin, {"prepare", "--input", *dir_ / "corpus/train.jsonl", "--out", *dir_ / "tok-store",
                            "--tokenizer", *dir_ / "hf-tok/tokenizer.json"}),
                 "is read from its folder (tokenizer.json with the files beside it): give --tokenizer " +
                     (*dir_ / "hf-tok"),
                 "a tokenizer.json for its folder");
}

// Old main: 1,439 pieces for --vocab-size 60000 without a word; a non-UTF-8 file
// counted, not named; an empty validation split, then `ppl nan` at the end of a run.
TEST_F(FirstUse, PrepareNamesWhatItSkipsAndWarnsWhatWillNotWork) {
  const fs::path texts = dir_->path() / "texts";
  fs::create_directories(texts);
  std::string words;
  for (int i = 0; i < 400; ++i) words += "word" + std::to_string(i % 37) + (i % 11 == 0 ? ".\n" : " ");
  for (int i = 0; i < 3; ++i) test::write_file(texts / ("good" + std::to_string(i) + ".txt"), words);
  test::write_file(texts / "latin1.txt", "caf\xe9 cr\xe8me\n");
  auto r = run(kBin, {"prepare", "--input", texts, "--out", *dir_ / "small_store", "--vocab-size", "60000",
                      "--valid-fraction", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("latin1.txt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--vocab-size 60000 asked"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the validation split is empty"), std::string::npos) << r.err;

  const std::string model = trained_run("for_empty_split");
  expect_refused(run(kBin, {"eval", "--model", model, "--data", *dir_ / "small_store", "--lengths", "32", "--out",
                            *dir_ / "empty.json", "--allow-tokenizer-mismatch"}),
                 "holds no documents", "eval on an empty split");
  const std::string config = tiny_run_config("on_empty_split");
  expect_refused(run(kBin, {"train", config, "--set", "data.store=" + (*dir_ / "small_store")}), "eval.split",
                 "train evaluating an empty split");
}

// Old main: the first line after log_every steps, no summary, and 2/3 of final/
// was AdamW's state.
TEST_F(FirstUse, ARunShowsProgressAtOnceEndsWithASummaryAndKeepsFinalSmall) {
  const std::string config = four_step_config("summary", "", "100");
  auto r = run(kBin, {"train", config});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("step 1/4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("done in "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(run_dir("summary") + "/eval.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("next: segtrain export --model " + run_dir("summary")), std::string::npos) << r.err;
  const fs::path run_path = run_dir("summary");
  EXPECT_TRUE(fs::exists(run_path / "final/model.safetensors"));
  EXPECT_FALSE(fs::exists(run_path / "final/optimizer.index.json"));
  EXPECT_FALSE(fs::exists(run_path / "final/optimizer-00000-of-00001.safetensors"));
  EXPECT_TRUE(fs::exists(run_path / "checkpoints/step-2/optimizer.index.json"));
  EXPECT_TRUE(fs::exists(run_path / "checkpoints/step-2/optimizer-00000-of-00001.safetensors"));

  // A finished run resumed (a launcher restart after the last step) needs no optimizer state.
  auto again = run(kBin, {"train", config, "--resume"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(json::parse(test::read_file(run_path / "final/trainer_state.json"))["step"], 4);
  // train.final_optimizer_state keeps it for those who train on from final/.
  const std::string kept = trained_run("kept_state", ", final_optimizer_state: true");
  EXPECT_TRUE(fs::exists(fs::path(kept) / "final/optimizer.index.json"));
}

// What a user waits for is said (issue 47): the plan names the final evaluation's lengths, windows
// and tokens; an evaluation reports its windows and the time left, generation its new tokens, as
// they go (every SEGTRAIN_PROGRESS_SECONDS: 0 here, 10 s by default). Old main: nothing until done.
TEST_F(FirstUse, LongPhasesTellTheirProgress) {
  auto trained = run("env", {"SEGTRAIN_PROGRESS_SECONDS=0", kBin, "train", four_step_config("told")});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  std::smatch plan;
  ASSERT_TRUE(std::regex_search(trained.err, plan,
                                std::regex("final evaluation: perplexity at L = 32 \\((\\d+) windows\\): (\\d+) tokens "
                                           "through the model \\(([0-9.]+)% of the training's")))
      << trained.err;
  EXPECT_EQ(std::stoi(plan[1]), 4) << "eval.max_sequences 4";
  EXPECT_EQ(std::stoi(plan[2]), 4 * 32);
  EXPECT_NEAR(std::stod(plan[3]), 100.0 * 128 / 512, 0.05) << "128 of the 512 tokens trained";
  EXPECT_NE(trained.err.find("eval: perplexity at L = 32: 4 windows in "), std::string::npos) << trained.err;
  // The tiny config's warm-up (5 steps) on 4 steps: the lr never reaches train.lr, said at once.
  EXPECT_NE(trained.err.find("train.warmup_steps 5 is over a quarter of this run's 4 steps: the lr never reaches "
                             "train.lr (its last step takes 80.0% of it)"),
            std::string::npos) << trained.err;

  auto evaluated = run("env", {"SEGTRAIN_PROGRESS_SECONDS=0", kBin, "eval", "--model", run_dir("told"), "--data",
                               *dir_ / "store", "--lengths", "32,64", "--max-sequences", "6", "--out",
                               *dir_ / "told-eval.json"});
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.err;
  // Batches of 4 windows (eval.batch_size): a line after each, with the time left until the last.
  for (const char* line : {"eval: perplexity at L = 32: 4/6 windows (67%) in ", "eval: perplexity at L = 32: 6 windows in",
                           "eval: perplexity at L = 64: 4/6 windows (67%) in ", " left"})
    EXPECT_NE(evaluated.err.find(line), std::string::npos) << line << "\n" << evaluated.err;

  auto generated = run("env", {"SEGTRAIN_PROGRESS_SECONDS=0", kBin, "generate", "--model", run_dir("told"),
                               "--prompt-ids", "1,2,3", "--max-new-tokens", "4", "--ignore-eos"});
  ASSERT_EQ(generated.exit_code, 0) << generated.err;
  EXPECT_NE(generated.err.find("generate: 3/4 new tokens (75%)"), std::string::npos) << generated.err;
  // Quiet by default: a short phase prints no progress line.
  auto quiet = run(kBin, {"generate", "--model", run_dir("told"), "--prompt-ids", "1,2,3", "--max-new-tokens", "4"});
  EXPECT_EQ(quiet.err.find("new tokens ("), std::string::npos) << quiet.err;
}

// Loading a model is said before it starts (what is read, from where, how large) and after it (how
// long it took, the peak host memory), as training says its base's: `segtrain eval` of SmolLM2 once
// sat 8 s without a line (issue 58 case 10). A run on a base names the base it reads too.
TEST_F(FirstUse, LoadingAModelIsSaidBeforeAndAfter) {
  const std::string plain = trained_run("loaded");
  const std::string hf = *dir_ / "loaded-hf";
  auto exported = run(kBin, {"export", "--model", plain, "--out", hf});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  // `loading` before `loaded`, which comes before `then` (the command's own work); each said once.
  auto said_in_order = [](const test::RunResult& r, const std::string& loading, const std::string& loaded,
                          const std::string& then, const std::string& what) {
    ASSERT_EQ(r.exit_code, 0) << what << ": " << r.err;
    const size_t before = r.err.find(loading), after = r.err.find(loaded), work = r.err.find(then);
    EXPECT_NE(before, std::string::npos) << what << ": " << r.err;
    EXPECT_NE(after, std::string::npos) << what << ": " << r.err;
    EXPECT_LT(before, after) << what << ": " << r.err;
    EXPECT_LT(after, work) << what << ": " << r.err;
    EXPECT_EQ(r.err.find("loading ", before + 1), std::string::npos) << what << ": said once\n" << r.err;
    EXPECT_TRUE(std::regex_search(r.err.substr(after), std::regex("^loaded \\S+ in [0-9]+\\.[0-9] s, peak host memory "
                                                                   "[0-9]+\\.[0-9] MiB\n")))
        << what << ": " << r.err;
  };
  const std::vector<std::string> eval = {"eval", "--data", *dir_ / "store", "--lengths", "32", "--max-sequences", "2"};
  auto with = [](std::vector<std::string> args, const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  said_in_order(run(kBin, with(eval, {"--model", hf, "--out", *dir_ / "loaded-hf-eval.json"})),
                "loading the Hugging Face folder " + hf + " (", "loaded " + hf + " in ", "eval valid L=32",
                "eval of an HF folder");
  said_in_order(run(kBin, {"generate", "--model", plain, "--prompt-ids", "1,2,3", "--max-new-tokens", "2"}),
                "loading the segtrain model " + plain + "/final (", "loaded " + plain + "/final in ", "generate: ",
                "generate from a run");
  // A LoRA run on the HF folder: its training says the base's load and its own time with the
  // conversion; its eval names the base its base.json records.
  auto lora = run(kBin, {"train", tiny_run_config("loaded-lora"), "--set", "model.init=hf:" + hf, "--set",
                         "model.adapters.lora.rank=2", "--set", "model.adapters.lora.targets=[qkv, o]", "--set",
                         "train.budget.tokens=256"});
  ASSERT_EQ(lora.exit_code, 0) << lora.err;
  EXPECT_NE(lora.err.find("loading the Hugging Face folder " + hf + " ("), std::string::npos) << lora.err;
  EXPECT_NE(lora.err.find("base loaded and converted in "), std::string::npos) << lora.err;
  EXPECT_EQ(lora.err.find("loaded " + hf + " in "), std::string::npos) << "said twice\n" << lora.err;
  const auto evaluated =
      run(kBin, with(eval, {"--model", run_dir("loaded-lora"), "--out", *dir_ / "loaded-lora-eval.json"}));
  const std::string final_dir = run_dir("loaded-lora") + "/final";
  said_in_order(evaluated, "loading the segtrain model " + final_dir + " (", "loaded " + final_dir + " in ",
                "eval valid L=32", "eval of a LoRA run");
  EXPECT_TRUE(std::regex_search(evaluated.err, std::regex("loading the segtrain model \\S+ \\([0-9.]+ MiB that trained, "
                                                          "on its base \\S+, [0-9.]+ MiB\\)\n")))
      << evaluated.err;
  EXPECT_NE(evaluated.err.find(", on its base " + fs::absolute(hf).string() + ", "), std::string::npos) << evaluated.err;
}

// A run started with relative paths records its folders absolute, so that generate (which reads
// the store's tokenizer through the run's config.yaml) works from any directory, and a resume with
// the same relative config still matches the checkpoint (old main: "store/tokenizer.model: no such
// tokenizer model file" from another directory) (issue 47).
TEST_F(FirstUse, ARunRecordsItsFoldersSoThatItWorksFromAnyDirectory) {
  const std::string config = tiny_run_config("relative");
  std::string text = test::read_file(config);
  const std::string store = *dir_ / "store";
  text.replace(text.find("store: " + store), 7 + store.size(), "store: store");
  text.replace(text.find("output_dir: " + run_dir("relative")), 12 + run_dir("relative").size(),
               "output_dir: runs/relative");
  test::write_file(config, text);
  auto in_dir = [&](const std::string& where, const std::string& args) {
    return run("sh", {"-c", "cd " + test::shell_quote(where) + " && exec " + test::shell_quote(kBin) + " " + args});
  };
  auto trained = in_dir(dir_->path().string(), "train " + test::shell_quote(config) + " --set train.budget.tokens=256");
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string recorded = test::read_file(run_dir("relative") + "/config.yaml");
  EXPECT_NE(recorded.find("store: " + fs::weakly_canonical(*dir_ / "store").string()), std::string::npos) << recorded;
  auto generated = in_dir("/", "generate --model " + test::shell_quote(run_dir("relative")) +
                                   " --prompt 'the password of' --max-new-tokens 3");
  EXPECT_EQ(generated.exit_code, 0) << generated.err;
  auto resumed = in_dir(dir_->path().string(), "train " + test::shell_quote(config) +
                                                   " --set train.budget.tokens=256 --resume");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
}

// Run `name` (its config at config_path(name)) with a budget of 256 tokens, and SIGINT it once it
// logged that final/ is saved, while its final evaluation runs. What it said on stderr; *result its
// exit; false when the run ended before the signal could be sent.
bool interrupt_the_final_evaluation(const std::string& config, const std::string& final_dir, const fs::path& dir,
                                    test::RunResult* result, std::string* said) {
  const std::string err = (dir / "evaluating.err").string(), pid_file = (dir / "evaluating.pid").string();
  std::filesystem::remove(err);
  std::thread command([&] {
    *result = run("sh", {"-c", "echo $$ > " + test::shell_quote(pid_file) + "; exec " + test::shell_quote(kBin) +
                                   " train " + test::shell_quote(config) + " --set train.budget.tokens=256 2> " +
                                   test::shell_quote(err)}, 300);
  });
  bool evaluating = false;
  for (int i = 0; i < 3000 && !evaluating; ++i) {
    evaluating = test::read_file(err).find("saved " + final_dir) != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (evaluating) ::kill(std::stoi(test::read_file(pid_file)), SIGINT);
  command.join();
  *said = test::read_file(err);
  return evaluating;
}

// Ctrl-C during a run's final evaluation ends the evaluation within a batch of windows, and the
// run, whose training is complete and saved, says so and how to evaluate it, not "error:
// interrupted" (issue 47). Exit 130 all the same: the command did not do all it was asked.
TEST_F(FirstUse, ASignalDuringTheFinalEvaluationStopsItAndKeepsTheTrainedRun) {
  // A model and an evaluation large enough (every window of the train split at 4 lengths) to be
  // running when the signal comes.
  std::string text = test::read_file(tiny_run_config("evaluating", {.eval_lengths = "[32, 64, 128, 256]"}));
  text = std::regex_replace(text, std::regex("d_model: 32, n_layers: 2"), "d_model: 256, n_layers: 4");
  text = std::regex_replace(text, std::regex("max_sequences: 4\\}"), "max_sequences: 0, split: train}");
  test::write_file(config_path("evaluating"), text);
  test::RunResult result;
  std::string said;
  ASSERT_TRUE(interrupt_the_final_evaluation(config_path("evaluating"), run_dir("evaluating") + "/final", dir_->path(), &result,
                                             &said)) << said;
  EXPECT_EQ(result.exit_code, 130) << said;
  EXPECT_EQ(said.find("error"), std::string::npos) << said;
  EXPECT_NE(said.find("signal 2 stopped the final evaluation; the training is complete (2 steps, model " +
                      run_dir("evaluating") + "/final); evaluate it with: segtrain eval --model " +
                      run_dir("evaluating")),
            std::string::npos)
      << said;
  EXPECT_TRUE(fs::exists(run_dir("evaluating") + "/final/model.safetensors"));
  EXPECT_FALSE(fs::exists(run_dir("evaluating") + "/eval.json")) << "the evaluation did not finish";
}

// The same when the whole evaluation is one batch (issue 58: eval.batch_size windows that are all
// it evaluates): the signal during that batch stops it before its figures are recorded (old main:
// the batch ran on, then exit 0 saying the signal "came after the run completed").
TEST_F(FirstUse, ASignalDuringTheOnlyBatchOfTheFinalEvaluationStopsIt) {
  std::string text = test::read_file(tiny_run_config("one-batch", {.eval_lengths = "[256]"}));
  text = std::regex_replace(text, std::regex("d_model: 32, n_layers: 2"), "d_model: 256, n_layers: 4");
  text = std::regex_replace(text, std::regex("max_sequences: 4\\}"), "max_sequences: 48, split: train, batch_size: 48}");
  test::write_file(config_path("one-batch"), text);
  test::RunResult result;
  std::string said;
  ASSERT_TRUE(interrupt_the_final_evaluation(config_path("one-batch"), run_dir("one-batch") + "/final", dir_->path(), &result,
                                             &said)) << said;
  EXPECT_EQ(result.exit_code, 130) << said;
  EXPECT_EQ(said.find("came after the run completed"), std::string::npos) << said;
  EXPECT_NE(said.find("signal 2 stopped the final evaluation; the training is complete (2 steps, model " +
                      run_dir("one-batch") + "/final); evaluate it with: segtrain eval --model " + run_dir("one-batch")),
            std::string::npos)
      << said;
  EXPECT_TRUE(fs::exists(run_dir("one-batch") + "/final/model.safetensors"));
  EXPECT_FALSE(fs::exists(run_dir("one-batch") + "/eval.json")) << "the evaluation was stopped";
}

// `--resume` of a trained run evaluates only what its eval.json lacks (old main: the whole final
// evaluation again, an hour on SmolLM2's defaults): a task recorded for the same step, precision
// and settings is kept; one whose settings changed is measured again.
TEST_F(FirstUse, AResumeOfATrainedRunEvaluatesOnlyWhatEvalJsonLacks) {
  const std::string dir = trained_run("evaluated-once");
  const std::string first = test::read_file(dir + "/eval.json");
  const auto recorded = nlohmann::json::parse(first);
  ASSERT_TRUE(recorded.contains("evaluated")) << first;
  EXPECT_EQ(recorded["evaluated"]["step"], 4);
  EXPECT_EQ(recorded["evaluated"]["precision"], "fp32");
  EXPECT_EQ(recorded["evaluated"]["tasks"]["perplexity"]["max_sequences"], 4) << first;

  auto again = run(kBin, {"train", four_step_config("evaluated-once"), "--resume", "auto"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("eval: perplexity: " + dir + "/eval.json holds it for step 4 with these settings; not "
                           "evaluated again"),
            std::string::npos) << again.err;
  EXPECT_EQ(again.err.find("eval valid L=32"), std::string::npos) << "measured again: " << again.err;
  EXPECT_EQ(nlohmann::json::parse(test::read_file(dir + "/eval.json"))["results"], recorded["results"]);

  auto changed = run(kBin, {"train", four_step_config("evaluated-once"), "--resume", "auto", "--set",
                            "eval.max_sequences=2"});
  ASSERT_EQ(changed.exit_code, 0) << changed.err;
  EXPECT_EQ(changed.err.find("not evaluated again"), std::string::npos) << changed.err;
  const auto remeasured = nlohmann::json::parse(test::read_file(dir + "/eval.json"));
  EXPECT_EQ(remeasured["results"][0]["sequences"], 2) << remeasured.dump();
  EXPECT_EQ(remeasured["evaluated"]["tasks"]["perplexity"]["max_sequences"], 2) << remeasured.dump();
}

// A run trained from scratch on a sentencepiece store exports that store's tokenizer.model with a
// tokenizer_config.json that transformers builds into a tokenizer giving sentencepiece's ids (old
// main: no tokenizer at all; LlamaTokenizer, which the model_type would pick, encodes such
// models differently).
TEST_F(FirstUse, AnExportCarriesTheSentencepieceTokenizer) {
  const std::string dir = trained_run("sentencepiece-export");
  auto exported = run(kBin, {"export", "--model", dir, "--out", dir + "-hf"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const std::string model_file = *dir_ / "store/tokenizer.model";
  EXPECT_NE(exported.err.find("copied the sentencepiece tokenizer " + model_file), std::string::npos) << exported.err;
  EXPECT_EQ(test::read_file(dir + "-hf/tokenizer.model"), test::read_file(model_file));
  const auto config = nlohmann::json::parse(test::read_file(dir + "-hf/tokenizer_config.json"));
  EXPECT_EQ(config["tokenizer_class"], "TokenizersBackend");
  EXPECT_EQ(config["model_max_length"], 128) << "L_e";
  const std::string script = *dir_ / "same_ids.py";
  test::write_file(script,
                   "import sys\nimport sentencepiece as spm\nfrom transformers import AutoTokenizer\n"
                   "sp = spm.SentencePieceProcessor(model_file=sys.argv[2])\n"
                   "tok = AutoTokenizer.from_pretrained(sys.argv[1])\n"
                   "texts = ['the quick brown fox jumps over the lazy dog', '  two  spaces and a tab\\tthere',\n"
                   "         'line one\\nline two', 'Na\u00efve caf\u00e9, 1234567890 + 0.5 = x;',\n"
                   "         'int main(void) { return printf(\"%d\\\\n\", 42); }']\n"
                   "same = sum(sp.encode(t) == tok.encode(t, add_special_tokens=False) for t in texts)\n"
                   "print(f'{same} of {len(texts)}')\n");
  auto compared = run(SEGTRAIN_PYTHON, {script, dir + "-hf", model_file}, 300);
  ASSERT_EQ(compared.exit_code, 0) << compared.err;
  EXPECT_EQ(compared.out, "5 of 5\n") << compared.err;
}

// A pretrained base with lr and warm-up left out trains at the continued-pretraining rate
// (2e-5 after 20 steps, at most a quarter of the run) and says so with its plan; from scratch the
// same keys mean 3e-4 (old main: 3e-4 after 100 steps for both, which undid SmolLM2's training).
// Its final evaluation is sized to the run (old main: 64 windows at every length whatever the run).
TEST_F(FirstUse, APretrainedBaseTrainsAtTheContinuedPretrainingRateAndEvaluatesInProportion) {
  const std::string base = trained_run("lr-base");
  auto continued = run(kBin, {"train", four_step_config("lr-continued"), "--set", "train.lr=auto", "--set",
                              "train.warmup_steps=auto", "--set", "model.init=checkpoint:" + base + "/final"});
  ASSERT_EQ(continued.exit_code, 0) << continued.err;
  EXPECT_NE(continued.err.find("lr 2e-05 after 1 warm-up steps (auto: a pretrained base's)"), std::string::npos)
      << continued.err;
  EXPECT_EQ(continued.err.find("is over a quarter of this run"), std::string::npos) << continued.err;
  const std::string metrics = test::read_file(run_dir("lr-continued") + "/metrics.jsonl");
  std::vector<double> lrs;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) lrs.push_back(nlohmann::json::parse(line).at("lr"));
  ASSERT_EQ(lrs.size(), 4u) << metrics;
  EXPECT_DOUBLE_EQ(lrs.front(), 2e-5) << "the peak after 1 warm-up step";
  for (double lr : lrs) EXPECT_LE(lr, 2e-5);
  EXPECT_GE(lrs.back(), 2e-6) << "auto min_lr is lr / 10";

  // Its final evaluation, eval.max_sequences auto, follows the run's size: a quarter of its 4,096
  // training tokens over windows of 32 tokens is 32 windows (64 from scratch).
  auto sized = run(kBin, {"train", four_step_config("eval-sized"), "--set", "eval.max_sequences=auto", "--set",
                          "train.budget.tokens=4096", "--set", "model.init=checkpoint:" + base + "/final"});
  ASSERT_EQ(sized.exit_code, 0) << sized.err;
  EXPECT_NE(sized.err.find("final evaluation: perplexity at L = 32 (32 windows): 1024 tokens through the model "
                           "(25.0% of the training's"),
            std::string::npos) << sized.err;
  EXPECT_NE(sized.err.find("(auto from a pretrained base: 32 windows a length"), std::string::npos) << sized.err;
  EXPECT_EQ(nlohmann::json::parse(test::read_file(run_dir("eval-sized") + "/eval.json"))["results"][0]["sequences"], 32);

  auto scratch = run(kBin, {"train", four_step_config("lr-scratch"), "--set", "train.lr=auto", "--set",
                            "train.warmup_steps=auto", "--set", "eval.max_sequences=auto"});
  ASSERT_EQ(scratch.exit_code, 0) << scratch.err;
  EXPECT_NE(scratch.err.find("lr 3e-04 after 1 warm-up steps (auto)"), std::string::npos) << scratch.err;
  EXPECT_NE(scratch.err.find("final evaluation: perplexity at L = 32 (64 windows)"), std::string::npos) << scratch.err;
}

}  // namespace
}  // namespace segtrain
