// Every failure becomes an exit code (docs/architecture.md, "Exit codes"): 2 for
// bad usage or input, 1 for runtime failures, 128+signal after an interrupt.
// Nothing escapes run_cli.
#include <c10/util/Exception.h>

#include <charconv>
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
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }

  install_signal_handlers(chosen.on_signal);
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
