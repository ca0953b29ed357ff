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
    std::string resume = "no";  // "" (the bare flag) or "auto"
  };
  auto o = std::make_shared<Options>();
  auto* t = app.add_subcommand("train", "Run one YAML-configured training run");
  t->add_option("config", o->config, "Run config (YAML)")->required();
  add_overrides(t, o->overrides);
  t->add_option("--resume", o->resume,
                 "Continue from the newest complete checkpoint in run.output_dir; `--resume auto` starts fresh "
                 "when there is none (requeued jobs)")
      ->expected(0, 1)
      ->default_str("")  // the bare flag's value (not the captured "no")
      ->check(CLI::IsMember({"", "auto"}));
  choose_on(t, chosen, "train", OnSignal::stop_at_checkpoint, [o] {
    const LoadedConfig loaded = load_config(o->config, o->overrides);
    log::Options logging;  // the console; the run adds its own log file
    logging.level = loaded.config.run.log_level;
    logging.rank = static_cast<int>(read_distributed_env().rank);
    log::init(logging);
    const Resume resume = o->resume == "no" ? Resume::no : o->resume == "auto" ? Resume::if_any : Resume::required;
    return run_training(loaded, resume);
  });
}

}  // namespace segtrain::trainer::cli
