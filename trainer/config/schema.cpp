#include "trainer/config/schema.h"

#include <charconv>
#include <cmath>
#include <limits>

#include "models/config_values.h"

namespace segtrain::trainer::schema {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "nothing (null)";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: return "'" + node.Scalar() + "'";
    default: return "an undefined value";
  }
}

[[noreturn]] void expected(const std::string& type, const YAML::Node& node) {
  throw FieldError("expected " + type + ", got " + describe(node));
}

const std::string& scalar(const YAML::Node& node, const std::string& type) {
  if (!node.IsScalar()) expected(type, node);
  return node.Scalar();
}

// Integers may be written as 1000000 or 1e6, never as 1.5.
std::optional<int64_t> to_integer(const std::string& text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc() && ptr == end) return value;
  double d = 0;
  auto [dptr, dec] = std::from_chars(text.data(), end, d);
  if (dec == std::errc() && dptr == end && std::isfinite(d) && d == std::floor(d) &&
      std::fabs(d) < 9.0e15)
    return static_cast<int64_t>(d);
  return std::nullopt;
}

std::optional<double> to_real(const std::string& text) {
  double value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<bool> to_bool(const std::string& text) {
  if (text == "true" || text == "True" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "False" || text == "no" || text == "off") return false;
  return std::nullopt;
}

std::string int_range(int64_t lo, int64_t hi) {
  if (hi == kMaxInt) return lo == std::numeric_limits<int64_t>::min() ? "" : " >= " + std::to_string(lo);
  return " in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

struct Bound {
  double value;
  bool inclusive;
};
constexpr Bound kNoHigh{kInf, true};
constexpr Bound kAnyReal{-kInf, true};  // a key whose range is a rule of its section (data/sampler_rules.h)
constexpr Bound at_least(double v) { return {v, true}; }
constexpr Bound above(double v) { return {v, false}; }
constexpr Bound below(double v) { return {v, false}; }

std::string real_range(Bound lo, Bound hi) {
  const bool has_lo = std::isfinite(lo.value), has_hi = std::isfinite(hi.value);
  if (has_lo && has_hi)
    return std::string(" in ") + (lo.inclusive ? "[" : "(") + format_double(lo.value) + ", " +
           format_double(hi.value) + (hi.inclusive ? "]" : ")");
  if (has_lo) return (lo.inclusive ? " >= " : " > ") + format_double(lo.value);
  if (has_hi) return (hi.inclusive ? " <= " : " < ") + format_double(hi.value);
  return "";
}

bool in_range(double v, Bound lo, Bound hi) {
  return (lo.inclusive ? v >= lo.value : v > lo.value) && (hi.inclusive ? v <= hi.value : v < hi.value);
}

YAML::Node plain(const std::string& text) { return YAML::Node(text); }

// "null" must be a YAML null, not the quoted string "null"; "auto" is a word.
YAML::Node null_or(const char* word) {
  return std::string(word) == "null" ? YAML::Node(YAML::NodeType::Null) : plain(word);
}

int64_t parse_integer(const YAML::Node& node, const std::string& type, int64_t lo, int64_t hi) {
  auto v = to_integer(scalar(node, type));
  if (!v || *v < lo || *v > hi) expected(type, node);
  return *v;
}

double parse_real(const YAML::Node& node, const std::string& type, Bound lo, Bound hi) {
  auto v = to_real(scalar(node, type));
  if (!v || !in_range(*v, lo, hi)) expected(type, node);
  return *v;
}

bool is_null_word(const YAML::Node& node, const char* word) {
  return node.IsNull() || (node.IsScalar() && node.Scalar() == word);
}

// --- field builders -------------------------------------------------------

Field integer(std::string path, int64_t& v, int64_t lo, int64_t hi, std::string doc) {
  std::string type = "an integer" + int_range(lo, hi);
  return {path, type, std::move(doc),
          [&v, type, lo, hi](const YAML::Node& n) { v = parse_integer(n, type, lo, hi); },
          [&v] { return plain(std::to_string(v)); }};
}

Field maybe_integer(std::string path, std::optional<int64_t>& v, const char* word, int64_t lo,
                    std::string doc) {
  std::string type = std::string(word) + " or an integer" + int_range(lo, kMaxInt);
  return {path, type, std::move(doc),
          [&v, type, word, lo](const YAML::Node& n) {
            if (is_null_word(n, word)) v.reset();
            else v = parse_integer(n, type, lo, kMaxInt);
          },
          [&v, word] { return v ? plain(std::to_string(*v)) : null_or(word); }};
}

Field real(std::string path, double& v, Bound lo, Bound hi, std::string doc) {
  std::string type = "a number" + real_range(lo, hi);
  return {path, type, std::move(doc),
          [&v, type, lo, hi](const YAML::Node& n) { v = parse_real(n, type, lo, hi); },
          [&v] { return plain(format_double(v)); }};
}

Field maybe_real(std::string path, std::optional<double>& v, const char* word, Bound lo, Bound hi,
                 std::string doc) {
  std::string type = std::string(word) + " or a number" + real_range(lo, hi);
  return {path, type, std::move(doc),
          [&v, type, word, lo, hi](const YAML::Node& n) {
            if (is_null_word(n, word)) v.reset();
            else v = parse_real(n, type, lo, hi);
          },
          [&v, word] { return v ? plain(format_double(*v)) : null_or(word); }};
}

Field flag(std::string path, bool& v, std::string doc) {
  std::string type = "true or false";
  return {path, type, std::move(doc),
          [&v, type](const YAML::Node& n) {
            auto b = to_bool(scalar(n, type));
            if (!b) expected(type, n);
            v = *b;
          },
          [&v] { return plain(v ? "true" : "false"); }};
}

Field text(std::string path, std::string& v, std::string doc) {
  std::string type = "a string";
  return {path, type, std::move(doc), [&v, type](const YAML::Node& n) { v = scalar(n, type); },
          [&v] { return plain(v); }};
}

template <class E, std::size_t N>
Field choice(std::string path, E& v, const EnumName<E> (&table)[N], std::string doc) {
  std::string type = "one of " + enum_choices(table);
  return {path, type, std::move(doc),
          [&v, &table, type](const YAML::Node& n) {
            auto e = enum_from_name(table, scalar(n, type));
            if (!e) expected(type, n);
            v = *e;
          },
          [&v, &table] { return plain(enum_name(table, v)); }};
}

YAML::Node flow_list() {
  YAML::Node list(YAML::NodeType::Sequence);
  list.SetStyle(YAML::EmitterStyle::Flow);
  return list;
}

const YAML::Node& sequence(const YAML::Node& n, const std::string& type) {
  if (!n.IsSequence()) expected(type, n);
  return n;
}

// A non-empty list, or `word` as an empty vector; each item read by `parse_item`
// (YAML item, type text) and written back by `text_of`.
template <class T, class ParseItem, class TextOf>
Field maybe_list(std::string path, std::vector<T>& v, const char* word, std::string type, std::string doc,
                 ParseItem parse_item, TextOf text_of) {
  return {path, type, std::move(doc),
          [&v, type, word, parse_item](const YAML::Node& n) {
            if (is_null_word(n, word)) {
              v.clear();
              return;
            }
            std::vector<T> out;
            for (const auto& item : sequence(n, type)) out.push_back(parse_item(item, type));
            if (out.empty()) expected(type, n);
            v = out;
          },
          [&v, word, text_of] {
            if (v.empty()) return null_or(word);
            auto list = flow_list();
            for (const auto& x : v) list.push_back(plain(text_of(x)));
            return list;
          }};
}

Field maybe_integer_list(std::string path, std::vector<int64_t>& v, const char* word, int64_t lo, std::string doc) {
  return maybe_list(
      std::move(path), v, word, std::string(word) + " or a non-empty list of integers" + int_range(lo, kMaxInt),
      std::move(doc), [lo](const YAML::Node& item, const std::string& type) { return parse_integer(item, type, lo, kMaxInt); },
      [](int64_t x) { return std::to_string(x); });
}

Field real_list(std::string path, std::vector<double>& v, std::size_t size, Bound lo, Bound hi,
                std::string doc) {
  std::string type = "a list of " + std::to_string(size) + " numbers" + real_range(lo, hi);
  return {path, type, std::move(doc),
          [&v, type, size, lo, hi](const YAML::Node& n) {
            std::vector<double> out;
            for (const auto& item : sequence(n, type)) out.push_back(parse_real(item, type, lo, hi));
            if (out.size() != size) expected(type, n);
            v = out;
          },
          [&v] {
            auto list = flow_list();
            for (auto x : v) list.push_back(plain(format_double(x)));
            return list;
          }};
}

// Any length; an empty vector stands for `word` (the length is a cross-field check).
Field maybe_real_list(std::string path, std::vector<double>& v, const char* word, Bound lo, Bound hi,
                      std::string doc) {
  return maybe_list(
      std::move(path), v, word, std::string(word) + " or a non-empty list of numbers" + real_range(lo, hi),
      std::move(doc), [lo, hi](const YAML::Node& item, const std::string& type) { return parse_real(item, type, lo, hi); },
      [](double x) { return format_double(x); });
}

Field text_list(std::string path, std::vector<std::string>& v, std::string doc) {
  std::string type = "a list of strings";
  return {path, type, std::move(doc),
          [&v, type](const YAML::Node& n) {
            std::vector<std::string> out;
            for (const auto& item : sequence(n, type)) out.push_back(scalar(item, type));
            v = out;
          },
          [&v] {
            auto list = flow_list();
            for (const auto& x : v) list.push_back(plain(x));
            return list;
          }};
}

}  // namespace

// One row per config key: a declarative table, as long as there are keys.
std::vector<Field> fields(Config& c) {  // NOLINT(readability-function-size): the key table
  auto& m = c.model.spec;
  auto& ext = m.extension;
  auto& t = c.train;
  return {
      text("run.name", c.run.name, "Name used in logs and result tables.").with({KeyRole::grid}),
      text("run.output_dir", c.run.output_dir,
           "Run directory (config.yaml, metrics.jsonl, checkpoints/, final/); relative to the working directory.").with({KeyRole::grid}),
      integer("run.seed", c.run.seed, 0, kMaxInt, "Seeds initialisation, data order and sampling.").with({KeyRole::resume}),
      choice("run.device", c.run.device, kDevices, "auto picks cuda when this build and machine have it."),
      integer("run.threads", c.run.threads, 0, 1024, "Intra-op threads per process; 0 uses every core of this process's share."),
      choice("run.log_level", c.run.log_level, kLogLevels, "Console and log-file verbosity."),
      flag("run.log_all_ranks", c.run.log_all_ranks,
           "Every rank logs to output_dir/logs/rank-<r>.log instead of rank 0 alone to train.log; rank 0 keeps the console."),

      text("model.init", c.model.init, "scratch, hf:DIR (a transformers folder) or checkpoint:DIR.").with({KeyRole::grid, KeyRole::resume}),
      choice("model.arch", m.arch, models::kArchs,
             "Block layout and HF naming: gpt2 (learned APE), gpt_neox (RoPE), bloom (ALiBi), llama (RoPE, RMSNorm, SwiGLU, GQA; also Mistral and Qwen2).").with({KeyRole::model_shape, KeyRole::resume}),
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
      flag("model.activation_checkpointing", m.activation_checkpointing,
           "Recompute each block in backward to save activation memory.").with({KeyRole::stored_model}),

      text("data.store", c.data.store, "Token store directory written by `segtrain prepare` (required).").with({KeyRole::grid, KeyRole::resume}),
      integer("data.train_length", c.data.train_length, 1, kMaxInt, "L_t: length of every training sequence.").with({KeyRole::resume}),
      integer("data.extended_length", c.data.extended_length, 1, kMaxInt,
              "L_e: window length cut from documents; >= train_length.").with({KeyRole::grid, KeyRole::resume}),
      choice("data.sampler.method", c.data.sampler.method, data::kSamplerMethods,
             "How an L_t sequence is built from an L_e window (seed 004, section 3.3).").with({KeyRole::grid, KeyRole::resume}),
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
      integer("data.prefetch", c.data.prefetch, 1, 1024, "Batches prepared ahead on the loader thread."),
      flag("data.allow_tokenizer_mismatch", c.data.allow_tokenizer_mismatch,
           "Train a model.init base on a store made with another tokenizer (refused otherwise: its ids would "
           "mean other tokens to the model); a warning then."),

      maybe_integer("train.budget.tokens", t.budget.tokens, "null", 1,
                    "Training tokens to process; setting it turns compute_equivalent off.").with({KeyRole::resume}),
      flag("train.budget.compute_equivalent", t.budget.compute_equivalent,
           "Seed 004 eq. 2: L_e/L_t epochs for segmented samplers, 1 epoch for full.").with({KeyRole::grid, KeyRole::resume}),
      integer("train.micro_batch_size", t.micro_batch_size, 1, kMaxInt, "Sequences per forward pass and rank."),
      integer("train.grad_accum", t.grad_accum, 1, kMaxInt, "Micro-batches per optimizer step."),
      real("train.lr", t.lr, above(0), kNoHigh, "Peak learning rate.").with({KeyRole::optimizer}),
      maybe_real("train.min_lr", t.min_lr, "auto", at_least(0), kNoHigh, "Learning rate at the end of the schedule; <= lr; auto is lr / 10.").with({KeyRole::optimizer}),
      integer("train.warmup_steps", t.warmup_steps, 0, kMaxInt, "Linear warmup steps.").with({KeyRole::optimizer}),
      choice("train.schedule", t.schedule, kSchedules, "Decay after warmup.").with({KeyRole::optimizer}),
      real("train.weight_decay", t.weight_decay, at_least(0), kNoHigh, "AdamW decoupled weight decay.").with({KeyRole::optimizer}),
      text_list("train.no_decay", t.no_decay,
                "Parameters whose name contains one of these are not decayed (1-D parameters never are).").with({KeyRole::optimizer}),
      real_list("train.betas", t.betas, 2, at_least(0), below(1), "AdamW betas.").with({KeyRole::optimizer}),
      real("train.eps", t.eps, above(0), kNoHigh, "AdamW epsilon.").with({KeyRole::optimizer}),
      real("train.grad_clip", t.grad_clip, at_least(0), kNoHigh, "Global gradient-norm clip; 0 disables.").with({KeyRole::optimizer}),
      choice("train.precision", t.precision, kPrecisions, "Compute precision (bf16 autocast; positions stay fp32).").with({KeyRole::resume}),
      choice("train.param_dtype", t.param_dtype, kPrecisions,
             "Parameters and gradients held in fp32, or in bf16 with an fp32 master copy of the parameters, the "
             "moments and the summed gradient in the optimizer (2 + 2 + 16/N bytes a parameter with "
             "distributed.shard_optimizer over N ranks, else 2 + 2 + 16); bf16 needs train.precision: bf16. "
             "Checkpoints hold the fp32 master weights either way, so a run resumes in the other storage."),
      choice("train.reduce_dtype", t.reduce_dtype, kPrecisions,
             "The dtype gradients are summed over ranks in, with train.param_dtype: bf16 (accumulated in fp32 "
             "across micro-batches either way); fp32 parameters are reduced in fp32."),
      integer("train.checkpoint_every", t.checkpoint_every, 0, kMaxInt, "Steps between checkpoints; 0: final only."),
      integer("train.keep_last", t.keep_last, 0, kMaxInt, "Step checkpoints kept; 0 keeps all."),
      flag("train.final_optimizer_state", t.final_optimizer_state,
           "Keep the optimizer's state in final/ (only needed to train the finished run further); step checkpoints always keep it."),
      integer("train.eval_every", t.eval_every, 0, kMaxInt, "Steps between evaluations; 0: at the end only."),
      integer("train.log_every", t.log_every, 1, kMaxInt, "Steps between metrics lines; the first step and the last are always shown."),
      integer("train.max_bad_steps", t.max_bad_steps, 1, kMaxInt,
              "Consecutive non-finite losses (steps skipped) before the run aborts."),
      maybe_integer("train.loss_chunk_tokens", t.loss_chunk_tokens, "auto", 0,
                    "Tokens per slice of the LM head and cross-entropy (training and evaluation), so the full "
                    "[tokens x vocab] logits never exist at once; auto: slices of about 64 MiB of fp32 logits; "
                    "0: the whole logits at once."),
      flag("train.tensorboard", t.tensorboard, "Also write TensorBoard scalars to output_dir/tensorboard."),

      maybe_integer_list("eval.lengths", c.eval.lengths, "auto", 2,
                         "Sequence lengths to report perplexity at; auto is L_t, 2 L_t, 4 L_t, ... up to L_e.").with({KeyRole::grid}),
      text("eval.split", c.eval.split, "Store split to evaluate on."),
      flag("eval.per_position", c.eval.per_position, "Also write the per-position loss curve (CSV and SVG)."),
      integer("eval.max_sequences", c.eval.max_sequences, 0, kMaxInt, "Windows per length; 0: all."),
      integer("eval.windows_per_document", c.eval.windows_per_document, 0, kMaxInt,
              "Windows taken from one document before the next; 1: every window from another document (text "
              "that differs, for intervals over windows); 0: all a document holds."),
      integer("eval.stride", c.eval.stride, 0, kMaxInt,
              "0: non-overlapping windows (seed 004); otherwise a sliding window with this stride."),
      integer("eval.batch_size", c.eval.batch_size, 1, kMaxInt, "Sequences per evaluation forward pass."),
      integer("eval.passkey_trials", c.eval.passkey_trials, 0, kMaxInt,
              "Passkey-retrieval prompts per length at the end of a run; 0: off. Written with the store's own tokenizer (sentencepiece or BPE)."),
      choice("eval.passkey_style", c.eval.passkey_style, kPasskeyStyles,
             "digits: the usual pass-key prompt; recall: the synthetic corpus's 'recall : the password of X is' form."),
      choice("eval.precision", c.eval.precision, kEvalPrecisions,
             "train: as train.precision (bf16 autocast when the run trains so); fp32 or bf16 to choose (positions "
             "and the loss stay fp32 either way)."),

      choice("distributed.backend", c.distributed.backend, kBackends, "auto: nccl on CUDA, gloo on CPU."),
      integer("distributed.timeout_s", c.distributed.timeout_s, 1, kMaxInt,
              "Seconds a collective may wait before the run fails."),
      real("distributed.bucket_mb", c.distributed.bucket_mb, above(0), kNoHigh,
           "Gradient all-reduce bucket size in MB; each bucket is summed over ranks while backward still runs."),
      flag("distributed.shard_optimizer", c.distributed.shard_optimizer,
           "ZeRO-1: each rank keeps AdamW's moments for its 1/N slice of every bucket; gradients are "
           "reduce-scattered and the updated slices all-gathered. Checkpoints hold the whole optimizer state."),
  };
}

}  // namespace segtrain::trainer::schema
