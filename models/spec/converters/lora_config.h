#pragma once
// What a LoRA run asks for (model.adapters.lora, train.trainable), its rules and the records
// that keep it, without LibTorch: the run config checks the rules at the file's line, and the LoRA
// converter (models/modules/converters/lora.h, the library with LibTorch) refuses them as the
// last guard. A setting LoRA gains (as DoRA's use_dora) is a field below, its row of
// kLoraSettings, its lines in the records (lora_config.cpp), its key in trainer/config/schema.cpp
// and what the adapter does with it (models/modules/converters/lora.h).
//
// Targets are named by what a projection does, not by a family's module names:
// q, k, v, o, gate, up, down on the Llama block (q_proj ... down_proj), and qkv, o,
// up, down on Megatron's (its one q/k/v projection, the attention output, the MLP's
// two), so one config adapts any family.
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/config_problem.h"
#include "models/spec/arch.h"
#include "models/spec/config.h"

namespace segtrain::models {

// The adapter's settings hold what trains beside it: only an adapter run freezes the base
// that train.trainable's groups train again, as PEFT's LoraConfig holds modules_to_save.
struct LoraConfig {
  int64_t rank = 0;  // 0: no adapters
  double alpha = 16;
  double dropout = 0;
  std::vector<std::string> targets = {"q", "k", "v", "o"};  // LongLoRA's
  std::vector<std::string> trainable = {"adapters"};        // train.trainable: kTrainableGroups
  bool use_dora = false;  // DoRA (Liu et al. 2024): each adapted weight's row norms train as a magnitude
};

// One setting of LoRA's under each of its names: in a converters.json record and under
// model.adapters.lora in the run config (`record`), in PEFT's adapter_config.json (`peft`), and
// whether continuing an adapter fixes it (`fixed_by_weights`: its weights were trained with it, so
// a run that continues them must agree) or only proposes it (dropout: how training goes on).
// train.trainable (PEFT's modules_to_save) is not a row: a continued run may train more groups.
struct LoraSetting {
  const char* record;
  const char* peft;
  bool fixed_by_weights;
};
inline constexpr LoraSetting kLoraSettings[] = {{"rank", "r", true},
                                                {"alpha", "lora_alpha", true},
                                                {"dropout", "lora_dropout", false},
                                                {"targets", "target_modules", true},
                                                {"use_dora", "use_dora", true}};
// The run config's key of a setting: "model.adapters.lora." + record.
inline std::string lora_config_key(const LoraSetting& setting) { return std::string("model.adapters.lora.") + setting.record; }

// What trains in a LoRA run besides the base's frozen weights (train.trainable):
// adapters always; norms, embeddings (the token and learned position tables) and the
// head as LongLoRA's "LoRA+" trains the first two.
inline const std::vector<std::string> kTrainableGroups = {"adapters", "norms", "embeddings", "head"};

// The group of kTrainableGroups besides "adapters" that holds parameter `name` of a model
// ("blocks.0.ln1.weight": norms), "" for none: the one definition the converter trains by and
// PEFT's modules_to_save are read by. A norm is a module whose name holds "ln" or "norm" (ln1,
// ln_f, emb_ln, q_norm), as every family's are named.
std::string trainable_group(const std::string& name);
// Whether `name` trains in a LoRA run of `trainable` on a model whose head is tied to the
// token table (`tied_head`: "head" trains that table) or not.
bool trains_with_adapters(const std::vector<std::string>& trainable, const std::string& name, bool tied_head);

// An adapter's tensors: our parameter's suffix and the one PEFT's adapter_model.safetensors
// gives it, after the adapted module's name.
struct LoraTensor {
  const char* ours;
  const char* peft;
};
inline constexpr LoraTensor kLoraTensors[] = {{".lora_A.weight", ".lora_A.weight"},
                                              {".lora_B.weight", ".lora_B.weight"},
                                              {".lora_magnitude_vector.weight", ".lora_magnitude_vector"}};
inline const std::vector<std::string> kLoraTargets = {"q", "k", "v", "o", "gate", "up", "down", "qkv"};

// The module a target adapts in `block`'s blocks ("q" -> "q_proj", "qkv" -> "qkv"),
// nullopt where that block has no such projection (q alone in a Megatron block).
std::optional<std::string> lora_module(BlockKind block, const std::string& target);

// Empty when the settings hold together for `arch` (keys named as in the run config).
std::vector<ConfigProblem> lora_problems(const LoraConfig& lora, Arch arch, bool activation_checkpointing);

// One projection an adapter of `target` adapts in each block: its in and out features.
struct LoraProjection {
  std::string target;
  int64_t in = 0, out = 0;
};

// The projections lora.targets adapts in a block of `model`'s shape (its "auto" sizes as the
// model reads them); empty where a size is not yet a positive number below 2^24 (the model's
// own rules refuse those) or a target is no projection of the block (lora_problems' to refuse).
std::vector<LoraProjection> lora_projections(const LoraConfig& lora, const ModelConfig& model);

// The adapters' size on a model of `model`'s shape, checked before any is allocated: refused
// on model.adapters.lora.rank when they would hold more parameters than the projections they
// adapt (rank x (in + out) summed over the targets above in x out summed), saying the bytes
// they would take and the largest rank that fits. Past that bound, training the projections
// themselves costs less and can learn any update. A rank above one projection's min(in, out)
// (PEFT allows it) is refused only with that bound: on it B A can use no more than min(in, out),
// but one rank serves every target, and the wider ones use it.
std::vector<ConfigProblem> lora_size_problems(const LoraConfig& lora, const ModelConfig& model);

// The adapters' parameters on every layer of `model` (0 where lora_projections is empty).
double lora_parameters(const LoraConfig& lora, const ModelConfig& model);

// "1.5M", "2.57 TiB": how the size messages above show counts and bytes.
std::string human_count(double count);
std::string human_bytes(double bytes);

// The records of the settings, as the files that keep them name them: the run config
// (model.adapters.lora.KEY), its entry in converters.json (models/modules/converters/converter.h),
// which a checkpoint rebuilds its converter from, and its own fields of PEFT's
// adapter_config.json (models/modules/peft_adapter.h writes the file, these functions read and
// write those fields, models/spec/families/peft_config.h reads the rest).

// Each row of kLoraSettings by its record name, whatever its value: what a continued adapter's
// settings are compared by.
nlohmann::json lora_settings_json(const LoraConfig& lora);
// converters.json's entry: {"name": "lora", "trainable", and lora_settings_json's values}, less a false
// DoRA flag, so that a LoRA record reads as it did before DoRA (an older segtrain continues it).
nlohmann::json lora_record(const LoraConfig& lora);
// The settings an entry of lora_record's form holds (a record written before DoRA, without its
// flag, is LoRA); InputError naming `source` and the keys expected when it holds other values.
LoraConfig lora_from_record(const nlohmann::json& entry, const std::string& source);

// adapter_config.json's r, lora_alpha, lora_dropout and the variants segtrain's adapters are not
// (use_rslora) or are as `lora` says (DoRA).
nlohmann::json peft_lora_fields(const LoraConfig& lora);
// The settings those fields of PEFT's `config` (read from `file`) hold: rank, alpha, dropout and
// DoRA's flag (targets and trainable are the base's module names, which peft_config.h matches);
// InputError "file: KEY: what was expected" for a value segtrain cannot continue.
LoraConfig lora_from_peft_fields(const nlohmann::json& config, const std::string& file);

}  // namespace segtrain::models
