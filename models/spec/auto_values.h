#pragma once
// What each "auto" key of a ModelConfig means, and the values that follow from them, in
// one place (per key; a run's whole ModelConfig is trainer/config/resolved_model.h's,
// which resolves with these): the model reads its sizes through them, and HF export
// writes them out. Plain C++ (no LibTorch), so the config library and the rules beside
// it (config_rules.h) can call them.
#include <cstdint>

#include "models/spec/config.h"

namespace segtrain::models {

// The smallest extension factor: a method stretches the trained positions, never shrinks them.
inline constexpr double kMinExtensionFactor = 1.0;

// Values a built model needs from a config whose "auto" fields the trainer
// resolves; each throws InputError naming the key when it is still unset.
int64_t vocab_size_of(const ModelConfig& config);
int64_t max_positions_of(const ModelConfig& config);
int64_t d_ff_of(const ModelConfig& config);             // auto: 4 * d_model
int64_t original_length_of(const ModelConfig& config);  // auto: max_positions

// `factor: auto` in one place: stretch the positions the model was trained at
// (original_length) to `target_length`, never below 1; a target the model
// already covers gets 1 (the method then leaves positions as they are).
double auto_extension_factor(int64_t target_length, int64_t original_length);
double factor_of(const ModelConfig& config);            // 1 when method is none
int64_t head_dim_of(const ModelConfig& config);         // auto: d_model / n_heads
int64_t n_kv_heads_of(const ModelConfig& config);       // auto: n_heads
int64_t rotary_dim_of(const ModelConfig& config);       // int(head_dim * rotary_pct), as transformers
// Static NTK-aware RoPE's base: theta * factor^(d/(d-2)), d the rotary dims.
double ntk_base(const ModelConfig& config);

// Rows of the learned position table (gpt2): L_e = round(factor * L_t) with
// interpolate, else max_positions.
int64_t ape_rows(const ModelConfig& config);

// Whether the extension's frequencies or slopes depend on the input's length
// (dynamic NTK, dynamic interpolation, LongRoPE's short/long factors): then the
// first L tokens of a longer input are not scored as an input of L tokens.
bool positions_depend_on_length(const ModelConfig& config);

}  // namespace segtrain::models
