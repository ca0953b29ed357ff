#include "models/modules/projection.h"

#include <torch/nn/init.h>

#include <cmath>
#include <stdexcept>
#include <utility>

#include "kernels/linear.h"
#include "models/modules/weight_init.h"

namespace segtrain::models {

ProjectionImpl::ProjectionImpl(int64_t in, int64_t out, bool with_bias) : in_features(in), out_features(out) {
  weight = register_parameter("weight", at::empty({out, in}));
  if (with_bias) bias = register_parameter("bias", at::empty({out}));
  if (weight_init_skipped()) return;  // a file fills them (models/modules/weight_init.h)
  // torch::nn::Linear's reset_parameters, draw for draw: a model built from scratch
  // starts from the same random stream whatever module holds its projections.
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

at::Tensor ProjectionImpl::forward(const at::Tensor& x) {
  auto y = kernels::linear(x, weight, bias);
  if (!adapter_) return y;
  return adapter_->adapted(x, y, *this);
}

at::Tensor ProjectionImpl::forward_gelu(const at::Tensor& x, bool tanh) {
  if (!adapter_) return kernels::linear_gelu(x, weight, bias, tanh);
  return at::gelu(forward(x), tanh ? "tanh" : "none");
}

void ProjectionImpl::set_adapter(std::shared_ptr<const ProjectionAdapter> adapter) {
  if (adapter_) throw std::logic_error("this projection has an adapter already");
  adapter_ = std::move(adapter);
}

}  // namespace segtrain::models
