// Every failure becomes an exit code (docs/architecture.md, "Exit codes"): 2 for
// bad usage or input, 1 for runtime failures, 128+signal after an interrupt.
// Nothing escapes run_cli.
#include <c10/util/Exception.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "common/numbers.h"
#include "trainer/cli/command.h"

namespace segtrain::trainer::cli {
namespace {

void print_error(const std::string& command, const std::string& message) {
  std::istringstream lines(message);
  std::string line;
  while (std::getline(lines, line)) std::cerr << command << ": error: " << line << "\n";
}

// A c10::Error (a failed TORCH_CHECK, c10d) carries LibTorch's C++ backtrace
// ("Exception raised from ...", "frame #N"): shown only at log level debug.
std::string message_of(const std::exception& err) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&err);
  return c10 && !log::enabled(log::Level::debug) ? c10->what_without_backtrace() : err.what();
}

// The command a command line reached ("segtrain", "segtrain inspect", "segtrain inspect
// positions"): where its usage error is reported.
CLI::App* reached_command(CLI::App& app) {
  CLI::App* at = &app;
  for (auto parsed = at->get_subcommands(); !parsed.empty(); parsed = at->get_subcommands()) at = parsed.back();
  return at;
}

std::string command_name(const CLI::App* at) {
  std::string name;
  for (; at && at->get_parent(); at = at->get_parent()) name = " " + at->get_name() + name;
  return "segtrain" + name;
}

// CLI11's words for a usage error as one line: what was wrong, and where the options are listed.
// A command that takes a subcommand names its subcommands (and the word that is none of them)
// where CLI11 says "A subcommand is required"; a missing option also names the arguments the
// command does not take (a misspelt option is the usual cause), which CLI11 checks only after.
std::string usage_message(CLI::App* at, const CLI::ParseError& e, const std::string& command) {
  std::string message = e.what();
  const auto all = at->get_subcommands([](CLI::App*) { return true; });
  auto rest = e.get_name() == "RequiredError" ? at->remaining() : std::vector<std::string>{};
  if (e.get_name() == "RequiredError" && at->get_require_subcommand_min() > 0 && at->get_subcommands().empty() &&
      !all.empty()) {
    std::string names;
    for (const auto* sub : all) names += (names.empty() ? "" : ", ") + sub->get_name();
    const auto word = std::find_if(rest.begin(), rest.end(), [](const std::string& a) { return a.rfind('-', 0) != 0; });
    if (word == rest.end()) {
      message = "a command is required: one of " + names;
    } else {
      message = "unknown command '" + *word + "'; expected one of " + names;
      rest.erase(word);
    }
  }
  if (!rest.empty()) {
    message += "; not expected:";
    for (const auto& a : rest) message += " " + a;
  }
  for (auto& c : message)
    if (c == '\n' || c == '\r') c = ' ';
  // CLI11 begins some sentences with a capital ("The following argument was not expected"); every
  // other error of segtrain's begins in lower case.
  if (message.size() > 1 && std::isupper(static_cast<unsigned char>(message[0])) &&
      std::islower(static_cast<unsigned char>(message[1])))
    message[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(message[0])));
  return message + " (" + command + " --help lists " + (all.empty() ? "its options" : "its commands") + ")";
}

}  // namespace

void choose_on(CLI::App* sub, Chosen& chosen, const std::string& name, OnSignal on_signal, std::function<int()> run) {
  sub->callback([&chosen, name, on_signal, run = std::move(run)] {
    chosen.name = "segtrain " + name;
    chosen.on_signal = on_signal;
    chosen.run = run;
  });
}

CLI::Option* add_overrides(CLI::App* app, std::vector<std::string>& overrides, const std::string& help) {
  return app->add_option("--set", overrides, help)->type_name("KEY=VALUE");
}

CLI::Validator integer_at_least(int64_t min, std::optional<int64_t> max) {
  return CLI::Validator(
      [min, max](std::string& value) -> std::string {
        long long parsed = 0;
        const char* end = value.data() + value.size();
        const auto [stop, error] = std::from_chars(value.data(), end, parsed);
        if (error == std::errc() && stop == end && parsed >= min && (!max || parsed <= *max)) return "";
        const std::string range = max ? "in [" + std::to_string(min) + ", " + std::to_string(*max) + "]"
                                      : ">= " + std::to_string(min);
        return "expected an integer " + range + ", got '" + value + "'";
      },
      "");
}

CLI::Validator number_between(double low, double high) {
  return CLI::Validator(
      [low, high](std::string& value) -> std::string {
        char* stop = nullptr;
        const double parsed = value.empty() ? 0.0 : std::strtod(value.c_str(), &stop);
        if (!value.empty() && stop == value.c_str() + value.size() && parsed >= low && parsed <= high) return "";
        return "expected a number in [" + format_double(low) + ", " + format_double(high) + "], got '" + value + "'";
      },
      "");
}

int run_cli(int argc, char** argv) {
  CLI::App app{"segtrain: extend the context window of decoder-only LMs by training on segmented sequences"};
  app.set_version_flag("--version", [] { return version_text(); });
  app.require_subcommand(1);
  app.fallthrough(false);
  app.option_defaults()->always_capture_default();  // every --help shows each option's default

  Chosen chosen;
  for (auto add : {add_synth, add_prepare, add_sample, add_train, add_eval, add_generate, add_export, add_inspect, add_experiment,
                   add_config})
    add(app, chosen);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {  // one line, as every other error: "segtrain CMD: error: ..."
    CLI::App* at = reached_command(app);
    const std::string command = command_name(at);
    print_error(command, usage_message(at, e, command));
    return 2;
  }

  install_signal_handlers(chosen.on_signal, chosen.name);
  try {
    return chosen.run ? chosen.run() : 2;
  } catch (const InputError& err) {
    print_error(chosen.name, err.what());
    return 2;
  } catch (const Interrupted& err) {
    print_error(chosen.name, err.what());
    return 128 + err.signal;
  } catch (const std::exception& err) {
    print_error(chosen.name, message_of(err));
    return 1;
  } catch (...) {
    print_error(chosen.name, "unknown failure");
    return 1;
  }
}

}  // namespace segtrain::trainer::cli
