// `segtrain train`: one YAML-configured run (train/trainer.h).
#include "common/log.h"
#include "trainer/cli/command.h"
#include "trainer/config/config.h"
#include "trainer/train/distributed.h"
#include "trainer/train/trainer.h"

namespace segtrain::trainer::cli {

void add_train(CLI::App& app, Chosen& chosen) {
  struct Options {
    std::string config;
    std::vector<std::string> overrides;
    bool resume = false;
  };
  auto o = std::make_shared<Options>();
  auto* t = app.add_subcommand("train", "Run one YAML-configured training run");
  t->add_option("config", o->config, "Run config (YAML)")->required();
  add_overrides(t, o->overrides);
  t->add_flag("--resume", o->resume, "Continue from the newest complete checkpoint in run.output_dir");
  choose_on(t, chosen, "train", OnSignal::stop_at_checkpoint, [o] {
    const LoadedConfig loaded = load_config(o->config, o->overrides);
    log::Options logging;  // the console; the run adds its own log file
    logging.level = loaded.config.run.log_level;
    logging.rank = static_cast<int>(read_distributed_env().rank);
    log::init(logging);
    return run_training(loaded, o->resume);
  });
}

}  // namespace segtrain::trainer::cli
