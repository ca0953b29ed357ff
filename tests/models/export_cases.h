#pragma once
// What the export suites (hf_test.cpp, llama_test.cpp) share: an export to make
// and check against transformers, and the training step some take before exporting.
#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <cstdint>
#include <string>

#include "models/modules/model_io.h"
#include "models/modules/transformer.h"
#include "models/spec/config.h"

namespace segtrain::test {

// Reference `source` under an extension (factor for all but none), exported as
// `name`; `length` tokens of input; `train_step` exports after one train_one_step;
// `architecture` is the HF class the export must name, where a suite checks it.
struct ExportCase {
  std::string name, source;
  models::ExtensionMethod method = models::ExtensionMethod::none;
  double factor = 1.0;
  int64_t length = 24;
  bool train_step = false;
  std::string architecture = {};
};

// The config of the model folder `dir` with `method` as its extension, at `factor`
// unless the method is none.
inline models::ModelConfig config_with_extension(const std::string& dir, models::ExtensionMethod method,
                                                 double factor) {
  auto config = models::read_model_config(dir);
  config.extension.method = method;
  if (method != models::ExtensionMethod::none) config.extension.factor = factor;
  return config;
}

// One SGD step (lr 0.5) on a next-token loss, like the trainer's inner loop, over a
// chunk-like sample: two rows of `length` ids below 97 whose halves keep their
// original positions, the second half starting `gap` positions after the first ends.
inline void train_one_step(models::TransformerLM& model, int64_t length, int64_t gap) {
  model->train();
  auto tokens = at::randint(97, {2, length});
  auto positions = at::cat({at::arange(length / 2), at::arange(length / 2 + gap, length + gap)}).repeat({2, 1});
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.5));
  auto logits = model->forward(tokens.slice(1, 0, length - 1), positions.slice(1, 0, length - 1));
  auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 97}), tokens.slice(1, 1).reshape(-1));
  sgd.zero_grad();
  loss.backward();
  sgd.step();
}

}  // namespace segtrain::test
