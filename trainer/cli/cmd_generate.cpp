// `segtrain generate`: text from a checkpoint, run or HF folder (eval/generate.h).
#include "trainer/cli/command.h"
#include "trainer/eval/generate.h"

namespace segtrain::trainer::cli {

void add_generate(CLI::App& app, Chosen& chosen) {
  auto o = std::make_shared<GenerateOptions>();
  auto* g = app.add_subcommand("generate", "Continue a prompt with a checkpoint, run or HF folder (KV-cache decoding)");
  g->add_option("--model", o->model, "Checkpoint, run directory, HF folder, or peft:DIR (a PEFT LoRA adapter on its base)")->required();
  auto* prompt = g->add_option("--prompt", o->prompt, "The prompt's text");
  auto* file = g->add_option("--prompt-file", o->prompt_file, "A file holding the prompt's text")->excludes(prompt);
  g->add_option("--prompt-ids", o->prompt_ids, "The prompt as comma-separated token ids (no tokenizer needed)")
      ->delimiter(',')
      ->check(integer_at_least(0))
      ->excludes(prompt)
      ->excludes(file);
  g->add_option("--max-new-tokens", o->decoding.max_new_tokens, "Tokens to write at most")
      ->check(integer_at_least(1, int64_t{1} << 40));  // bounded so that prompt + this never overflows
  g->add_option("--temperature", o->decoding.temperature, "0: greedy; otherwise sample from softmax(logits / T)")
      ->check(number_between(0.0, 1.0e6));  // NaN and inf refused here, not inside sampling
  g->add_option("--top-k", o->decoding.top_k, "Sample from the k most likely tokens; 0: all")->check(integer_at_least(0));
  g->add_option("--seed", o->decoding.seed, "Seeds the sampler");
  g->add_flag("--ignore-eos", o->ignore_eos, "Write --max-new-tokens tokens even past the tokenizer's EOS");
  g->add_option("--tokenizer", o->tokenizer,
                "An HF folder or sentencepiece .model; default: the model's own (its folder's, or its hf: base's)");
  add_overrides(g, o->overrides, "Set a model.extension key of the stored model (e.g. --set model.extension.method=yarn)");
  g->add_option("--out", o->out, "Also write the prompt's and the new tokens' ids and the text as JSON");
  g->add_option("--threads", o->threads, "CPU threads (as run.threads); 0: every core of this process's share")
      ->check(integer_at_least(0));
  g->add_option("--device", o->device, "auto (cuda when this build and machine have it), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  choose_on(g, chosen, "generate", OnSignal::exit_now, [o] {
    generate_from_stored_model(*o);
    return 0;
  });
}

}  // namespace segtrain::trainer::cli
