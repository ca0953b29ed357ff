// `segtrain export`: an HF-loadable folder from a checkpoint, run or HF folder (eval/stored_model.h).
#include "trainer/cli/command.h"
#include "trainer/eval/stored_model.h"

namespace segtrain::trainer::cli {

void add_export(CLI::App& app, Chosen& chosen) {
  struct Options {
    std::string model, out;
    std::vector<std::string> overrides;
  };
  auto o = std::make_shared<Options>();
  auto* x = app.add_subcommand("export", "Write an HF-loadable folder from a checkpoint, run or HF folder");
  x->add_option("--model", o->model, "Checkpoint, run directory or HF folder")->required();
  x->add_option("--out", o->out, "Output directory")->required();
  add_overrides(x, o->overrides);
  choose_on(x, chosen, "export", OnSignal::exit_now, [o] {
    export_stored_model(o->model, o->overrides, o->out);
    return 0;
  });
}

}  // namespace segtrain::trainer::cli
