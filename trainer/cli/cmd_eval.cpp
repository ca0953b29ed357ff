// `segtrain eval`: the evaluation suite (perplexity by length, --tasks) of a checkpoint, run or HF folder
// (eval/evaluate_model.h).
#include "common/error.h"
#include "trainer/cli/command.h"
#include "trainer/config/eval_tasks.h"
#include "trainer/eval/evaluate_model.h"

namespace segtrain::trainer::cli {

namespace {

// `--set run.threads=N` means what it does for train: eval's --threads; `--set
// eval.<task>.<key>=V` sets a task's option; the rest are the model's.
void sort_overrides(EvalOptions& o) {
  const std::string key = "run.threads=";
  std::vector<std::string> model_keys;
  for (const auto& a : o.overrides) {
    if (a.rfind("eval.", 0) == 0) {
      o.task_settings.push_back(a);
      continue;
    }
    if (a.rfind(key, 0) != 0) {
      model_keys.push_back(a);
      continue;
    }
    std::string value = a.substr(key.size());
    if (const std::string problem = integer_at_least(0, 1024)(value); !problem.empty())
      throw InputError("--set run.threads: " + problem);
    o.threads = std::stoll(value);
  }
  o.overrides = model_keys;
}

}  // namespace

void add_eval(CLI::App& app, Chosen& chosen) {
  auto o = std::make_shared<EvalOptions>();
  auto* e = app.add_subcommand("eval", "Perplexity by length (and the tasks of --tasks) of a checkpoint, run or HF folder");
  e->add_option("--model", o->model, "Checkpoint, run directory, HF folder, or peft:DIR (a PEFT LoRA adapter on its base)")->required();
  e->add_option("--data", o->data, "Token store")->required();
  e->add_option("--split", o->split, "Store split")->check(CLI::IsMember({"train", "valid"}));
  e->add_option("--lengths", o->lengths, "Comma-separated lengths")
      ->delimiter(',')
      ->required()
      ->check(integer_at_least(1));
  e->add_option("--tasks", o->tasks, "Comma-separated evaluation tasks, as eval.tasks: " + eval_task_names())
      ->delimiter(',')
      ->check([](const std::string& v) -> std::string {
        return find_eval_task(v) ? "" : "'" + v + "' is no evaluation task; expected " + eval_task_names();
      });
  add_overrides(e, o->overrides,
                "Set a model.extension key of the stored model (e.g. --set model.extension.method=yarn), a task's "
                "option (--set eval.passkey.trials=10), or run.threads (repeatable)");
  e->add_option("--out", o->out, "Output JSON")->required();
  e->add_option("--per-position", o->per_position_csv, "Also write the per-position loss curve to this CSV");
  e->add_option("--stride", o->stride, "Sliding-window stride; 0: non-overlapping windows")
      ->check(integer_at_least(0));
  e->add_option("--threads", o->threads, "CPU threads (as run.threads); 0: every core of this process's share")
      ->check(integer_at_least(0));
  e->add_option("--max-sequences", o->max_sequences, "Windows per length (as a run's eval.max_sequences); 0: all")->check(integer_at_least(0));
  e->add_option("--windows-per-document", o->windows_per_document,
                "Windows from one document before the next; 1: each window from another document; 0: all")
      ->check(integer_at_least(0));
  // Retired flags name what replaced them (refused once the command line is read).
  auto retired_trials = std::make_shared<std::vector<std::string>>();
  auto retired_style = std::make_shared<std::vector<std::string>>();
  e->add_option("--passkey-trials", *retired_trials, "Replaced by --tasks perplexity,passkey --set eval.passkey.trials=N")
      ->group("");
  e->add_option("--passkey-style", *retired_style, "Replaced by --set eval.passkey.style=S")->group("");
  e->add_flag("--allow-tokenizer-mismatch", o->allow_tokenizer_mismatch,
             "Evaluate on a store made with another tokenizer than the model's (refused otherwise)");
  e->add_option("--device", o->device, "auto (cuda when this build and machine have it), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  e->add_option("--precision", o->precision,
                "fp32, or bf16 autocast (as eval.precision; positions and the loss stay fp32)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  auto loss_chunk = std::make_shared<std::string>("auto");
  e->add_option("--loss-chunk-tokens", *loss_chunk,
                "Tokens per slice of the LM head and cross-entropy, as train.loss_chunk_tokens: auto (slices of "
                "about 64 MiB of fp32 logits), or N; 0: the whole logits at once")
      ->type_name("auto|N")
      ->check(
          [](const std::string& v) -> std::string {
            if (v == "auto") return "";
            if (!v.empty() && v.size() < 18 && v.find_first_not_of("0123456789") == std::string::npos) return "";
            return "expected auto or an integer >= 0, got '" + v + "'";
          },
          "auto|N");
  choose_on(e, chosen, "eval", OnSignal::exit_now, [o, loss_chunk, retired_trials, retired_style] {
    if (!retired_trials->empty())
      throw InputError("--passkey-trials was replaced: give --tasks perplexity,passkey and "
                       "--set eval.passkey.trials=N");
    if (!retired_style->empty())
      throw InputError("--passkey-style was replaced: give --tasks perplexity,passkey and "
                       "--set eval.passkey.style=digits|recall");
    if (*loss_chunk != "auto") o->loss_chunk_tokens = std::stoll(*loss_chunk);
    sort_overrides(*o);
    evaluate_stored_model(*o);
    return 0;
  });
}

}  // namespace segtrain::trainer::cli
