#pragma once
// How transformers names a family's tensors: one declarative table per family
// (models/spec/families/), read by both import (read_hf_tensors) and export (export_hf)
// so the two directions cannot drift apart.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/spec/config.h"

namespace segtrain::models {

// One parameter. "{}" is the layer slot: the same index on both sides.
struct HfTensorName {
  std::string ours;        // TransformerLM's parameter name, e.g. "blocks.{}.qkv.weight"
  std::string hf;          // transformers' name without the base-model prefix, e.g. "h.{}.attn.c_attn.weight"
  bool prefixed = true;    // lives under the base-model prefix ("transformer." / "gpt_neox.")
  bool transpose = false;  // GPT-2's Conv1D stores [in, out]; our Linear is [out, in]
};

// One HF tensor that holds several of our parameters concatenated along `dim` (Phi-3's
// qkv_proj is cat(q, k, v), its gate_up_proj cat(gate, up)): import splits it into
// `parts` (sizes along `dim` from the folder's config), export concatenates them back.
// The table says it once, so neither direction can split differently from the other.
struct HfFusedTensor {
  std::string hf;                  // transformers' name, e.g. "layers.{}.self_attn.qkv_proj.weight"
  std::vector<std::string> parts;  // ours in concatenation order, e.g. "blocks.{}.q_proj.weight", ...
  // Each part's size along `dim` for a model of config `c`, in parts' order.
  std::vector<int64_t> (*sizes)(const ModelConfig& c) = nullptr;
  int64_t dim = 0;
  bool prefixed = true;            // lives under the base-model prefix
};

struct HfNameTable {
  std::string prefix;                // the base-model prefix, with its dot
  std::vector<HfTensorName> tensors;
  // Tensors import drops without a warning, matched as a name's last components:
  // attention mask buffers, rotary inv_freq, the copy of a tied head.
  std::vector<std::string> ignored;
  // HF tensors that are several of ours (none for most families); a parameter named
  // here is not also in `tensors`.
  std::vector<HfFusedTensor> fused = {};
};

// `name` renamed from `from` to `to` when it has the shape of pattern `from`
// ("{}" matching a layer index written without leading zeros), else nullopt:
// rename_slot("blocks.{}.ln1.bias", "h.{}.ln_1.bias", "blocks.3.ln1.bias") == "h.3.ln_1.bias".
std::optional<std::string> rename_slot(const std::string& from, const std::string& to, const std::string& name);

}  // namespace segtrain::models
