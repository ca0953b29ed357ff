#pragma once
// What the families' config.json readers and writers share: checked fields (an
// InputError naming config.json and the key, never a crash on a wrong type), and
// RoPE settings in both of transformers' spellings.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "common/error.h"
#include "models/spec/config.h"

namespace segtrain::models::hf {

using json = nlohmann::json;

template <class T>
T field(const json& j, const std::string& key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) throw InputError(source + ": missing field \"" + key + "\"");
  // nlohmann casts a float such as 1e300 to an integer type, which is undefined (UBSan, fuzz_hf_config).
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    if (!j[key].is_number_integer())
      throw InputError(source + ": field \"" + key + "\" must be an integer (" + j[key].dump() + ")");
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    throw InputError(source + ": field \"" + key + "\" has the wrong type (" + j[key].dump() + ")");
  }
}

template <class T>
T field_or(const json& j, const std::string& key, T fallback, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return field<T>(j, key, source);
}

// A hidden size: at most 2^40, so the 4 * hidden_size MLP width and the shapes
// built from it cannot overflow (UBSan, fuzz_hf_config).
int64_t hidden_size(const json& j, const std::string& key, const std::string& source);

// InputError "<source>: <what> is not supported by segtrain's TransformerLM" unless ok.
void require(bool ok, const std::string& source, const std::string& what);

// The sizes under transformers' standard names (vocab_size, hidden_size,
// num_hidden_layers, num_attention_heads, intermediate_size) with `arch`'s blocks.
void read_standard_sizes(const json& cfg, Arch arch, ModelConfig& c, const std::string& source);

// transformers 5 nests rope settings in rope_parameters; older files use
// rope_theta / rotary_pct / rotary_emb_base at the top and a rope_scaling block.
// With both, rope_scaling's keys win, as transformers 5 takes that block first.
json rope_settings(const json& cfg);

// The rope_type of a rope_scaling / rope_parameters block as an extension method.
// Types segtrain does not implement are refused, never ignored.
void read_rope_scaling(const json& cfg, const json& rope, ModelConfig& c, const std::string& source);

// RoPE settings of an export in both of transformers' spellings, so 4.4x and 5.x
// load the folder alike: a 4.x "rope_scaling" block holding only the keys its
// validator knows for the rope_type (null for default rope) beside a top-level
// rope_theta, and the same as transformers 5's "rope_parameters" (which 5.x reads
// from rope_scaling too when both are there).
struct RopeExport {
  json scaling;                  // rope_scaling: null or {rope_type, factor, ...}
  json parameters;               // rope_parameters: scaling + rope_theta + partial_rotary_factor
  double theta = 0;
  int64_t max_positions = 0;     // max_position_embeddings: the extended length where it applies
  std::optional<int64_t> original_length;  // top-level original_max_position_embeddings (longrope)
  std::string note;              // what differs from segtrain, if anything
};
RopeExport rope_export(const ModelConfig& c, double rotary_pct);

}  // namespace segtrain::models::hf
