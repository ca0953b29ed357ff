#pragma once
// The LoRA converter (model.adapters.lora, train.trainable): the base's weights stop
// training, each targeted projection of every block gets an adapter, and what its settings'
// trainable lists besides the adapters trains again: every norm's weights (and biases), the
// token and learned position tables, the head (LongLoRA's "LoRA+" trains norms and
// embeddings). fold merges each adapter into the weight it adapts, so eval, generate and
// export see a plain model. Its settings, rules and records are
// models/spec/converters/lora_config.h's (torch-free, for the run config).
//
// The adapter on one projection (Hu et al. 2021), as PEFT's lora.Linear computes it:
//   y = x W^T + b + (alpha / rank) * B(A(dropout(x)))
// with A [rank, in] and B [out, rank] registered on the projection as PEFT names them
// ("lora_A.weight", "lora_B.weight"); A drawn as PEFT draws it (Kaiming-uniform, a = sqrt(5)),
// B zero, so the adapted model starts as the base. Folded, W + (alpha / rank) B A.
//
// With use_dora, DoRA's (Liu et al. 2024), as PEFT 0.21's DoraLinearLayer: a magnitude m [out]
// ("lora_magnitude_vector.weight", first the row norms of W + (alpha / rank) B A) scales the
// adapted weight's rows to it, V = W + (alpha / rank) B A, y = x (m / ||V||)^T V^T + b, with
// ||V|| detached (the paper's section 4.3: it gets no gradient). Folded, (m / ||V||) V.
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
