// `segtrain export`: an HF-loadable folder from a checkpoint, run or HF folder (eval/stored_model.h).
#include "trainer/cli/command.h"
#include "trainer/eval/stored_model.h"

namespace segtrain::trainer::cli {

void add_export(CLI::App& app, Chosen& chosen) {
  struct Options {
    std::string model;
    ExportRequest request;
    std::vector<std::string> overrides;
  };
  auto o = std::make_shared<Options>();
  auto* x = app.add_subcommand("export", "Write an HF-loadable folder from a checkpoint, run or HF folder");
  x->add_option("--model", o->model, "Checkpoint, run directory or HF folder")->required();
  x->add_option("--out", o->request.out, "Output directory")->required();
  x->add_option("--dtype", o->request.dtype, "Weights as float32 (default) or bfloat16")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  x->add_option("--max-shard-size", o->request.max_shard_size,
                "Largest safetensors file before sharding with model.safetensors.index.json (default 5GB)");
  x->add_flag("--adapter", o->request.adapter,
              "A LoRA run's adapters (and what else trained) as a PEFT folder, adapter_config.json and "
              "adapter_model.safetensors, for peft.PeftModel.from_pretrained on its base; default: the merged model");
  x->add_flag("--overwrite", o->request.overwrite,
              "Replace a previous export at --out (a folder segtrain export wrote); never anything else");
  add_overrides(x, o->overrides,
                "Set a model.extension key of the stored model before exporting (e.g. --set model.extension.method=yarn --set model.extension.factor=4)");
  choose_on(x, chosen, "export", OnSignal::exit_now, [o] {
    export_stored_model(o->model, o->overrides, o->request);
    return 0;
  });
}

}  // namespace segtrain::trainer::cli
