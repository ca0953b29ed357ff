#pragma once
// Architecture and positional-extension hyperparameters of a TransformerLM. Also
// what a checkpoint stores as model_config.json.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/enum_names.h"
#include "models/spec/arch.h"  // Arch, its layout and position scheme

namespace segtrain::models {

// How positions past the pretrained length are handled (seeds 000-004).
//   interpolate : APE table interpolation, RoPE linear PI, ALiBi slope interpolation
//   ntk, dynamic_ntk, yarn : RoPE only;  ntk_alibi : ALiBi only
//   llama3, longrope       : RoPE only, as transformers' rope types of those names
//   dynamic_interpolate    : ALiBi interpolation by actual sequence length (Al-Khateeb et al. 2023)
enum class ExtensionMethod { none, interpolate, dynamic_interpolate, ntk, dynamic_ntk, yarn, ntk_alibi, llama3, longrope };
inline constexpr EnumName<ExtensionMethod> kExtensionMethods[] = {
    {"none", ExtensionMethod::none},
    {"interpolate", ExtensionMethod::interpolate},
    {"dynamic_interpolate", ExtensionMethod::dynamic_interpolate},
    {"ntk", ExtensionMethod::ntk},
    {"dynamic_ntk", ExtensionMethod::dynamic_ntk},
    {"yarn", ExtensionMethod::yarn},
    {"ntk_alibi", ExtensionMethod::ntk_alibi},
    {"llama3", ExtensionMethod::llama3},
    {"longrope", ExtensionMethod::longrope}};

struct RopeConfig {
  double theta = 10000.0;
  double rotary_pct = 1.0;  // fraction of each head's dimensions that is rotated
};

struct YarnConfig {
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> attention_factor;  // nullopt: 0.1*ln(factor)+1
};

// Llama 3.1's NTK-by-parts: wavelengths longer than original_length / low_freq_factor
// are interpolated by the factor, shorter than original_length / high_freq_factor kept,
// and the band between blended.
struct Llama3Config {
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
};

// LongRoPE (Phi-3): one rescale factor per rotary frequency, short_factor up to the
// original length and long_factor past it (chosen by the sequence's largest position
// id, as transformers does); rotary_dim / 2 values each.
struct LongRopeConfig {
  std::vector<double> short_factor;
  std::vector<double> long_factor;
  std::optional<double> attention_factor;  // nullopt: sqrt(1 + ln(factor) / ln(original_length))
};

struct ExtensionConfig {
  ExtensionMethod method = ExtensionMethod::none;
  std::optional<double> factor;            // nullopt ("auto"): L_e / L_t
  std::optional<int64_t> original_length;  // nullopt ("auto"): the length the base was trained at
  YarnConfig yarn;
  Llama3Config llama3;
  LongRopeConfig longrope;
};

// model.activation_checkpointing: which blocks recompute their forward in backward, keeping only
// their input. The first ones: a recomputed block's activations exist only while backward is in it,
// and the first blocks are the last backward reaches, when the later blocks' are freed.
struct ActivationCheckpointing {
  enum class Kind {
    none,       // false
    all,        // true
    first,      // an integer N: the first N blocks
    automatic,  // auto: every block until the trainer measures the fewest that fit its memory budget
  };
  Kind kind = Kind::none;
  int64_t blocks = 0;  // Kind::first

  static ActivationCheckpointing every_block() { return {Kind::all, 0}; }
  static ActivationCheckpointing every_block_if(bool on) { return on ? every_block() : ActivationCheckpointing{}; }
  static ActivationCheckpointing first_blocks(int64_t n) { return {Kind::first, n}; }
  // How many of a model's `n_layers` blocks recompute (the first that many).
  int64_t of(int64_t n_layers) const {
    switch (kind) {
      case Kind::none: return 0;
      case Kind::first: return blocks < n_layers ? blocks : n_layers;
      case Kind::all:
      case Kind::automatic: break;
    }
    return n_layers;
  }
  // Whether any block may recompute (auto may).
  bool any() const { return kind == Kind::all || kind == Kind::automatic || (kind == Kind::first && blocks > 0); }
  bool operator==(const ActivationCheckpointing&) const = default;
};

struct ModelConfig {
  Arch arch = kDefaultArch;
  std::optional<int64_t> vocab_size;     // nullopt ("auto"): from the token store
  int64_t d_model = 128;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  std::optional<int64_t> d_ff;           // nullopt ("auto"): 4 * d_model
  std::optional<int64_t> max_positions;  // nullopt ("auto"): data.train_length
  double layer_norm_eps = 1e-5;          // also RMSNorm's epsilon
  // The Llama block's only (arch_layout(arch).block == BlockKind::llama; Megatron blocks fix
  // these by their layout):
  std::optional<int64_t> n_kv_heads;     // nullopt ("auto"): n_heads (grouped-query attention when fewer)
  std::optional<int64_t> head_dim;       // nullopt ("auto"): d_model / n_heads
  bool qkv_bias = false;                 // biases on q/k/v (Llama attention_bias, Qwen2)
  bool o_bias = false;                   // bias on the attention output (Llama attention_bias)
  bool mlp_bias = false;                 // biases on gate/up/down
  bool qk_norm = false;                  // RMSNorm over each head's q and k before RoPE (Qwen3)
  bool tie_embeddings = false;           // lm_head shares the embedding
  // Mistral/Qwen2 sliding-window attention, from an HF folder: segtrain does not
  // implement it and refuses sequences longer than the window (never ignored).
  std::optional<int64_t> sliding_window;
  // The HF model_type an imported model was read as ("phi3"): its export is written as
  // that family again where the family can hold it (Phi-3's fused tensors hold Llama's
  // block, which LlamaForCausalLM would hold too). nullopt: the first family that can.
  std::optional<std::string> hf_model_type;
  RopeConfig rope;
  ExtensionConfig extension;
  ActivationCheckpointing activation_checkpointing;
};

}  // namespace segtrain::models
