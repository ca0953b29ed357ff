#include "models/converters/lora_config.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/numbers.h"

namespace segtrain::models {

namespace {

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

bool listed(const std::vector<std::string>& words, const std::string& word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

}  // namespace

std::optional<std::string> lora_module(BlockKind block, const std::string& target) {
  if (block == BlockKind::llama) {
    if (target == "qkv") return std::nullopt;
    if (listed({"q", "k", "v", "o", "gate", "up", "down"}, target)) return target + "_proj";
    return std::nullopt;
  }
  if (target == "qkv") return "qkv";
  if (target == "o") return "proj";
  if (target == "up") return "fc";
  if (target == "down") return "fc_out";
  return std::nullopt;
}

std::vector<ConfigProblem> lora_problems(const LoraConfig& lora, const std::vector<std::string>& trainable, Arch arch,
                                         bool activation_checkpointing) {
  std::vector<ConfigProblem> out;
  if (lora.rank < 0) out.push_back({"model.adapters.lora.rank", "must be >= 0 (0: no adapters), got " + std::to_string(lora.rank)});
  for (const auto& group : trainable)
    if (!listed(kTrainableGroups, group))
      out.push_back({"train.trainable", "unknown group '" + group + "' (expected some of " + joined(kTrainableGroups) + ")"});
  if (lora.rank <= 0) {
    if (trainable != std::vector<std::string>{"adapters"})
      out.push_back({"train.trainable", "applies to a LoRA run (model.adapters.lora.rank > 0), whose base is frozen; "
                                        "without adapters every weight trains (train.freeze freezes some)"});
    return out;
  }
  if (!listed(trainable, "adapters"))
    out.push_back({"train.trainable", "must list adapters: a LoRA run trains its adapters (with norms, embeddings or "
                                      "head besides, as LongLoRA's LoRA+)"});
  if (!(lora.alpha > 0) || !std::isfinite(lora.alpha))
    out.push_back({"model.adapters.lora.alpha", "must be a positive number, got " + format_double(lora.alpha)});
  if (!(lora.dropout >= 0 && lora.dropout < 1))
    out.push_back({"model.adapters.lora.dropout", "must be in [0, 1), got " + format_double(lora.dropout)});
  else if (lora.dropout > 0 && activation_checkpointing)
    out.push_back({"model.adapters.lora.dropout", "must be 0 with model.activation_checkpointing: a recomputed block "
                                                  "would draw another dropout mask than its forward did"});
  if (lora.targets.empty()) out.push_back({"model.adapters.lora.targets", "must name at least one projection"});
  const BlockKind block = arch_layout(arch).block;
  std::set<std::string> seen;
  for (const auto& target : lora.targets) {
    if (!seen.insert(target).second) {
      out.push_back({"model.adapters.lora.targets", "names " + target + " twice"});
    } else if (!listed(kLoraTargets, target)) {
      out.push_back({"model.adapters.lora.targets", "unknown projection '" + target + "' (expected some of " +
                                                        joined(kLoraTargets) + ")"});
    } else if (!lora_module(block, target)) {
      std::vector<std::string> fits;
      for (const auto& t : kLoraTargets)
        if (lora_module(block, t)) fits.push_back(t);
      out.push_back({"model.adapters.lora.targets",
                     target + " is no projection of model.arch " + enum_name(kArchs, arch) + "'s block (it has " +
                         joined(fits) + (block == BlockKind::megatron ? "; q, k and v are one projection, qkv" : "") +
                         ")"});
    }
  }
  return out;
}

}  // namespace segtrain::models
