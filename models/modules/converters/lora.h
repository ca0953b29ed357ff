#pragma once
// The LoRA converter (model.adapters.lora, train.trainable): the base's weights stop
// training, each targeted projection of every block gets an adapter (lora_adapter.h),
// and what its settings' trainable lists besides the adapters trains again: every norm's
// weights (and biases), the token and learned position tables, the head (LongLoRA's
// "LoRA+" trains norms and embeddings). fold merges each adapter into the weight it
// adapts, so eval, generate and export see a plain model. Its settings and rules are
// models/spec/converters/lora_config.h's, its records lora_record.h's.
#include <memory>

#include "models/modules/converters/converter.h"
#include "models/spec/converters/lora_config.h"

namespace segtrain::models {

// Refuses (InputError "key: message") a rank of 0, and when it converts what lora_problems
// refuses for the model's arch.
std::unique_ptr<ModelConverter> make_lora(LoraConfig lora);

// Its entry in the registry (converter.h).
ConverterKind lora_converter();

// The settings of the LoRA converter among `converters`; nullptr when none is.
const LoraConfig* lora_settings(const Converters& converters);

}  // namespace segtrain::models
