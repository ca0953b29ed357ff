#pragma once
// What a LoRA run asks for (model.adapters.lora, train.trainable) and its rules,
// without LibTorch: the run config checks them at the file's line, and the LoRA
// converter (lora.h) refuses them as the last guard.
//
// Targets are named by what a projection does, not by a family's module names:
// q, k, v, o, gate, up, down on the Llama block (q_proj ... down_proj), and qkv, o,
// up, down on Megatron's (its one q/k/v projection, the attention output, the MLP's
// two), so one config adapts any family.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/config_problem.h"
#include "models/arch.h"

namespace segtrain::models {

struct LoraConfig {
  int64_t rank = 0;  // 0: no adapters
  double alpha = 16;
  double dropout = 0;
  std::vector<std::string> targets = {"q", "k", "v", "o"};  // LongLoRA's
};

// What trains in a LoRA run besides the base's frozen weights (train.trainable):
// adapters always; norms, embeddings (the token and learned position tables) and the
// head as LongLoRA's "LoRA+" trains the first two.
inline const std::vector<std::string> kTrainableGroups = {"adapters", "norms", "embeddings", "head"};
inline const std::vector<std::string> kLoraTargets = {"q", "k", "v", "o", "gate", "up", "down", "qkv"};

// The module a target adapts in `block`'s blocks ("q" -> "q_proj", "qkv" -> "qkv"),
// nullopt where that block has no such projection (q alone in a Megatron block).
std::optional<std::string> lora_module(BlockKind block, const std::string& target);

// Empty when the settings hold together for `arch` (keys named as in the run config).
std::vector<ConfigProblem> lora_problems(const LoraConfig& lora, const std::vector<std::string>& trainable, Arch arch,
                                         bool activation_checkpointing);

}  // namespace segtrain::models
