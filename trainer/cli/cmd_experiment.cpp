// `segtrain experiment FILE.yaml`: Karypis et al.'s comparison grid (experiment/experiment.h).
#include "common/log.h"
#include "trainer/cli/command.h"
#include "trainer/experiment/experiment.h"

namespace segtrain::trainer::cli {

void add_experiment(CLI::App& app, Chosen& chosen) {
  struct Options {
    std::string file;
    std::vector<std::string> overrides;
    std::vector<std::string> import_rows;
    std::string render, out;
  };
  auto o = std::make_shared<Options>();
  auto* x = app.add_subcommand("experiment", "Run a grid of runs and write one comparison table");
  x->add_option("file", o->file, "Experiment YAML")->required();
  add_overrides(x, o->overrides);
  x->add_option("--import-rows", o->import_rows,
                "results.json of an earlier run of this experiment (another machine's, or a published one): its rows "
                "are reported as recorded there, not trained or evaluated again (repeatable)")
      ->type_name("RESULTS.json")
      ->allow_extra_args(false);  // one file per --import-rows: FILE.yaml after it stays the experiment
  x->add_option("--render", o->render,
                "Write results.md, results.json and the plots from RESULTS.json (this experiment's) into "
                "experiment.output_dir with this version's report code; nothing is trained or evaluated")
      ->type_name("RESULTS.json")
      ->excludes("--import-rows");
  x->add_option("--out", o->out, "With --render: the folder the report goes into (default experiment.output_dir)")
      ->needs("--render");
  choose_on(x, chosen, "experiment", OnSignal::stop_at_checkpoint, [o] {
    ExperimentConfig experiment = load_experiment(
        o->file, o->overrides, o->render.empty() ? ExperimentUse::grid : ExperimentUse::report);
    experiment.import_rows = o->import_rows;
    log::Options logging;  // the console; the grid and each run add their own log files
    logging.level = experiment.base_template.config.run.log_level;
    log::init(logging);
    if (!o->render.empty()) render_experiment(experiment, o->render, o->out);
    else run_experiment(experiment);
    return 0;
  });
}

}  // namespace segtrain::trainer::cli
