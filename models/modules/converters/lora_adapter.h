#pragma once
// LoRA's adapter on one projection (Hu et al. 2021), as PEFT's lora.Linear computes it:
//   y = x W^T + b + (alpha / rank) * B(A(dropout(x)))
// with A [rank, in] and B [out, rank] registered on the projection as PEFT names them
// ("lora_A.weight", "lora_B.weight"); B is zero at first, so the adapted model starts as the
// base. Folded, W + (alpha / rank) B A. The LoRA converter (lora.h) adds one to each
// projection it targets, and folds a converted model's weights with the same maths.
//
// With use_dora, DoRA's (Liu et al. 2024), as PEFT 0.21's DoraLinearLayer: a magnitude m [out]
// ("lora_magnitude_vector.weight", first the row norms of W + (alpha / rank) B A) scales the
// adapted weight's rows to it, V = W + (alpha / rank) B A, y = x (m / ||V||)^T V^T + b, with
// ||V|| detached (the paper's section 4.3: it gets no gradient). Folded, (m / ||V||) V.
#include <ATen/ATen.h>

#include <map>
#include <string>

#include "models/modules/projection.h"
#include "models/spec/converters/lora_config.h"

namespace segtrain::models {

class LoraAdapter final : public ProjectionAdapter {
 public:
  // `a`, `b` and, with use_dora, `magnitude`: the adapter's tensors (the parameters it trains, or
  // a file's).
  LoraAdapter(const LoraConfig& lora, at::Tensor a, at::Tensor b, at::Tensor magnitude = {});
  at::Tensor delta(const at::Tensor& x, const at::Tensor& y, const ProjectionImpl& projection) const override;
  // W + (alpha / rank) B A, computed in fp32; with DoRA, its rows scaled to the magnitude.
  at::Tensor fold(const at::Tensor& weight) const override;

 private:
  at::Tensor a_, b_;
  at::Tensor magnitude_;  // undefined without DoRA
  double scale_;          // alpha / rank
  double dropout_;        // on the adapter's input, while training

  at::Tensor dora_delta(const at::Tensor& x, const at::Tensor& y, const ProjectionImpl& projection) const;
};

// Adds the adapter to `projection`: A drawn as PEFT draws it (Kaiming-uniform, a = sqrt(5)),
// B zero, both fp32 on the weight's device; with use_dora, the magnitude the row norms of W.
void add_lora_adapter(ProjectionImpl& projection, const LoraConfig& lora);

// `weights` (a converted model's, by parameter name) with each adapter folded into the weight it
// adapts and its tensors dropped; InputError when an adapter's tensors or its weight are missing.
std::map<std::string, at::Tensor> fold_lora_adapters(const LoraConfig& lora, std::map<std::string, at::Tensor> weights);

}  // namespace segtrain::models
