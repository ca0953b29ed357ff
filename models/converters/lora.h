#pragma once
// The LoRA converter (model.adapters.lora, train.trainable): the base's weights stop
// training, each targeted projection of every block gets a low-rank adapter
// (models/projection.h: A Kaiming-uniform, B zero, scaled by alpha / rank, as PEFT),
// and what train.trainable lists besides the adapters trains again: every norm's
// weights (and biases), the token and learned position tables, the head (LongLoRA's
// "LoRA+" trains norms and embeddings). fold merges each adapter into the weight it
// adapts, W + (alpha / rank) B A, so eval, generate and export see a plain model.
#include <memory>
#include <string>
#include <vector>

#include "models/converters/converter.h"
#include "models/converters/lora_config.h"

namespace segtrain::models {

// Refuses (InputError "key: message") what lora_problems refuses for the model's arch
// when it converts, and a rank of 0.
std::unique_ptr<ModelConverter> make_lora(LoraConfig lora, std::vector<std::string> trainable);

}  // namespace segtrain::models
