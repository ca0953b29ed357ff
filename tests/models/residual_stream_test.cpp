// The residual stream between blocks (models/modules/llama_block.h's Residual): a sequential-residual
// block leaves its MLP's add pending, and the next block's ln1 (or the final norm) adds it as it reads
// the sum (kernels/residual_norm.h). With the fused node taken at every norm after an add
// (NodeEverywhereForTests: on the CPU ATen's ops stand in for the kernels), a whole model's logits and
// gradients must equal the composites' (LayerNorm bit for bit, as the node computes with ATen's own
// LayerNorm; RMSNorm within fp32 rounding, as the node rounds once where transformers' composite
// rounds on the way), and the graph must hold one node at each such norm: what a GPU takes with
// SEGTRAIN_FUSED_KERNELS=all. Both runs go through the same block code, so which weight each norm takes
// and that every pending branch is added are held elsewhere: transformers' outputs hold the composites
// (tests/models/hf_test.cpp), and activation checkpointing, whose blocks hand on the whole stream, holds
// the pending one (Model.ActivationCheckpointingGivesTheSameGradients, tests/models/attention_test.cpp).
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <optional>
#include <string>
#include <vector>

#include "backward_graph.h"
#include "kernels/residual_norm.h"
#include "models/modules/transformer.h"
#include "tiny_models.h"

namespace segtrain::models {
namespace {

struct Outcome {
  at::Tensor logits;
  std::vector<at::Tensor> grads;  // named_parameters()' order
  int fused_nodes = 0;            // the fused residual-norm nodes in the backward graph
};

// One training forward and backward of a 3-layer `arch` whose every parameter (norms included) is
// drawn, so that a norm's weight or bias taken for another's would show.
Outcome train_once(Arch arch, bool node_everywhere, bool checkpointing) {
  at::manual_seed(5);
  ModelConfig config = test::tiny_model_config(arch, 50, 64);
  config.n_layers = 3;
  config.activation_checkpointing = models::ActivationCheckpointing::every_block_if(checkpointing);
  TransformerLM model(config);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.copy_(at::randn(p.sizes()) * 0.3 + (p.dim() == 1 ? 1.0 : 0.0));
  }
  model->train();
  const auto tokens = at::randint(50, {2, 12});
  const auto positions = (at::arange(12, at::kLong) * 2).repeat({2, 1});
  const auto upstream = at::randn({2, 12, 50});
  std::optional<kernels::NodeEverywhereForTests> everywhere;  // through backward: a checkpoint recomputes there
  if (node_everywhere) everywhere.emplace();
  Outcome out;
  out.logits = model->forward(tokens, positions, PositionBounds::of(positions));
  const at::Tensor loss = (out.logits * upstream).sum();
  out.fused_nodes = test::count_nodes_named(loss.grad_fn().get(), "AddNormNode");
  loss.backward();
  for (const auto& p : model->parameters()) out.grads.push_back(p.grad().defined() ? p.grad() : at::zeros_like(p));
  out.logits = out.logits.detach();
  return out;
}

double relative_difference(const at::Tensor& got, const at::Tensor& want) {
  return ((got.to(at::kDouble) - want.to(at::kDouble)).abs().max() / want.to(at::kDouble).abs().max().clamp_min(1e-30))
      .item<double>();
}

struct Case {
  Arch arch;
  int nodes;       // without activation checkpointing: ln2 of each sequential block, ln1 of each but the first,
                   // an RMSNorm ln_f
  bool bitwise;    // LayerNorm: the node computes with ATen's own ops
};

TEST(ResidualStream, EveryNormAfterAnAddTakesTheNodeAndTheModelTrainsTheCompositesNumbers) {
  const std::vector<Case> cases{{Arch::gpt2, 3 + 2, true},     // GPT-2's final LayerNorm keeps autocast's fp32
                                {Arch::bloom, 3 + 2, true},    // its fp32 stream is the branches' dtype here
                                {Arch::llama, 3 + 2 + 1, false},
                                {Arch::gpt_neox, 2, true}};     // a parallel residual: ln1 after the first block
  for (const auto& c : cases)
    for (const bool checkpointing : {false, true}) {
      const std::string what = std::string(enum_name(kArchs, c.arch)) + (checkpointing ? ", checkpointed" : "");
      const Outcome composite = train_once(c.arch, false, checkpointing);
      const Outcome fused = train_once(c.arch, true, checkpointing);
      EXPECT_EQ(composite.fused_nodes, 0) << what;
      // A checkpointed block recomputes inside its own node and hands the whole stream on: the outer
      // graph holds no add-and-norm node.
      EXPECT_EQ(fused.fused_nodes, checkpointing ? 0 : c.nodes) << what;
      ASSERT_EQ(fused.grads.size(), composite.grads.size()) << what;
      if (c.bitwise) {
        EXPECT_TRUE(at::equal(fused.logits, composite.logits)) << what << ": logits";
        for (size_t i = 0; i < fused.grads.size(); ++i)
          EXPECT_TRUE(at::equal(fused.grads[i], composite.grads[i]))
              << what << ": gradient " << i << " differs by " << relative_difference(fused.grads[i], composite.grads[i]);
      } else {
        EXPECT_LT(relative_difference(fused.logits, composite.logits), 1e-5) << what << ": logits";
        for (size_t i = 0; i < fused.grads.size(); ++i)
          EXPECT_LT(relative_difference(fused.grads[i], composite.grads[i]), 1e-4) << what << ": gradient " << i;
      }
    }
}

}  // namespace
}  // namespace segtrain::models
