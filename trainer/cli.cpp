// The `segtrain` command line: options into structs, then one command runs.
// Every failure becomes an exit code (DESIGN.md): 2 for bad usage or input,
// 1 for runtime failures, 128+signal after an interrupt. Nothing escapes main.
#include <CLI/CLI.hpp>

#include <functional>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "trainer/commands.h"
#include "trainer/signals.h"

namespace segtrain::trainer {
namespace {

void print_error(const std::string& command, const std::string& message) {
  std::istringstream lines(message);
  std::string line;
  while (std::getline(lines, line)) std::cerr << command << ": error: " << line << "\n";
}

CLI::Option* add_overrides(CLI::App* app, std::vector<std::string>& overrides) {
  return app->add_option("--set", overrides, "Override a config key, e.g. --set train.lr=1e-4 (repeatable)")
      ->type_name("KEY=VALUE");
}

}  // namespace

int run_cli(int argc, char** argv) {
  CLI::App app{"segtrain: extend the context window of decoder-only LMs by training on segmented sequences"};
  app.set_version_flag("--version", [] { return version_text(); });
  app.require_subcommand(1);
  app.fallthrough(false);

  std::function<int()> action;
  std::string command_name = "segtrain";
  auto on = [&](CLI::App* sub, std::string name, std::function<int()> fn) {
    sub->callback([&action, &command_name, name, fn] {
      command_name = "segtrain " + name;
      action = fn;
    });
  };

  SynthOptions synth;
  auto* s = app.add_subcommand("synth", "Write a synthetic long-document corpus with long-range dependencies");
  s->add_option("--out", synth.out, "Output directory (train.jsonl, valid.jsonl)")->required();
  s->add_option("--docs", synth.docs, "Number of documents")->check(CLI::PositiveNumber);
  s->add_option("--min-tokens", synth.min_tokens, "Shortest document, in words")->check(CLI::PositiveNumber);
  s->add_option("--max-tokens", synth.max_tokens, "Longest document, in words")->check(CLI::PositiveNumber);
  s->add_option("--seed", synth.seed, "Random seed")->check(CLI::NonNegativeNumber);
  on(s, "synth", [&] { return cmd_synth(synth); });

  PrepareOptions prep;
  auto* p = app.add_subcommand("prepare", "Tokenize a corpus with sentencepiece into a Megatron token store");
  p->add_option("--input", prep.inputs, "Text directories, .txt/.md/.rst(.gz) files, .jsonl files or Megatron .bin/.idx")
      ->required()->expected(1, -1);
  p->add_option("--out", prep.out, "Store directory")->required();
  auto* tok = p->add_option("--tokenizer", prep.tokenizer, "Existing sentencepiece .model to use");
  p->add_option("--vocab-size", prep.vocab_size, "Vocabulary of a newly trained tokenizer")
      ->check(CLI::Range(int64_t{8}, int64_t{1} << 31))->excludes(tok);
  p->add_option("--model-type", prep.model_type, "sentencepiece model type")->check(CLI::IsMember({"unigram", "bpe"}));
  p->add_option("--character-coverage", prep.character_coverage, "sentencepiece character coverage")
      ->check(CLI::Range(0.5, 1.0));
  p->add_option("--sample-size", prep.sample_size, "Sentences sampled to train the tokenizer")
      ->check(CLI::PositiveNumber);
  p->add_option("--text-field", prep.text_field, "JSONL field holding the text");
  p->add_option("--valid-fraction", prep.valid_fraction, "Fraction of documents held out")->check(CLI::Range(0.0, 0.9));
  p->add_option("--seed", prep.seed, "Seed of the train/valid split")->check(CLI::NonNegativeNumber);
  p->add_option("--threads", prep.threads, "Encoding threads; 0: all cores")->check(CLI::NonNegativeNumber);
  on(p, "prepare", [&] { return cmd_prepare(prep); });

  SampleOptions sample;
  auto* sm = app.add_subcommand("sample", "Dump what the configured sampler feeds the model, as JSON lines");
  sm->add_option("config", sample.config, "Run config (YAML)")->required();
  add_overrides(sm, sample.overrides);
  sm->add_option("--count", sample.count, "Samples to write")->check(CLI::PositiveNumber);
  sm->add_option("--out", sample.out, "Output .jsonl")->required();
  sm->add_option("--split", sample.split, "Store split")->check(CLI::IsMember({"train", "valid"}));
  on(sm, "sample", [&] { return cmd_sample(sample); });

  TrainOptions train;
  auto* t = app.add_subcommand("train", "Run one YAML-configured training run");
  t->add_option("config", train.config, "Run config (YAML)")->required();
  add_overrides(t, train.overrides);
  t->add_flag("--resume", train.resume, "Continue from the newest complete checkpoint in run.output_dir");
  on(t, "train", [&] { return cmd_train(train); });

  EvalOptions ev;
  auto* e = app.add_subcommand("eval", "Perplexity by length of a checkpoint, run or HF folder");
  e->add_option("--model", ev.model, "Checkpoint, run directory or HF folder")->required();
  e->add_option("--data", ev.data, "Token store")->required();
  e->add_option("--split", ev.split, "Store split")->check(CLI::IsMember({"train", "valid"}));
  e->add_option("--lengths", ev.lengths, "Comma-separated lengths")->delimiter(',')->required()
      ->check(CLI::PositiveNumber);
  add_overrides(e, ev.overrides);
  e->add_option("--out", ev.out, "Output JSON")->required();
  e->add_option("--per-position", ev.per_position_csv, "Also write the per-position loss curve to this CSV");
  e->add_option("--stride", ev.stride, "Sliding-window stride; 0: non-overlapping windows")
      ->check(CLI::NonNegativeNumber);
  e->add_option("--max-sequences", ev.max_sequences, "Windows per length; 0: all")->check(CLI::NonNegativeNumber);
  e->add_option("--passkey-trials", ev.passkey_trials, "Passkey-retrieval prompts per length; 0: off")
      ->check(CLI::NonNegativeNumber);
  e->add_option("--passkey-style", ev.passkey_style, "digits, or recall for models trained on `segtrain synth`")
      ->check(CLI::IsMember({"digits", "recall"}));
  on(e, "eval", [&] { return cmd_eval(ev); });

  ExportOptions ex;
  auto* x = app.add_subcommand("export", "Write an HF-loadable folder from a checkpoint, run or HF folder");
  x->add_option("--model", ex.model, "Checkpoint, run directory or HF folder")->required();
  x->add_option("--out", ex.out, "Output directory")->required();
  add_overrides(x, ex.overrides);
  on(x, "export", [&] { return cmd_export(ex); });

  auto* inspect = app.add_subcommand("inspect", "Show positional parameters");
  inspect->require_subcommand(1);
  InspectPositionsOptions ip;
  auto* ipos = inspect->add_subcommand("positions", "Positional parameters in effect at a length, as JSON");
  auto* im = ipos->add_option("--model", ip.model, "Checkpoint, run directory or HF folder");
  auto* ic = ipos->add_option("--config", ip.config, "Run config (YAML)");
  im->excludes(ic);
  ipos->add_option("--length", ip.length, "Sequence length; 0: the model's own")->check(CLI::NonNegativeNumber);
  add_overrides(ipos, ip.overrides);
  on(ipos, "inspect positions", [&] {
    if (ip.model.empty() == ip.config.empty())
      throw InputError("give exactly one of --model PATH or --config CONFIG");
    return cmd_inspect_positions(ip);
  });
  InspectAlibiPrecisionOptions ia;
  auto* iap = inspect->add_subcommand("alibi-precision", "Distinct ALiBi bias values per position bucket by dtype");
  iap->add_option("--heads", ia.heads, "Number of heads")->check(CLI::PositiveNumber);
  iap->add_option("--head", ia.head, "One head (0-based); default: every head")->check(CLI::NonNegativeNumber);
  iap->add_option("--length", ia.length, "Positions")->check(CLI::PositiveNumber);
  iap->add_option("--bucket", ia.bucket, "Positions per bucket")->check(CLI::PositiveNumber);
  on(iap, "inspect alibi-precision", [&] {
    if (ia.head && *ia.head >= ia.heads)
      throw InputError("--head " + std::to_string(*ia.head) + " is out of range for --heads " +
                       std::to_string(ia.heads));
    return cmd_inspect_alibi_precision(ia);
  });

  ExperimentOptions exp;
  auto* xp = app.add_subcommand("experiment", "Run a grid of runs and write one comparison table");
  xp->add_option("file", exp.file, "Experiment YAML")->required();
  add_overrides(xp, exp.overrides);
  on(xp, "experiment", [&] { return cmd_experiment(exp); });

  auto* config = app.add_subcommand("config", "Validate configs and list keys");
  config->require_subcommand(1);
  ConfigCheckOptions cc;
  auto* check = config->add_subcommand("check", "Validate a config and print it fully resolved");
  check->add_option("file", cc.file, "Run config (YAML)")->required();
  add_overrides(check, cc.overrides);
  on(check, "config check", [&] { return cmd_config_check(cc); });
  auto* reference = config->add_subcommand("reference", "Print every config key as a markdown table");
  on(reference, "config reference", [] { return cmd_config_reference(); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }

  install_exit_handlers();
  try {
    return action ? action() : 2;
  } catch (const InputError& err) {
    print_error(command_name, err.what());
    return 2;
  } catch (const Interrupted& err) {
    print_error(command_name, err.what());
    return 128 + err.signal;
  } catch (const std::exception& err) {
    print_error(command_name, err.what());
    return 1;
  } catch (...) {
    print_error(command_name, "unknown failure");
    return 1;
  }
}

}  // namespace segtrain::trainer
