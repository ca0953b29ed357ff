// `segtrain config check|reference`: validate a config; the key reference from the schema.
#include <iostream>

#include "common/log.h"
#include "trainer/cli/command.h"
#include "trainer/config/config.h"
#include "trainer/experiment/schema.h"
#include "trainer/train/model_setup.h"

namespace segtrain::trainer::cli {

void add_config(CLI::App& app, Chosen& chosen) {
  auto* config = app.add_subcommand("config", "Validate configs and list keys");
  config->require_subcommand(1);

  struct Options {
    std::string file;
    std::vector<std::string> overrides;
  };
  auto o = std::make_shared<Options>();
  auto* check = config->add_subcommand("check", "Validate a config and print it fully resolved");
  check->add_option("file", o->file, "Run config (YAML)")->required();
  add_overrides(check, o->overrides);
  choose_on(check, chosen, "config check", OnSignal::exit_now, [o] {
    // As train would run it: the base's shape and positions, the extension's lengths.
    std::cout << to_yaml(resolved_run_config(load_config(o->file, o->overrides)));
    log::info(o->file, ": OK");
    return 0;
  });

  auto* reference = config->add_subcommand(
      "reference", "Print every key of a run config, then of an experiment file's `experiment:` section, as a markdown table");
  choose_on(reference, chosen, "config reference", OnSignal::exit_now, [] {
    std::cout << reference_markdown() << experiment_reference_rows();
    return 0;
  });
}

}  // namespace segtrain::trainer::cli
