#pragma once
// A weight read only when the parameter it fills is loaded: a model loads tensor by
// tensor (TransformerLM::load_tensors), so host memory holds its parameters and one
// tensor in flight, never a second copy of the whole file.
#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <string>

namespace segtrain::models {

// The tensor it returns may become a parameter's storage (load_tensors with WeightDtype::as_stored).
using TensorSource = std::function<at::Tensor()>;
using TensorSources = std::map<std::string, TensorSource>;

// Tensors already in memory as sources (each returned as it is, not copied).
inline TensorSources sources_of(const std::map<std::string, at::Tensor>& tensors) {
  TensorSources out;
  for (const auto& [name, t] : tensors) out[name] = [t] { return t; };
  return out;
}

}  // namespace segtrain::models
