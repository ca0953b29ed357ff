// FusedAdamW against LibTorch's own (per-parameter) torch::optim::AdamW.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "trainer/train/optimizer.h"

namespace segtrain::trainer {
namespace {

std::vector<std::pair<std::string, at::Tensor>> make_params(uint64_t seed) {
  torch::manual_seed(seed);
  return {{"h.0.attn.weight", torch::randn({8, 4}).requires_grad_()},
          {"h.0.attn.bias", torch::randn({8}).requires_grad_()},
          {"h.0.ln_1.weight", torch::randn({4}).requires_grad_()},
          {"wte.weight", torch::randn({16, 4}).requires_grad_()}};
}

void fake_grads(std::vector<std::pair<std::string, at::Tensor>>& params, int step) {
  torch::manual_seed(1000 + step);
  for (auto& [name, p] : params) p.mutable_grad() = torch::randn_like(p);
}

TEST(FusedAdamW, MatchesTorchOptimAdamWWithDecayGroups) {
  AdamWOptions o;
  o.lr = 1e-2;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  o.no_decay = {"wte"};
  auto ours = make_params(7);
  auto ref = make_params(7);
  FusedAdamW fused(ours, o);

  // Reference: decay only 2-D parameters whose names do not match no_decay.
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& [name, p] : ref) (p.dim() >= 2 && name.find("wte") == std::string::npos ? decay : no_decay).push_back(p);
  auto make_group = [&](std::vector<torch::Tensor> ps, double wd) {
    auto opts = std::make_unique<torch::optim::AdamWOptions>(o.lr);
    opts->betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(wd);
    return torch::optim::OptimizerParamGroup(ps, std::move(opts));
  };
  torch::optim::AdamW reference({make_group(decay, 0.1), make_group(no_decay, 0.0)},
                                torch::optim::AdamWOptions(o.lr));
  EXPECT_TRUE(fused.decays("h.0.attn.weight"));
  EXPECT_FALSE(fused.decays("wte.weight"));

  for (int step = 0; step < 5; ++step) {
    const double lr = o.lr * (1.0 - 0.1 * step);
    fake_grads(ours, step);
    fake_grads(ref, step);
    fused.step(lr);
    for (auto& group : reference.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    reference.step();
    for (size_t i = 0; i < ours.size(); ++i)
      EXPECT_TRUE(torch::allclose(ours[i].second, ref[i].second, 1e-6, 1e-7)) << ours[i].first << " step " << step;
  }
  EXPECT_EQ(fused.steps_taken(), 5);
}

TEST(FusedAdamW, StateRoundTripContinuesIdentically) {
  AdamWOptions o;
  auto a = make_params(3);
  FusedAdamW first(a, o);
  for (int s = 0; s < 3; ++s) fake_grads(a, s), first.step(1e-3);

  // Clone parameters and state into a fresh optimizer, then step both once more.
  std::vector<std::pair<std::string, at::Tensor>> b;
  for (auto& [n, p] : a) b.emplace_back(n, p.detach().clone().requires_grad_());
  FusedAdamW second(b, o);
  std::map<std::string, at::Tensor> state;
  for (auto& [k, v] : first.state_dict()) state[k] = v.clone();
  second.load_state_dict(state);
  EXPECT_EQ(second.steps_taken(), 3);
  fake_grads(a, 9), fake_grads(b, 9);
  first.step(1e-3), second.step(1e-3);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;

  state.erase("exp_avg.wte.weight");
  EXPECT_THROW(second.load_state_dict(state), std::exception);
}

TEST(FusedAdamW, ParametersWithoutGradientsAreLeftAlone) {
  auto params = make_params(5);
  FusedAdamW opt(params, AdamWOptions{});
  auto before = params[0].second.detach().clone();
  params[1].second.mutable_grad() = torch::ones_like(params[1].second);
  opt.step(1e-2);
  EXPECT_TRUE(torch::equal(params[0].second, before));
  opt.zero_grad();
  EXPECT_FALSE(params[1].second.grad().defined());
}

}  // namespace
}  // namespace segtrain::trainer
