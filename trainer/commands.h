#pragma once
// One function per `segtrain` subcommand (DESIGN.md, "Commands"). cli.cpp parses
// the command line into these structs; each command lives in its own cmd_*.cpp.
// Commands return an exit code and throw InputError for bad input (exit 2).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace segtrain::trainer {

struct SynthOptions {
  std::string out;
  int64_t docs = 400;
  int64_t min_tokens = 2048;
  int64_t max_tokens = 4096;
  int64_t seed = 1234;
};

struct PrepareOptions {
  std::vector<std::string> inputs;
  std::string out;
  std::string tokenizer;           // an existing sentencepiece .model, or empty to train one
  int64_t vocab_size = 4096;
  std::string model_type = "unigram";  // unigram | bpe
  double character_coverage = 0.9995;
  int64_t sample_size = 2000000;   // sentences fed to sentencepiece training
  std::string text_field = "text";
  double valid_fraction = 0.05;
  int64_t seed = 1234;
  int64_t threads = 0;
};

struct SampleOptions {
  std::string config;
  std::vector<std::string> overrides;
  int64_t count = 10;
  std::string out;
  std::string split = "train";
};

struct TrainOptions {
  std::string config;
  std::vector<std::string> overrides;
  bool resume = false;
};

struct EvalOptions {
  std::string model;
  std::string data;
  std::string split = "valid";
  std::vector<int64_t> lengths;
  std::vector<std::string> overrides;
  std::string out;
  std::string per_position_csv;
  int64_t stride = 0;
  int64_t max_sequences = 0;
  int64_t passkey_trials = 0;
  std::string passkey_style = "digits";
};

struct ExportOptions {
  std::string model;
  std::string out;
  std::vector<std::string> overrides;
};

struct InspectPositionsOptions {
  std::string model;
  std::string config;
  std::vector<std::string> overrides;
  int64_t length = 0;
};

struct InspectAlibiPrecisionOptions {
  int64_t heads = 32;
  std::optional<int64_t> head;
  int64_t length = 8192;
  int64_t bucket = 1000;
};

struct ExperimentOptions {
  std::string file;
  std::vector<std::string> overrides;
};

struct ConfigCheckOptions {
  std::string file;
  std::vector<std::string> overrides;
};

int cmd_synth(const SynthOptions& options);
int cmd_prepare(const PrepareOptions& options);
int cmd_sample(const SampleOptions& options);
int cmd_train(const TrainOptions& options);
int cmd_eval(const EvalOptions& options);
int cmd_export(const ExportOptions& options);
int cmd_inspect_positions(const InspectPositionsOptions& options);
int cmd_inspect_alibi_precision(const InspectAlibiPrecisionOptions& options);
int cmd_experiment(const ExperimentOptions& options);
int cmd_config_check(const ConfigCheckOptions& options);
int cmd_config_reference();

// The whole CLI; main() only calls this.
int run_cli(int argc, char** argv);

// segtrain's version, LibTorch's, the build type and compiled-in CUDA/NCCL.
std::string version_text();

}  // namespace segtrain::trainer
