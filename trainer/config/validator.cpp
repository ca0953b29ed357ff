// Cross-field and file-system checks on a parsed config. Each message starts
// with where the offending key was set (file:line:col, the --set argument, or the
// file for a default) and names the key.
#include <cmath>
#include <filesystem>
#include <limits>

#include "common/numbers.h"
#include "data/sampler_rules.h"
#include "trainer/config/config.h"
#include "trainer/config/eval_rules.h"
#include "trainer/config/model_ref.h"
#include "trainer/config/schema.h"

namespace segtrain::trainer {
namespace {

namespace fs = std::filesystem;
using schema::format_double;

struct Checker {
  const LoadedConfig& loaded;
  std::vector<std::string> errors;
  bool check_paths = true;

  std::string where(const std::string& key) const {
    auto it = loaded.origins.find(key);
    return it != loaded.origins.end() ? it->second : loaded.source + " (default)";
  }
  void fail(const std::string& key, const std::string& message) {
    errors.push_back(where(key) + ": " + key + ": " + message);
  }
  bool given(const std::string& key) const { return loaded.origins.count(key) > 0; }
};

void check_data(Checker& ck, const Config& c) {
  const auto& d = c.data;
  if (d.store.empty()) {
    ck.fail("data.store", "required: the token store directory written by `segtrain prepare`");
  } else if (!ck.check_paths) {
  } else if (!fs::is_directory(d.store)) {
    ck.fail("data.store", "'" + d.store + "' does not exist or is not a directory; create it with `segtrain prepare`");
  } else if (!fs::exists(fs::path(d.store) / "meta.json")) {
    ck.fail("data.store", "'" + d.store + "' is not a token store (no meta.json); create it with `segtrain prepare`");
  }

  for (const auto& problem : data::sampler_problems(d)) ck.fail(problem.key, problem.message);
}

// The Llama-family keys: sizes that hold together, and set only on llama.
void check_llama_keys(Checker& ck, const models::ModelConfig& m) {
  if (m.n_kv_heads && m.n_heads % *m.n_kv_heads != 0)
    ck.fail("model.n_kv_heads", "n_heads = " + std::to_string(m.n_heads) + " is not divisible by n_kv_heads = " +
                                    std::to_string(*m.n_kv_heads));
  if (m.arch == models::Arch::llama) {
    if (ck.given("model.rope.rotary_pct") && m.rope.rotary_pct != 1.0)
      ck.fail("model.rope.rotary_pct", "llama rotates the whole head (transformers' Llama, Mistral and Qwen2); use 1");
    return;
  }
  const std::string not_llama = "applies to model.arch llama only, not " + std::string(enum_name(models::kArchs, m.arch));
  // Their defaults (auto, false) are what the other architectures do, so a resolved
  // config (which lists every key) passes; only a value that asks for more is refused.
  const std::pair<const char*, bool> asked[] = {
      {"model.n_kv_heads", m.n_kv_heads.has_value()}, {"model.head_dim", m.head_dim.has_value()},
      {"model.qkv_bias", m.qkv_bias},                 {"model.o_bias", m.o_bias},
      {"model.mlp_bias", m.mlp_bias},                 {"model.tie_embeddings", m.tie_embeddings}};
  for (const auto& [key, set] : asked)
    if (set && ck.given(key)) ck.fail(key, not_llama);
}

void check_model(Checker& ck, const Config& c) {
  const auto& m = c.model.spec;
  const std::string& init = c.model.init;
  if (const auto ref = parse_model_ref(init); !ref) {
    ck.fail("model.init", "expected scratch, hf:DIR or checkpoint:DIR, got '" + init + "'");
  } else if (ref->from_folder()) {
    const std::string what = ref->description();
    if (ref->dir.empty()) ck.fail("model.init", "expected " + what + " directory after the colon");
    else if (!ck.check_paths) {
    } else if (!fs::is_directory(ref->dir)) ck.fail("model.init", "'" + ref->dir + "' does not exist or is not a directory");
    else if (!fs::exists(fs::path(ref->dir) / ref->marker_file()))
      ck.fail("model.init", "'" + ref->dir + "' has no " + ref->marker_file() + "; expected " + what + " directory");
  }

  if (!m.head_dim && m.d_model % m.n_heads != 0)
    ck.fail("model.n_heads", "d_model = " + std::to_string(m.d_model) + " is not divisible by n_heads = " +
                                 std::to_string(m.n_heads));
  else if (m.arch == models::Arch::gpt_neox) {
    const double rotary = static_cast<double>(m.d_model / m.n_heads) * m.rope.rotary_pct;
    if (!is_integer(rotary) || std::llround(rotary) % 2 != 0 || std::llround(rotary) < 2)
      ck.fail("model.rope.rotary_pct", "head_dim * rotary_pct = " + format_double(rotary) +
                                           " rotated dimensions; that must be an even integer >= 2");
  }

  check_llama_keys(ck, m);

  using models::ExtensionMethod;
  const auto scheme = models::position_scheme(m.arch);
  const auto method = m.extension.method;
  const bool rope_only = method == ExtensionMethod::ntk || method == ExtensionMethod::dynamic_ntk ||
                         method == ExtensionMethod::yarn || method == ExtensionMethod::llama3 ||
                         method == ExtensionMethod::longrope;
  const bool alibi_only = method == ExtensionMethod::ntk_alibi || method == ExtensionMethod::dynamic_interpolate;
  const std::string arch = enum_name(models::kArchs, m.arch);
  const std::string method_name = enum_name(models::kExtensionMethods, method);
  if (rope_only && scheme != models::PositionScheme::rope)
    ck.fail("model.extension.method", method_name + " scales RoPE and needs arch gpt_neox or llama, not " + arch);
  if (alibi_only && scheme != models::PositionScheme::alibi)
    ck.fail("model.extension.method", method_name + " scales ALiBi slopes and needs arch bloom, not " + arch);
  const auto& llama3 = m.extension.llama3;
  if (method == ExtensionMethod::llama3 && llama3.high_freq_factor <= llama3.low_freq_factor)
    ck.fail("model.extension.llama3.high_freq_factor", format_double(llama3.high_freq_factor) +
                                                           " must be above low_freq_factor = " +
                                                           format_double(llama3.low_freq_factor));
  if (method == ExtensionMethod::longrope)
    for (const auto& [key, factors] : {std::pair{"short_factor", &m.extension.longrope.short_factor},
                                       std::pair{"long_factor", &m.extension.longrope.long_factor}})
      if (factors->empty())
        ck.fail(std::string("model.extension.longrope.") + key,
                "longrope needs its factor lists (one per rotary frequency, rotary dimensions / 2)");
  if (method == ExtensionMethod::none && ck.given("model.extension.factor") && m.extension.factor)
    ck.fail("model.extension.factor", "has no effect while model.extension.method is none; set the method too");

  // A learned table has no rows past max_positions: training at L_e positions
  // needs interpolation or a table that is already long enough.
  const bool segmented = c.data.sampler.method != data::SamplerMethod::truncate;
  if (scheme == models::PositionScheme::learned && method == ExtensionMethod::none && segmented &&
      c.data.extended_length > c.data.train_length) {
    std::optional<int64_t> rows = m.max_positions;
    if (!rows && init == "scratch") rows = c.data.train_length;
    if (rows && *rows < c.data.extended_length)
      ck.fail("model.extension.method",
              "sampler " + std::string(enum_name(data::kSamplerMethods, c.data.sampler.method)) +
                  " uses positions up to L_e - 1 = " + std::to_string(c.data.extended_length - 1) +
                  " but the gpt2 position table has " + std::to_string(*rows) +
                  " rows; set model.extension.method: interpolate (seed 004, 3.2)");
  }
}

void check_train(Checker& ck, const Config& c) {
  const auto& t = c.train;
  if (!t.budget.compute_equivalent && !t.budget.tokens)
    ck.fail("train.budget.compute_equivalent", "is false but train.budget.tokens is not set; give one budget");
  if (t.min_lr > t.lr)
    ck.fail("train.min_lr", format_double(t.min_lr) + " is above train.lr = " + format_double(t.lr));
}

void check_run_and_eval(Checker& ck, const Config& c) {
  if (c.run.output_dir.empty()) ck.fail("run.output_dir", "must not be empty");
  if (c.run.name.empty()) ck.fail("run.name", "must not be empty");
  if (c.eval.split != "train" && c.eval.split != "valid")
    ck.fail("eval.split", "expected train or valid, got '" + c.eval.split + "'");
  for (const auto& problem : window_problems(c.eval.stride, c.eval.lengths)) ck.fail(problem.key, problem.message);
}

}  // namespace

std::vector<std::string> validate_config(const LoadedConfig& loaded, bool check_paths, ConfigUse use) {
  Checker ck{loaded, {}, check_paths};
  check_data(ck, loaded.config);
  if (use == ConfigUse::sample) return ck.errors;
  check_model(ck, loaded.config);
  check_train(ck, loaded.config);
  check_run_and_eval(ck, loaded.config);
  return ck.errors;
}

}  // namespace segtrain::trainer
