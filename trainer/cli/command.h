#pragma once
// The `segtrain` command line. Each subcommand lives in its own cmd_*.cpp: it
// declares its options (into the option struct of the library it calls) and
// what runs when it is chosen; run_cli() parses, sets up the process (signal
// handlers, exit codes) and runs it. Commands parse arguments and call a
// library; the work is in config/, train/, eval/, experiment/ and data/.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/signals.h"

namespace segtrain::trainer::cli {

// The subcommand the command line chose.
struct Chosen {
  std::string name = "segtrain";      // for error messages: "segtrain train: error: ..."
  OnSignal on_signal = OnSignal::exit_now;
  std::function<int()> run;           // returns the exit code
};

// Makes `sub` the chosen command when it appears on the command line.
void choose_on(CLI::App* sub, Chosen& chosen, const std::string& name, OnSignal on_signal, std::function<int()> run);

// The repeatable `--set KEY=VALUE` option; `help` names what it may set.
inline constexpr const char* kRunOverridesHelp = "Override a config key, e.g. --set train.lr=1e-4 (repeatable)";
CLI::Option* add_overrides(CLI::App* app, std::vector<std::string>& overrides,
                           const std::string& help = kRunOverridesHelp);

// Numeric flags answer as the config does: "--lengths: expected an integer >= 1, got 'abc'".
CLI::Validator integer_at_least(int64_t min, std::optional<int64_t> max = std::nullopt);
CLI::Validator number_between(double low, double high);

// One per subcommand (cmd_<name>.cpp); option values live in shared_ptrs the
// command's `run` keeps alive.
void add_synth(CLI::App& app, Chosen& chosen);
void add_prepare(CLI::App& app, Chosen& chosen);
void add_sample(CLI::App& app, Chosen& chosen);
void add_train(CLI::App& app, Chosen& chosen);
void add_eval(CLI::App& app, Chosen& chosen);
void add_export(CLI::App& app, Chosen& chosen);
void add_generate(CLI::App& app, Chosen& chosen);
void add_inspect(CLI::App& app, Chosen& chosen);
void add_experiment(CLI::App& app, Chosen& chosen);
void add_config(CLI::App& app, Chosen& chosen);

// segtrain's version, LibTorch's, the build type and compiled-in CUDA/NCCL.
std::string version_text();

// The whole CLI; main() only calls this. Never throws: every failure is an exit code.
int run_cli(int argc, char** argv);

}  // namespace segtrain::trainer::cli
