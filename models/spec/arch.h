#pragma once
// The block architectures a TransformerLM builds (model.arch) and, for each, the
// layout TransformerLM reads instead of asking which architecture it is: one row a
// block architecture. Every family (models/spec/families/family.h) builds one of them: gpt2,
// gpt_neox and bloom their own, Llama, Mistral, Qwen2, Qwen3 and Phi-3 Llama's. With the
// families, the only code that names an Arch (tests/layout_test.sh). Plain C++ (no
// LibTorch): the config rules and the run config read it too.
#include <iterator>

#include "common/enum_names.h"

namespace segtrain::models {

enum class Arch { gpt2, gpt_neox, bloom, llama };
inline constexpr EnumName<Arch> kArchs[] = {
    {"gpt2", Arch::gpt2}, {"gpt_neox", Arch::gpt_neox}, {"bloom", Arch::bloom}, {"llama", Arch::llama}};

inline constexpr Arch kDefaultArch = Arch::gpt2;  // model.arch's default (Karypis et al.'s model)

enum class PositionScheme { learned, rope, alibi };

// The block module: Megatron's (LayerNorm, one q/k/v projection, GELU MLP;
// models/modules/transformer.h Block) or Llama's (RMSNorm, q/k/v projections apart, SwiGLU,
// grouped-query attention and the keys that configure it; models/modules/llama_block.h).
enum class BlockKind { megatron, llama };

// How a Megatron block's one projection holds q, k and v: [q|k|v] over the whole
// width (GPT-2), or [q,k,v] head after head (GPT-NeoX, BLOOM). The Llama block has
// three projections (separate).
enum class QkvPacking { separate, concatenated, per_head };

enum class Norm { layer_norm, rms_norm };

// The LM head: wte's weight (tied), a weight of its own (untied), or as
// model.tie_embeddings says (by_config).
enum class HeadTying { tied, untied, by_config };

struct ArchLayout {
  Arch arch;
  PositionScheme positions;
  BlockKind block;
  QkvPacking qkv;
  Norm norm;                 // every norm of the model, the final one included
  bool exact_gelu;           // the MLP's GELU is erf's, not the tanh approximation
  bool parallel_residual;    // x + attention(ln1(x)) + mlp(ln2(x)), not one after the other
  bool embedding_norm;       // a LayerNorm right after the token embedding
  bool partial_rotary;       // model.rope.rotary_pct may rotate part of each head
  HeadTying head;
};

inline constexpr ArchLayout kArchLayouts[] = {
    {.arch = Arch::gpt2, .positions = PositionScheme::learned, .block = BlockKind::megatron,
     .qkv = QkvPacking::concatenated, .norm = Norm::layer_norm, .exact_gelu = false, .parallel_residual = false,
     .embedding_norm = false, .partial_rotary = false, .head = HeadTying::tied},
    {.arch = Arch::gpt_neox, .positions = PositionScheme::rope, .block = BlockKind::megatron,
     .qkv = QkvPacking::per_head, .norm = Norm::layer_norm, .exact_gelu = true, .parallel_residual = true,
     .embedding_norm = false, .partial_rotary = true, .head = HeadTying::untied},
    {.arch = Arch::bloom, .positions = PositionScheme::alibi, .block = BlockKind::megatron,
     .qkv = QkvPacking::per_head, .norm = Norm::layer_norm, .exact_gelu = false, .parallel_residual = false,
     .embedding_norm = true, .partial_rotary = false, .head = HeadTying::tied},
    {.arch = Arch::llama, .positions = PositionScheme::rope, .block = BlockKind::llama,
     .qkv = QkvPacking::separate, .norm = Norm::rms_norm, .exact_gelu = false, .parallel_residual = false,
     .embedding_norm = false, .partial_rotary = false, .head = HeadTying::by_config},
};

constexpr const ArchLayout& arch_layout(Arch arch) {
  for (const auto& layout : kArchLayouts)
    if (layout.arch == arch) return layout;
  return kArchLayouts[0];  // unreachable: every Arch has its row (static_assert below)
}

constexpr bool every_arch_has_its_layout() {
  for (const auto& entry : kArchs)
    if (arch_layout(entry.second).arch != entry.second) return false;
  return std::size(kArchs) == std::size(kArchLayouts);
}
static_assert(every_arch_has_its_layout(), "kArchLayouts needs one row per Arch");

constexpr PositionScheme position_scheme(Arch arch) { return arch_layout(arch).positions; }

}  // namespace segtrain::models
