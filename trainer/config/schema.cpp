#include "trainer/config/schema.h"

#include "data/sampler_kind.h"
#include "trainer/config/mixture_field.h"
#include "models/spec/auto_values.h"

namespace segtrain::trainer::schema {

namespace {

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const auto& task : eval_task_catalog()) names.push_back(task.name);
  return names;
}

// eval.<task>.lengths, .trials and its one choice, for every task that writes prompts.
std::vector<Field> task_fields(EvalConfig& eval) {
  std::vector<Field> out;
  for (const auto& task : eval_task_catalog()) {
    if (!task.writes_prompts) continue;
    TaskOptions& o = eval.task.at(task.name);
    const std::string key = "eval." + task.name + ".";
    out.push_back(maybe_integer_list(key + "lengths", o.lengths, "auto", 2,
                                     "Prompt lengths in tokens (" + task.name + " in eval.tasks); auto: eval.lengths "
                                     "(a grid row's lengths in an experiment). " + task.doc));
    out.push_back(integer(key + "trials", o.trials, 1, kMaxInt, "Prompts per length; each is a new draw of the seed."));
    if (!task.variant_key.empty()) out.push_back(word_choice(key + task.variant_key, o.variant, task.variants, task.variant_doc));
  }
  return out;
}

}  // namespace

// One row per config key: a declarative table, as long as there are keys.
std::vector<Field> fields(Config& c) {  // NOLINT(readability-function-size): the key table
  auto& m = c.model.spec;
  auto& ext = m.extension;
  auto& t = c.train;
  std::vector<Field> table = {
      text("run.name", c.run.name, "Name used in logs and result tables.").with({KeyRole::grid}),
      text("run.output_dir", c.run.output_dir,
           "Run directory (config.yaml, metrics.jsonl, checkpoints/, final/); relative to the working directory.").with({KeyRole::grid}),
      integer("run.seed", c.run.seed, 0, kMaxInt, "Seeds initialisation, data order and sampling.").with({KeyRole::resume}),
      choice("run.device", c.run.device, kDevices, "auto picks cuda when this build and machine have it."),
      integer("run.threads", c.run.threads, 0, 1024, "Intra-op threads per process; 0 uses every core of this process's share."),
      choice("run.log_level", c.run.log_level, kLogLevels, "Console and log-file verbosity."),
      flag("run.log_all_ranks", c.run.log_all_ranks,
           "Every rank logs to output_dir/logs/rank-<r>.log instead of rank 0 alone to train.log; rank 0 keeps the console."),

      text("model.init", c.model.init,
           "scratch, hf:DIR (a transformers folder), checkpoint:DIR, or peft:DIR (a PEFT LoRA adapter, continued "
           "on the base its adapter_config.json names: its r, lora_alpha, targets and modules_to_save become "
           "model.adapters.lora and train.trainable).").with({KeyRole::grid, KeyRole::resume}),
      choice("model.arch", m.arch, models::kArchs,
             "Block layout and HF naming: gpt2 (learned APE), gpt_neox (RoPE), bloom (ALiBi), llama (RoPE, RMSNorm, SwiGLU, GQA; also Mistral, Qwen2, Qwen3 and Phi-3).").with({KeyRole::model_shape, KeyRole::resume}),
      maybe_integer("model.vocab_size", m.vocab_size, "auto", 1, "auto takes the token store's vocabulary.").with({KeyRole::model_shape, KeyRole::resume}),
      integer("model.d_model", m.d_model, 1, kMaxInt, "Hidden size.").with({KeyRole::model_shape, KeyRole::resume}),
      integer("model.n_layers", m.n_layers, 1, kMaxInt, "Transformer blocks.").with({KeyRole::model_shape, KeyRole::resume}),
      integer("model.n_heads", m.n_heads, 1, kMaxInt, "Attention heads; must divide d_model unless head_dim is given.").with({KeyRole::model_shape, KeyRole::resume}),
      maybe_integer("model.n_kv_heads", m.n_kv_heads, "auto", 1, "Key/value heads (llama: grouped-query attention); must divide n_heads; auto is n_heads.").with({KeyRole::model_shape, KeyRole::resume}),
      maybe_integer("model.head_dim", m.head_dim, "auto", 1, "Width of each head (llama); auto is d_model / n_heads.").with({KeyRole::model_shape, KeyRole::resume}),
      maybe_integer("model.d_ff", m.d_ff, "auto", 1, "MLP width; auto is 4 * d_model.").with({KeyRole::model_shape, KeyRole::resume}),
      maybe_integer("model.max_positions", m.max_positions, "auto", 1,
                    "Positions the base model was trained for (APE table rows); auto is data.train_length.").with({KeyRole::model_shape, KeyRole::resume}),
      real("model.layer_norm_eps", m.layer_norm_eps, above(0), kNoHigh, "LayerNorm epsilon; RMSNorm's for llama (HF rms_norm_eps).").with({KeyRole::model_shape, KeyRole::resume}),
      flag("model.qkv_bias", m.qkv_bias, "Biases on the q/k/v projections (llama: HF attention_bias, Qwen2).").with({KeyRole::model_shape, KeyRole::resume}),
      flag("model.o_bias", m.o_bias, "Bias on the attention output projection (llama: HF attention_bias).").with({KeyRole::model_shape, KeyRole::resume}),
      flag("model.mlp_bias", m.mlp_bias, "Biases on gate/up/down (llama: HF mlp_bias).").with({KeyRole::model_shape, KeyRole::resume}),
      flag("model.qk_norm", m.qk_norm, "RMSNorm over each head's q and k before RoPE (llama: Qwen3).").with({KeyRole::model_shape, KeyRole::resume}),
      flag("model.tie_embeddings", m.tie_embeddings, "The head shares the embedding (llama; gpt2 and bloom always, gpt_neox never).").with({KeyRole::model_shape, KeyRole::resume}),
      real("model.rope.theta", m.rope.theta, above(0), kNoHigh, "RoPE base (gpt_neox, llama).").with({KeyRole::model_shape, KeyRole::resume, KeyRole::stored_model}),
      real("model.rope.rotary_pct", m.rope.rotary_pct, above(0), at_least(1),
           "Fraction of each head's dimensions that is rotated (gpt_neox).").with({KeyRole::model_shape, KeyRole::resume}),
      choice("model.extension.method", ext.method, models::kExtensionMethods,
             "Context extension: interpolate (APE/RoPE PI/ALiBi), dynamic_interpolate (ALiBi), ntk, "
             "dynamic_ntk, yarn, llama3, longrope (RoPE), ntk_alibi (ALiBi).").with({KeyRole::grid, KeyRole::resume, KeyRole::stored_model}),
      maybe_real("model.extension.factor", ext.factor, "auto", at_least(models::kMinExtensionFactor), kNoHigh,
                 "Extension factor; auto reaches data.extended_length from original_length (L_e / original_length, 1 when L_e fits).").with({KeyRole::grid, KeyRole::resume, KeyRole::stored_model}),
      maybe_integer("model.extension.original_length", ext.original_length, "auto", 1,
                    "Length the base model was trained at; auto is the base's (its extension's original length, else its max_positions; scratch: data.train_length).").with({KeyRole::grid, KeyRole::resume, KeyRole::stored_model}),
      real("model.extension.yarn.beta_fast", ext.yarn.beta_fast, above(0), kNoHigh, "YaRN ramp: high rotations.").with({KeyRole::resume, KeyRole::stored_model}),
      real("model.extension.yarn.beta_slow", ext.yarn.beta_slow, above(0), kNoHigh, "YaRN ramp: low rotations.").with({KeyRole::resume, KeyRole::stored_model}),
      maybe_real("model.extension.yarn.attention_factor", ext.yarn.attention_factor, "auto", above(0), kNoHigh,
                 "YaRN attention scaling; auto is 0.1 * ln(factor) + 1.").with({KeyRole::resume, KeyRole::stored_model}),
      real("model.extension.llama3.low_freq_factor", ext.llama3.low_freq_factor, above(0), kNoHigh,
           "llama3: wavelengths above original_length / low_freq_factor are interpolated by the factor.").with({KeyRole::resume, KeyRole::stored_model}),
      real("model.extension.llama3.high_freq_factor", ext.llama3.high_freq_factor, above(0), kNoHigh,
           "llama3: wavelengths below original_length / high_freq_factor are kept; the band between is blended.").with({KeyRole::resume, KeyRole::stored_model}),
      maybe_real_list("model.extension.longrope.short_factor", ext.longrope.short_factor, "none", above(0), kNoHigh,
                      "longrope: one rescale factor per rotary frequency (rotary dimensions / 2) up to original_length.").with({KeyRole::resume, KeyRole::stored_model}),
      maybe_real_list("model.extension.longrope.long_factor", ext.longrope.long_factor, "none", above(0), kNoHigh,
                      "longrope: the factors used once a sequence's largest position id reaches original_length.").with({KeyRole::resume, KeyRole::stored_model}),
      maybe_real("model.extension.longrope.attention_factor", ext.longrope.attention_factor, "auto", above(0), kNoHigh,
                 "longrope attention scaling; auto is sqrt(1 + ln(factor) / ln(original_length)).").with({KeyRole::resume, KeyRole::stored_model}),
      checkpointed_blocks("model.activation_checkpointing", m.activation_checkpointing,
                          "Recompute blocks in backward to save activation memory, keeping only each one's input: "
                          "true every block, an integer N the first N (the last blocks, which backward reaches "
                          "first, keep their activations), auto the fewest that let a step fit "
                          "train.batch_memory_gib, measured on the run's model before the first step (with "
                          "train.micro_batch_size auto, after it chose with every block recomputed); the plan line "
                          "says how many.").with({KeyRole::stored_model}),
      integer("model.adapters.lora.rank", c.model.adapters.lora.rank, 0, kMaxInt,
              "LoRA (a model converter): a rank-r adapter on each projection model.adapters.lora.targets names, "
              "the base's weights frozen (stored in train.param_dtype), train.trainable besides; merged into the "
              "weights on export. 0: no adapters, every weight trains.").with({KeyRole::resume}),
      real("model.adapters.lora.alpha", c.model.adapters.lora.alpha, above(0), kNoHigh,
           "The adapters' output is scaled by alpha / rank (PEFT's lora_alpha).").with({KeyRole::resume}),
      real("model.adapters.lora.dropout", c.model.adapters.lora.dropout, at_least(0), below(1),
           "Dropout on each adapter's input while training (PEFT's lora_dropout); 0 with "
           "model.activation_checkpointing.").with({KeyRole::resume}),
      flag("model.adapters.lora.use_dora", c.model.adapters.lora.use_dora,
           "DoRA (Liu et al. 2024, PEFT's use_dora): each adapted weight's row norms train as a magnitude "
           "vector beside the adapter, which sets their direction.").with({KeyRole::resume}),
      word_set("model.adapters.lora.targets", c.model.adapters.lora.targets, models::kLoraTargets,
               "The projections adapted in every block: q, k, v, o, gate, up, down (the Llama block's), or qkv, o, "
               "up, down (gpt2, gpt_neox, bloom, whose q, k and v are one projection). Default: LongLoRA's "
               "[q, k, v, o].").with({KeyRole::resume}),

      text("data.store", c.data.store, "Token store directory written by `segtrain prepare` (required): what the "
                                          "run trains on, or with data.mixture its sources' default store; evaluation reads it.").with({KeyRole::grid, KeyRole::resume}),
      integer("data.train_length", c.data.train_length, 1, kMaxInt, "L_t: length of every training sequence.").with({KeyRole::resume}),
      integer("data.extended_length", c.data.extended_length, 1, kMaxInt,
              "L_e: window length cut from documents; >= train_length.").with({KeyRole::grid, KeyRole::resume}),
      word_choice("data.sampler.method", c.data.sampler.method, data::sampler_names(),
                  "How an L_t sequence is built from an L_e window (Karypis et al. 2024, section 3.3): " +
                      data::sampler_summaries() + ".").with({KeyRole::grid, KeyRole::resume}),
      real("data.sampler.alpha", c.data.sampler.alpha, kAnyReal, kNoHigh,
           "Segment fraction in (0, 1) for chunk (1/alpha segments of alpha*L_t) and prefix (suffix of alpha*L_t); "
           "its rules with L_t and L_e live in data/sampler_rules.h.").with({KeyRole::grid, KeyRole::resume}),
      choice("data.sampler.targets", c.data.sampler.targets, data::kTargetModes,
             "sequence: next token of the built sequence (the paper); document: true next document token.").with({KeyRole::resume}),
      choice("data.sampler.placement", c.data.sampler.placement, data::kChunkPlacements,
             "chunk only. uniform: every placement of the runs in the window equally likely (the paper; offsets "
             "near 0 and L_e-1 are covered far less often than the middle); ring: placed on the window closed into "
             "a ring and rotated, so every offset is covered equally often (the run crossing the end is split in two).")
          .with({KeyRole::grid, KeyRole::resume}),
      real("data.sampler.sigma", c.data.sampler.sigma, kAnyReal, kNoHigh,
           "cream only: the spread of the Gaussian the middle's reach is drawn from, in units of L_t/2 "
           "(the CREAM code's sigma, its default 3); its rules live in data/samplers/cream.cpp.").with({KeyRole::resume}),
      mixture_list(c.data.mixture).with({KeyRole::resume}),
      integer("data.prefetch", c.data.prefetch, 1, 1024, "Batches prepared ahead on the loader thread."),
      flag("data.allow_tokenizer_mismatch", c.data.allow_tokenizer_mismatch,
           "Train a model.init base on a store made with another tokenizer (refused otherwise: its ids would "
           "mean other tokens to the model); a warning then."),

      maybe_integer("train.budget.tokens", t.budget.tokens, "null", 1,
                    "Training tokens to process; setting it turns compute_equivalent off.").with({KeyRole::resume}),
      flag("train.budget.compute_equivalent", t.budget.compute_equivalent,
           "Karypis et al. 2024, eq. 2: L_e/L_t epochs for segmented samplers, 1 epoch for full.").with({KeyRole::grid, KeyRole::resume}),
      maybe_integer("train.micro_batch_size", t.micro_batch_size, "auto", 1,
                    "Sequences per forward pass and rank. auto: the largest that divides train.global_batch_size "
                    "over the ranks and fits train.batch_memory_gib, found by measuring forward and backward at 1 "
                    "and 2 sequences (and checking the choice) before the first step; the plan line says what it "
                    "measured and chose. Needs train.global_batch_size."),
      integer("train.grad_accum", t.grad_accum, 1, kMaxInt,
              "Micro-batches per optimizer step; with train.global_batch_size it follows from it (leave it 1)."),
      maybe_integer("train.global_batch_size", t.global_batch_size, "null", 1,
                    "Sequences per optimizer step over all ranks; train.grad_accum is then this over "
                    "micro_batch_size x ranks, which must divide it, so a run takes the same steps on any number of "
                    "ranks. null: micro_batch_size x grad_accum x ranks."),
      maybe_real("train.batch_memory_gib", t.batch_memory_gib, "auto", above(0), below(1 << 20),
                 "The memory, GiB, that train.micro_batch_size: auto and model.activation_checkpointing: auto "
                 "let this process hold at its peak (the "
                 "model, its optimizer state and the step's activations): auto is 90% of the device's (a GPU's "
                 "total memory; on the CPU, the host's available memory with what the process holds)."),
      maybe_real("train.lr", t.lr, "auto", above(0), kNoHigh,
                 "Peak learning rate; auto is 3e-4 from scratch, 2e-5 from a pretrained base (model.init hf: or "
                 "checkpoint:, the recipe of Position Interpolation, YaRN and LongLoRA), 2e-4 for LoRA adapters "
                 "on a base (model.adapters.lora.rank > 0 or peft:; QLoRA's rate: adapters start from B = 0).").with({KeyRole::optimizer}),
      maybe_real("train.min_lr", t.min_lr, "auto", at_least(0), kNoHigh, "Learning rate at the end of the schedule; <= lr; auto is lr / 10.").with({KeyRole::optimizer}),
      maybe_integer("train.warmup_steps", t.warmup_steps, "auto", 0,
                    "Linear warm-up steps; auto is 100 from scratch, 20 from a pretrained base, at most a quarter "
                    "of the run's steps.").with({KeyRole::optimizer}),
      choice("train.schedule", t.schedule, kSchedules, "Decay after warmup.").with({KeyRole::optimizer}),
      real("train.weight_decay", t.weight_decay, at_least(0), kNoHigh, "AdamW decoupled weight decay.").with({KeyRole::optimizer}),
      text_list("train.no_decay", t.no_decay,
                "Parameters whose name contains one of these are not decayed (1-D parameters never are).").with({KeyRole::optimizer}),
      text_list("train.freeze", t.freeze,
                "Parameters that do not train: globs over their names (* any run, ? one character); \"!glob\" "
                "trains what it matches again, the last match deciding, e.g. [\"*\", \"!*norm*\", \"!wte.*\"] "
                "trains only the norms and the embedding. Frozen weights stay bit-identical and hold no optimizer "
                "state; a pattern that matches no parameter is refused. Empty: everything trains.").with({KeyRole::resume}),
      word_set("train.trainable", c.model.adapters.lora.trainable, models::kTrainableGroups,
               "What trains in a LoRA run (model.adapters.lora.rank > 0): adapters, and besides them norms (every "
               "norm's weights), embeddings (the token and learned position tables), head (the LM head; the token "
               "table when tied). LongLoRA's LoRA+ is [adapters, norms, embeddings]. The rest stays the base's.")
          .with({KeyRole::resume}),
      real_list("train.betas", t.betas, 2, at_least(0), below(1), "AdamW betas.").with({KeyRole::optimizer}),
      real("train.eps", t.eps, above(0), kNoHigh, "AdamW epsilon.").with({KeyRole::optimizer}),
      real("train.grad_clip", t.grad_clip, at_least(0), kNoHigh, "Global gradient-norm clip; 0 disables.").with({KeyRole::optimizer}),
      choice("train.precision", t.precision, kPrecisions, "Compute precision (bf16 autocast; positions stay fp32).").with({KeyRole::resume}),
      maybe_choice("train.param_dtype", t.param_dtype, "auto", kPrecisions,
             "Parameters and gradients held in fp32, or in bf16 with an fp32 master copy of the parameters, the "
             "moments and the summed gradient in the optimizer (2 + 2 + 16/N bytes a parameter with "
             "distributed.shard_optimizer over N ranks, else 2 + 2 + 16; 2 + 16 in one process, whose bf16 "
             "gradients go into the fp32 sums as backward makes them); bf16 needs train.precision: bf16. "
             "auto: bf16 when train.precision is bf16 on a CUDA device (unless eval.precision is fp32), else "
             "fp32; the plan line says which. Checkpoints hold the fp32 master weights either way, so a run "
             "resumes in the other storage."),
      choice("train.reduce_dtype", t.reduce_dtype, kPrecisions,
             "The dtype gradients are summed over ranks in, with train.param_dtype: bf16 (accumulated in fp32 "
             "across micro-batches either way); fp32 parameters are reduced in fp32."),
      integer("train.checkpoint_every", t.checkpoint_every, 0, kMaxInt, "Steps between checkpoints; 0: final only."),
      integer("train.keep_last", t.keep_last, 0, kMaxInt, "Step checkpoints kept; 0 keeps all."),
      flag("train.final_optimizer_state", t.final_optimizer_state,
           "Keep the optimizer's state in final/ (only needed to train the finished run further); step checkpoints always keep it."),
      flag("train.save_in_background", t.save_in_background,
           "Step checkpoints: each rank copies its part to host memory and writes it while training goes on (one "
           "save in flight; it appears once every rank has written). false: training waits for the write and "
           "holds no host copy."),
      integer("train.eval_every", t.eval_every, 0, kMaxInt, "Steps between evaluations; 0: at the end only."),
      integer("train.log_every", t.log_every, 1, kMaxInt, "Steps between metrics lines; the first step and the last are always shown."),
      integer("train.max_bad_steps", t.max_bad_steps, 1, kMaxInt,
              "Consecutive non-finite losses (steps skipped) before the run aborts."),
      maybe_integer("train.loss_chunk_tokens", t.loss_chunk_tokens, "auto", 0,
                    "Tokens per slice of the LM head and cross-entropy (training and evaluation), so the full "
                    "[tokens x vocab] logits never exist at once; auto: slices of about 64 MiB of fp32 logits, and "
                    "of d_model tokens (at most 256 MiB) while the head trains (each slice reads and writes its fp32 "
                    "gradient); where the fused cross-entropy kernel takes 16-bit logits (CUDA), the same buffer "
                    "budgets in its one 16-bit row a token (2 bytes a column, not 3 fp32 rows), up to 4 d_model "
                    "tokens while the head trains (`loss_chunk_tokens_for`, models/modules/lm_head_loss.h); 0: the "
                    "whole logits at once."),
      flag("train.tensorboard", t.tensorboard, "Also write TensorBoard scalars to output_dir/tensorboard."),

      maybe_integer_list("eval.lengths", c.eval.lengths, "auto", 2,
                         "Sequence lengths to report perplexity at; auto is L_t, 2 L_t, 4 L_t, ... up to L_e.").with({KeyRole::grid}),
      text("eval.split", c.eval.split, "Store split to evaluate on."),
      flag("eval.per_position", c.eval.per_position, "Also write the per-position loss curve (CSV and SVG)."),
      maybe_integer("eval.max_sequences", c.eval.max_sequences, "auto", 0,
                    "Windows per length; 0: all; auto: 64, or from a pretrained base as many as keep the final "
                    "evaluation within a quarter of the run's training tokens (at least 4)."),
      integer("eval.windows_per_document", c.eval.windows_per_document, 0, kMaxInt,
              "Windows taken from one document before the next; 1: every window from another document (text "
              "that differs, for intervals over windows); 0: all a document holds."),
      integer("eval.stride", c.eval.stride, 0, kMaxInt,
              "0: non-overlapping windows (Karypis et al. 2024); otherwise a sliding window with this stride."),
      integer("eval.batch_size", c.eval.batch_size, 1, kMaxInt, "Sequences per evaluation forward pass."),
      word_set("eval.tasks", c.eval.tasks, task_names(),
               "What the final evaluation (and each row of an experiment) runs: perplexity (the keys above), then "
               "the prompt tasks whose options follow (eval.<task>.*), written with the store's own tokenizer; "
               "always in this table's order."),
      maybe_word_set("eval.periodic_tasks", c.eval.periodic_tasks, "auto", task_names(),
                     "What each evaluation during training (train.eval_every) runs, on every rank, with its "
                     "figures logged and in TensorBoard: some of eval.tasks (e.g. [perplexity] when the prompt "
                     "tasks are too slow to repeat); auto: all of eval.tasks."),
      choice("eval.precision", c.eval.precision, kEvalPrecisions,
             "train: as train.precision (bf16 autocast when the run trains so); fp32 or bf16 to choose (positions "
             "and the loss stay fp32 either way)."),

      choice("distributed.backend", c.distributed.backend, kBackends, "auto: nccl on CUDA, gloo on CPU."),
      integer("distributed.timeout_s", c.distributed.timeout_s, 1, kMaxInt,
              "Seconds a collective may wait before the run fails."),
      integer("distributed.save_timeout_s", c.distributed.save_timeout_s, 1, kMaxInt,
              "Seconds the ranks wait for each other's checkpoint writes (at the next save, a stop or the end of "
              "the run) before the run fails; slow shared storage needs more than distributed.timeout_s."),
      real("distributed.bucket_mb", c.distributed.bucket_mb, above(0), kNoHigh,
           "Gradient all-reduce bucket size in MB; each bucket is summed over ranks while backward still runs."),
      flag("distributed.shard_optimizer", c.distributed.shard_optimizer,
           "ZeRO-1: each rank keeps AdamW's moments for its 1/N slice of every bucket; gradients are "
           "reduce-scattered and the updated slices all-gathered. Each rank saves its own slices; any number of ranks resumes from them."),
  };
  for (auto& field : task_fields(c.eval)) table.push_back(std::move(field));
  return table;
}

}  // namespace segtrain::trainer::schema
