#pragma once
// Every rule that ties a ModelConfig's keys to each other (sizes, the llama-only
// keys, which extension method fits which position scheme, the rotary width,
// llama3's and longrope's parameters), in one place: the validator reports them at
// the config file's line, and check_model_config refuses them as the last guard before
// a model is built, read from HF or exported. Plain C++ (no LibTorch), so the config
// library and HF's config.json reader (families/hf_config.h) call them.
#include <vector>

#include "common/config_problem.h"
#include "models/spec/config.h"

namespace segtrain::models {

// Whether the config's size keys describe the model. A run from a base (hf: or
// checkpoint:) has the base's sizes, which the config file does not hold: the rules
// that combine sizes with the extension (rotary width, longrope's list lengths)
// wait until the base is read (check_model_config).
enum class Sizes { known, from_base };

// Which extension methods each position scheme has (seeds 000-004): the rule
// model.extension.method is checked by, and the experiment's OOTB rows are drawn from.
bool method_fits(ExtensionMethod method, PositionScheme scheme);

// Empty when the config holds together. "auto" values pass where their resolution
// is what the rule needs (factor auto is L_e / L_t >= 1 once resolved).
std::vector<ConfigProblem> model_problems(const ModelConfig& config, Sizes sizes = Sizes::known);

// The last guard before a model is built, read from HF or exported: the rules above as
// InputError "key: message", and every "auto" resolved.
void check_model_config(const ModelConfig& config);

}  // namespace segtrain::models
