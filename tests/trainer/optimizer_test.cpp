// FusedAdamW against LibTorch's own (per-parameter) torch::optim::AdamW, and
// ShardedAdamW (ZeRO-1) against FusedAdamW.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>

#include "common/error.h"
#include "models/modules/safetensors.h"
#include "test_util.h"

#include "trainer/train/flat_buckets.h"
#include "trainer/train/optimizer.h"
#include "trainer/train/sharded_optimizer.h"

namespace segtrain::trainer {
namespace {

// Pieces as a checkpoint file holds them (copies, by piece_key).
std::map<std::string, at::Tensor> saved_tensors(const std::vector<StatePiece>& pieces) {
  std::map<std::string, at::Tensor> tensors;
  for (const auto& piece : pieces) {
    tensors[piece_key("exp_avg", piece.param, piece.offset)] = piece.exp_avg.clone();
    tensors[piece_key("exp_avg_sq", piece.param, piece.offset)] = piece.exp_avg_sq.clone();
  }
  return tensors;
}

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
  EXPECT_TRUE(decays(o, "h.0.attn.weight", ours[0].second));
  EXPECT_FALSE(decays(o, "h.0.attn.bias", ours[1].second));
  EXPECT_FALSE(decays(o, "wte.weight", ours[3].second));

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
  const auto state = saved_tensors(first.state_pieces());
  SavedOptimizerState saved(first.steps_taken(), "test");
  saved.add(state);
  second.load_state(saved);
  EXPECT_EQ(second.steps_taken(), 3);
  fake_grads(a, 9), fake_grads(b, 9);
  first.step(1e-3), second.step(1e-3);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;

  auto missing = state;
  missing.erase("exp_avg.wte.weight@0");
  SavedOptimizerState lacking(3, "test");
  lacking.add(missing);
  EXPECT_THROW(second.load_state(lacking), InputError);
  // A saved parameter of another size is another model's.
  auto longer = state;
  longer["exp_avg.wte.weight@0"] = at::zeros({state.at("exp_avg.wte.weight@0").numel() + 1});
  SavedOptimizerState other(3, "test");
  other.add(longer);
  EXPECT_THROW(second.load_state(other), InputError);
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


// One rank of a simulated group: the test moves the slices between ranks
// itself (as the all-gather would), so the collectives here do nothing.
class SimulatedRank : public ProcessGroup {
 public:
  SimulatedRank(int64_t rank, int64_t world) : rank_(rank), world_(world) {}
  int64_t rank() const override { return rank_; }
  int64_t world_size() const override { return world_; }
  void broadcast(std::vector<at::Tensor>&) override {}
  void all_reduce_sum(std::vector<at::Tensor>&) override {}
  std::unique_ptr<PendingCollective> all_reduce_sum_async(const at::Tensor&) override { return done(); }
  std::unique_ptr<PendingCollective> reduce_scatter_sum_async(const at::Tensor&) override { return done(); }
  std::unique_ptr<PendingCollective> all_gather_async(const at::Tensor&) override { return done(); }
  void barrier() override {}

 private:
  static std::unique_ptr<PendingCollective> done() {
    struct Done : PendingCollective {
      void wait() override {}
    };
    return std::make_unique<Done>();
  }
  int64_t rank_, world_;
};

// Three ranks, each updating only its third of every bucket (tiny buckets cut
// parameters, and decay groups, at slice boundaries), give FusedAdamW's values
// once the slices are gathered; each holds a third of the moments; the whole
// FusedAdamW state loads into the slices and the next step still agrees.
TEST(ShardedAdamW, ThreeRanksOfSlicesUpdateLikeFusedAdamWOnTheWholeTensors) {
  AdamWOptions o;
  o.lr = 1e-2;
  o.no_decay = {"wte"};
  const int64_t world = 3;
  auto reference = make_params(7);
  FusedAdamW fused(reference, o);
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> params;
  std::vector<std::unique_ptr<SimulatedRank>> groups;
  std::vector<std::unique_ptr<FlatBuckets>> flats;
  std::vector<std::unique_ptr<ShardedAdamW>> ranks;
  for (int64_t r = 0; r < world; ++r) {
    params.push_back(make_params(7));
    std::vector<at::Tensor> plain;
    for (auto& [n, p] : params.back()) plain.push_back(p);
    groups.push_back(std::make_unique<SimulatedRank>(r, world));
    // 50 floats a bucket: wte alone (64 floats padded to 66: segments of 48
    // and 18), then ln_1, bias and attn.weight together (one segment of 45),
    // whose parts of 15 cut the bias/attn.weight boundary (two decay groups).
    flats.push_back(std::make_unique<FlatBuckets>(plain, 200, world));
    ranks.push_back(
        std::make_unique<ShardedAdamW>(params.back(), o, *flats.back(), ShardedAdamWSetup{groups.back().get(), true, {}}));
  }
  ASSERT_EQ(flats[0]->buckets().size(), 2u);
  ASSERT_EQ(flats[0]->buckets()[0].segments.size(), 2u);
  // The gather: every rank's buffers get rank r's part of every segment.
  auto gather = [&] {
    for (size_t b = 0; b < flats[0]->buckets().size(); ++b)
      for (int64_t r = 0; r < world; ++r) {
        const auto& mine = flats[r]->buckets()[b];
        for (const auto& range : mine.owned(r, world))
          for (int64_t other = 0; other < world; ++other)
            flats[other]->buckets()[b].params.narrow(0, range.begin, range.numel)
                .copy_(mine.params.narrow(0, range.begin, range.numel));
      }
  };
  auto set_grads = [&](int step) {
    fake_grads(reference, step);
    for (auto& rank_params : params) {
      torch::manual_seed(1000 + step);
      torch::NoGradGuard no_grad;
      for (auto& [name, p] : rank_params) p.mutable_grad().copy_(torch::randn_like(p));  // into the bucket views
    }
  };
  for (int step = 0; step < 4; ++step) {
    set_grads(step);
    fused.step(1e-2);
    for (auto& rank : ranks) rank->step(1e-2);
    gather();
    for (int64_t r = 0; r < world; ++r)
      for (size_t i = 0; i < reference.size(); ++i)
        EXPECT_TRUE(torch::allclose(params[r][i].second, reference[i].second, 0, 1e-7))
            << reference[i].first << " rank " << r << " step " << step;
  }
  int64_t sharded_bytes = 0;
  for (auto& rank : ranks) sharded_bytes += rank->state_bytes();
  int64_t moments = 0;
  for (auto& [n, p] : reference) moments += 2 * p.nbytes();
  // Together the ranks hold each moment once (plus a 4-byte step count a piece).
  EXPECT_GE(sharded_bytes, moments);
  EXPECT_LE(sharded_bytes, moments + 4 * 64);
  EXPECT_LE(ranks[0]->state_bytes(), moments / world + 4 * 16);
  EXPECT_GE(ranks[0]->state_bytes(), moments / world - 4 * 16);

  // The ranks' slices together are the whole state: one optimizer (a resume on
  // one rank) takes them and holds what FusedAdamW holds.
  SavedOptimizerState sliced(ranks[0]->steps_taken(), "ranks");
  for (auto& rank : ranks) sliced.add(saved_tensors(rank->state_pieces()));
  std::vector<std::pair<std::string, at::Tensor>> copies;
  for (auto& [n, p] : reference) copies.emplace_back(n, p.detach().clone().requires_grad_());
  FusedAdamW one(copies, o);
  one.load_state(sliced);
  EXPECT_EQ(one.steps_taken(), 4);
  const auto whole = fused.state_pieces(), resumed = one.state_pieces();
  ASSERT_EQ(whole.size(), resumed.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    // As close as the parameters above (the sliced kernels round alike, not always identically).
    EXPECT_TRUE(torch::allclose(whole[i].exp_avg, resumed[i].exp_avg, 1e-6, 1e-12)) << whole[i].param;
    EXPECT_TRUE(torch::allclose(whole[i].exp_avg_sq, resumed[i].exp_avg_sq, 1e-6, 1e-12)) << whole[i].param;
  }

  // The whole state of FusedAdamW, loaded into each rank's slices.
  const auto state = saved_tensors(fused.state_pieces());
  SavedOptimizerState saved(fused.steps_taken(), "fused");
  saved.add(state);
  for (auto& rank : ranks) {
    rank->load_state(saved);
    EXPECT_EQ(rank->steps_taken(), 4);
  }
  set_grads(10);
  fused.step(1e-3);
  for (auto& rank : ranks) rank->step(1e-3);
  gather();
  for (size_t i = 0; i < reference.size(); ++i)
    EXPECT_TRUE(torch::allclose(params[2][i].second, reference[i].second, 0, 1e-7)) << reference[i].first;

  auto missing = state;
  missing.erase("exp_avg_sq.h.0.attn.bias@0");
  SavedOptimizerState lacking(4, "fused");
  lacking.add(missing);
  // Every rank refuses it, also those whose slices hold none of that bias: a
  // rank that took it would wait in a collective for the ones that refused.
  for (auto& rank : ranks) EXPECT_THROW(rank->load_state(lacking), InputError);
}

// A rank's share of the norm is its own slices' squares (the ranks' shares add
// up to the whole gradient's); the step's factor scales only the rank's own slices,
// as FusedAdamW on the scaled gradient would (an eps of 1 makes the update depend on the
// gradient's size: lr g / (|g| + 1), 2/3 lr for 2.0, 1/3 lr for 0.5).
TEST(ShardedAdamW, ReportsAndScalesOnlyItsOwnSlices) {
  auto params = make_params(3);
  std::vector<at::Tensor> plain;
  for (auto& [n, p] : params) plain.push_back(p);
  SimulatedRank group(1, 2);
  FlatBuckets flat(plain, 1 << 20, 2);
  AdamWOptions o;
  o.eps = 1.0;
  o.weight_decay = 0.0;
  ShardedAdamW sharded(params, o, flat, ShardedAdamWSetup{&group, true, {}});
  {
    torch::NoGradGuard no_grad;
    for (auto& [n, p] : params) p.mutable_grad().fill_(2.0);
  }
  const auto& bucket = flat.buckets()[0];
  ASSERT_EQ(bucket.segments.size(), 1u);
  const int64_t n = bucket.owned(1, 2)[0].begin;
  const int64_t mine = bucket.numel - n;  // rank 1's elements (the padding excluded)
  const at::Tensor squares = sharded.grad_square_sum();
  EXPECT_EQ(squares.scalar_type(), at::kDouble);
  EXPECT_NEAR(squares.item<double>(), 4.0 * static_cast<double>(mine), 1e-6 * 4.0 * static_cast<double>(mine));  // fp32 norms
  const at::Tensor before = bucket.params.clone();
  sharded.step(0.3, 0.25);
  // Bias correction after one step: m^ = g, v^ = g^2, so the update is lr g / (|g| + eps).
  const at::Tensor moved = before - bucket.params;
  EXPECT_TRUE(at::allclose(moved.narrow(0, n, mine), at::full({mine}, 0.3 * 0.5 / 1.5), 1e-6, 1e-7));
  EXPECT_TRUE(moved.narrow(0, 0, n).eq(0).all().item<bool>());  // rank 0's slice: not this rank's to update
}

// The step's factor (1 / loss tokens and the clipping) goes into the fused kernel:
// stepping with it equals torch::optim::AdamW on the gradients multiplied by it, for a
// factor no power of two is (an eps of 0.1 keeps the update sensitive to the gradient's
// size), and the learning rate read from device memory changes with every step.
TEST(FusedAdamW, StepFactorEqualsAdamWOnScaledGradients) {
  AdamWOptions o;
  o.eps = 0.1;
  o.weight_decay = 0.0;
  auto ours = make_params(11);
  auto ref = make_params(11);
  FusedAdamW fused(ours, o);
  std::vector<torch::Tensor> all;
  for (auto& [name, p] : ref) all.push_back(p);
  torch::optim::AdamW reference(all, torch::optim::AdamWOptions(1e-2).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(0));
  for (int step = 0; step < 4; ++step) {
    const double factor = 0.37 / (step + 1), lr = 1e-2 * (step + 1);
    fake_grads(ours, step);
    fake_grads(ref, step);
    {
      torch::NoGradGuard no_grad;
      for (auto& [name, p] : ref) p.mutable_grad().mul_(factor);
    }
    fused.step(lr, factor);
    static_cast<torch::optim::AdamWOptions&>(reference.param_groups()[0].options()).lr(lr);
    reference.step();
    for (size_t i = 0; i < ours.size(); ++i)
      EXPECT_TRUE(torch::allclose(ours[i].second, ref[i].second, 1e-5, 1e-6)) << ours[i].first << " step " << step;
  }
}

// torch.nn.utils.clip_grad_norm_'s factor: max_norm / (norm + 1e-6) above the
// limit, 1 within it, when clipping is off or the norm is not finite.
TEST(Optimizer, ClipFactorIsTorchs) {
  EXPECT_DOUBLE_EQ(clip_factor(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  EXPECT_EQ(clip_factor(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_factor(4.0, 0.0), 1.0);
  EXPECT_EQ(clip_factor(std::nan(""), 1.0), 1.0);
}

// train.param_dtype: bf16 against tests/trainer/master_adamw_reference.py
// (PyTorch's torch.optim.AdamW in Python, its single-tensor loop, on fp32
// master weights): three steps of two micro-batches of bf16 gradients each,
// summed in fp32. The master weights agree to fp32 rounding (the fused kernel
// orders its arithmetic otherwise); the bf16 parameters are exactly the master
// rounded, so within one bf16 step of the reference's rounding.
TEST(ShardedAdamW, Bf16StorageStepsLikeAdamWOnFp32MasterWeightsInPython) {
  AdamWOptions o;
  o.weight_decay = 0.1;
  o.no_decay = {"wte"};
  auto params = make_params(7);
  std::map<std::string, at::Tensor> initial;
  std::vector<at::Tensor> plain;
  models::TensorMap inputs;
  for (auto& [n, p] : params) {
    initial[n] = p.detach().clone();
    inputs["param." + n] = initial[n];
    plain.push_back(p);
  }
  FlatBuckets flat(plain, 200, 1, at::kBFloat16);
  ShardedAdamW adamw(params, o, flat, ShardedAdamWSetup{nullptr, true, initial});
  ASSERT_TRUE(adamw.keeps_master_weights());
  for (auto& [n, p] : params) ASSERT_EQ(p.scalar_type(), at::kBFloat16) << n;
  const std::vector<double> lrs = {1e-2, 5e-3, 2e-3};
  for (size_t step = 0; step < lrs.size(); ++step) {
    for (int micro = 0; micro < 2; ++micro) {
      torch::manual_seed(100 * step + micro);
      torch::NoGradGuard no_grad;
      for (auto& [n, p] : params) {
        const at::Tensor g = torch::randn(p.sizes()).to(at::kBFloat16);
        p.mutable_grad().copy_(g);  // what backward leaves in the bucket
        inputs["grad." + std::to_string(step) + "." + std::to_string(micro) + "." + n] = g.to(at::kFloat);
      }
      adamw.accumulate_local();
      flat.zero_grad();
    }
    adamw.step(lrs[step]);
    adamw.zero_grad();
  }
  test::TempDir dir;
  models::write_safetensors(dir / "in.safetensors", inputs);
  const std::string options = "{\"lr\": [0.01, 0.005, 0.002], \"betas\": [0.9, 0.95], \"eps\": 1e-8, "
                              "\"weight_decay\": 0.1, \"no_decay\": [\"wte\"]}";
  auto reference = test::run(SEGTRAIN_PYTHON, {std::string(SEGTRAIN_SOURCE_DIR) + "/tests/trainer/master_adamw_reference.py",
                                               dir / "in.safetensors", dir / "out.safetensors", options});
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const auto expected = models::read_safetensors(dir / "out.safetensors");
  const auto master = adamw.master_weights();
  ASSERT_EQ(master.size(), params.size());
  for (auto& [n, p] : params) {
    const at::Tensor ours = master.at(n), theirs = expected.at("master." + n);
    EXPECT_EQ(ours.scalar_type(), at::kFloat);
    EXPECT_LT((ours - theirs).abs().max().item<double>(), 1e-6) << n;
    EXPECT_GT((ours - initial[n]).abs().max().item<double>(), 1e-3) << n << " did not move";
    EXPECT_TRUE(p.detach().equal(ours.to(at::kBFloat16))) << n << ": the bf16 parameter is not the master rounded";
    const at::Tensor gap = (p.detach().to(at::kFloat) - expected.at("bf16." + n)).abs();
    EXPECT_TRUE((gap <= expected.at("bf16." + n).abs() * std::ldexp(1.0, -7) + 1e-30).all().item<bool>()) << n;
  }
}

// Two optimizers with fp32 master weights over the same bf16-stored parameters (make_params(seed)), in
// buckets of bucket_bytes: one stepped one way, the other another, they should agree. The second takes
// its gradients as backward leaves them (sums_in_backward) where `second_sums_in_backward`.
struct TwinMasters {
  std::vector<std::pair<std::string, at::Tensor>> params[2];
  std::map<std::string, at::Tensor> initial;
  std::unique_ptr<FlatBuckets> flat[2];
  std::unique_ptr<ShardedAdamW> adamw[2];

  TwinMasters(uint64_t seed, int64_t bucket_bytes, const AdamWOptions& o, bool second_sums_in_backward = false) {
    for (int k = 0; k < 2; ++k) {
      params[k] = make_params(seed);
      std::vector<at::Tensor> plain;
      for (auto& [n, p] : params[k]) {
        if (k == 0) initial[n] = p.detach().clone();
        plain.push_back(p);
      }
      const bool in_backward = k == 1 && second_sums_in_backward;
      flat[k] = std::make_unique<FlatBuckets>(plain, bucket_bytes, 1, at::kBFloat16, /*gradient_buffers=*/!in_backward);
      adamw[k] = std::make_unique<ShardedAdamW>(params[k], o, *flat[k],
                                                ShardedAdamWSetup{nullptr, true, initial, in_backward});
    }
  }
  void step_both(double lr) {
    for (auto& a : adamw) {
      a->step(lr);
      a->zero_grad();
    }
  }
  // Both master weights equal, and moved from the start.
  void expect_equal_masters() {
    const auto expected = adamw[0]->master_weights(), got = adamw[1]->master_weights();
    for (auto& [name, p] : params[1]) {
      EXPECT_TRUE(got.at(name).equal(expected.at(name))) << name;
      EXPECT_GT((got.at(name) - initial[name]).abs().max().item<double>(), 1e-3) << name << " did not move";
    }
  }
};

// With master weights the fp32 sums of a range are one buffer whose first sum of a step is a copy
// (sharded_optimizer.h): sums that arrive in parts (a reduce's segments) and parts no sum reaches in a
// step (their gradient is zero, whatever the last step summed there) step as the whole gradient does.
TEST(ShardedAdamW, SumsInPartsAndPartsNoSumReachesStepLikeTheWholeGradient) {
  AdamWOptions o;
  o.weight_decay = 0.1;
  TwinMasters twins(3, 1 << 20, o);
  ShardedAdamW &whole = *twins.adamw[0], &parts = *twins.adamw[1];
  ASSERT_EQ(twins.flat[1]->buckets().size(), 1u);
  const int64_t n = twins.flat[1]->buckets()[0].grads.numel(), half = n / 2;
  for (int step = 0; step < 3; ++step) {
    for (int micro = 0; micro < 2; ++micro) {
      torch::manual_seed(10 * step + micro);
      const at::Tensor g = torch::randn({n}).to(at::kBFloat16);
      // Step 1 sums only the first half in the parts' optimizer: the whole one sees zeros past it.
      const at::Tensor seen = step == 1 ? at::cat({g.narrow(0, 0, half), at::zeros({n - half}, g.options())}) : g;
      torch::NoGradGuard no_grad;
      twins.flat[0]->buckets()[0].grads.copy_(seen);
      whole.accumulate_local();
      twins.flat[0]->zero_grad();
      parts.accumulate(0, {0, half}, g.narrow(0, 0, half));
      if (step != 1) parts.accumulate(0, {half, n - half}, g.narrow(0, half, n - half));
    }
    twins.step_both(1e-2);
  }
  twins.expect_equal_masters();
}

// A captured step replays the kernels its capture recorded, not accumulate's host choice between a copy
// and an add: after keep_gradients zero_grad zeroes the sums in place and every sum adds, and the steps
// are those of the optimizer that copies (the replay itself: DeviceRun.CapturedStepFollowsTheOrdinaryStep).
TEST(ShardedAdamW, AfterKeepGradientsTheSumsAreZeroedInPlaceAndStepAsBefore) {
  AdamWOptions o;
  o.weight_decay = 0.1;
  TwinMasters twins(5, 96, o);
  for (int step = 0; step < 3; ++step) {
    for (int micro = 0; micro < 2; ++micro)
      for (int k = 0; k < 2; ++k) {
        torch::manual_seed(10 * step + micro);
        {
          torch::NoGradGuard no_grad;
          for (auto& b : twins.flat[k]->buckets()) b.grads.narrow(0, 0, b.numel).copy_(torch::randn({b.numel}));
        }
        twins.adamw[k]->accumulate_local();
        twins.flat[k]->zero_grad();
      }
    if (step == 0) {
      EXPECT_TRUE(twins.adamw[1]->without_gradient().empty());  // after the first backward, as the trainer asks
      twins.adamw[1]->keep_gradients();
    }
    twins.step_both(1e-2);
  }
  twins.expect_equal_masters();
}

// A small network's loss over make_params' tensors, in bf16 as they are stored: x scaled by the norm's
// weight, through attn and its bias, and the table's rows (left out where `with_table` is false, so no
// gradient reaches it). Seeded: the same on both twins.
at::Tensor twin_loss(const std::vector<std::pair<std::string, at::Tensor>>& params, uint64_t seed, bool with_table) {
  std::map<std::string, at::Tensor> p(params.begin(), params.end());
  torch::manual_seed(seed);
  const at::Tensor x = torch::randn({3, 4}).to(at::kBFloat16), rows = torch::randint(0, 16, {5});
  const at::Tensor h = x * p.at("h.0.ln_1.weight");
  const at::Tensor y = at::linear(h, p.at("h.0.attn.weight"), p.at("h.0.attn.bias"));
  at::Tensor loss = y.to(at::kFloat).pow(2).sum();
  if (with_table) loss = loss + p.at("wte.weight").index_select(0, rows).to(at::kFloat).sin().sum();
  return loss;
}

// One process with master weights (sums_in_backward): no bf16 gradient buffer, each gradient summed into
// the fp32 sums as backward leaves it and dropped at once. Its steps are the buckets' bit for bit (autograd
// adds the gradient into the zeroed bucket, accumulate_local sums the bucket), over two micro-batches, a
// parameter no gradient reaches in one micro-batch (step 1) or a whole step (step 2), and buckets of 48
// values that cut the parameters into pieces.
TEST(ShardedAdamW, GradientsSummedAsBackwardLeavesThemStepLikeTheBuckets) {
  AdamWOptions o;
  o.weight_decay = 0.1;
  o.no_decay = {"wte"};
  TwinMasters twins(11, 96, o, /*second_sums_in_backward=*/true);
  for (const auto& b : twins.flat[1]->buckets()) EXPECT_FALSE(b.grads.defined()) << "a bf16 gradient buffer";
  ASSERT_GT(twins.flat[1]->buckets().size(), 1u);
  for (int step = 0; step < 3; ++step) {
    for (int micro = 0; micro < 2; ++micro)
      for (int k = 0; k < 2; ++k) {
        twin_loss(twins.params[k], 10 * step + micro, step == 0 || (step == 1 && micro == 0)).backward();
        twins.adamw[k]->accumulate_local();
        twins.flat[k]->zero_grad();
        if (k == 1) {
          for (auto& [n, p] : twins.params[1]) EXPECT_FALSE(p.grad().defined()) << n << ": a gradient was kept";
        }
      }
    EXPECT_TRUE(twins.adamw[1]->grad_square_sum().equal(twins.adamw[0]->grad_square_sum())) << "step " << step;
    twins.step_both(1e-2);
  }
  twins.expect_equal_masters();
  for (size_t i = 0; i < twins.params[0].size(); ++i)
    EXPECT_TRUE(twins.params[1][i].second.detach().equal(twins.params[0][i].second.detach())) << twins.params[0][i].first;
}

// A gradient backward leaves twice in one micro-batch (two backward calls; an activation checkpoint's
// recomputation runs one inside another) is summed twice, in fp32: as the buckets' optimizer sums the two
// as two micro-batches. And after keep_gradients (a captured step) every sum adds into sums zeroed in place.
TEST(ShardedAdamW, AGradientBackwardLeavesTwiceIsSummedTwiceAlsoAfterKeepGradients) {
  AdamWOptions o;
  o.weight_decay = 0.1;
  TwinMasters twins(13, 96, o, /*second_sums_in_backward=*/true);
  for (int step = 0; step < 3; ++step) {
    for (int micro = 0; micro < 2; ++micro) {
      twin_loss(twins.params[0], 10 * step + micro, true).backward();
      twins.adamw[0]->accumulate_local();
      twins.flat[0]->zero_grad();
    }
    twin_loss(twins.params[1], 10 * step, true).backward();
    twin_loss(twins.params[1], 10 * step + 1, true).backward();
    if (step == 0) {
      EXPECT_TRUE(twins.adamw[1]->without_gradient().empty());
      twins.adamw[1]->keep_gradients();
    }
    twins.step_both(1e-2);
  }
  twins.expect_equal_masters();
}

// Passes x through and gives `w` no gradient (an undefined one, as the residual norm node returns for a
// weight whose normed output was not used, kernels/residual_norm.cpp).
struct NoGradientFor : torch::autograd::Function<NoGradientFor> {
  static at::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, const at::Tensor& x, const at::Tensor& w) {
    return x * w.detach().sum();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

// sums_in_backward's hook runs also where AccumulateGrad got an undefined gradient (nothing to sum: the
// parameter steps as one that took none), and zero_grad drops a gradient a hook did not take (a backward cut
// short), which the next backward would otherwise add to and sum twice.
TEST(ShardedAdamW, SumsInBackwardTakeAnUndefinedGradientAndDropALeftOne) {
  AdamWOptions o;
  o.weight_decay = 0.1;
  TwinMasters twins(17, 96, o, /*second_sums_in_backward=*/true);
  for (int step = 0; step < 2; ++step) {
    for (int k = 0; k < 2; ++k) {
      std::map<std::string, at::Tensor> p(twins.params[k].begin(), twins.params[k].end());
      const at::Tensor x = torch::ones({4}, at::kBFloat16).requires_grad_();
      const at::Tensor through = NoGradientFor::apply(x * p.at("h.0.ln_1.weight"), p.at("h.0.attn.bias"));
      EXPECT_NO_THROW(through.to(at::kFloat).sum().backward()) << "twin " << k;
      twins.adamw[k]->accumulate_local();
      twins.flat[k]->zero_grad();
    }
    EXPECT_FALSE(twins.params[1][1].second.grad().defined());
    twins.step_both(1e-2);
  }
  const auto expected = twins.adamw[0]->master_weights(), got = twins.adamw[1]->master_weights();
  for (auto& [name, p] : twins.params[1]) EXPECT_TRUE(got.at(name).equal(expected.at(name))) << name;
  at::Tensor& left = twins.params[1][0].second.mutable_grad();
  left = torch::ones({8, 4}, at::kBFloat16);
  twins.adamw[1]->zero_grad();
  EXPECT_FALSE(twins.params[1][0].second.grad().defined()) << "a gradient left by a backward cut short was kept";
}

// An update smaller than half a bf16 step is lost by bf16 weights alone (AdamW
// on the bf16 parameter: it never moves), but the fp32 master keeps it, and
// the bf16 parameter follows once the master has moved a whole step.
TEST(ShardedAdamW, ATinyLearningRateThatBf16WeightsAloneWouldLoseMovesTheMaster) {
  AdamWOptions o;
  o.weight_decay = 0.0;
  auto alone = torch::ones({64}, at::kBFloat16).requires_grad_();
  FusedAdamW bf16_only({{"w", alone}}, o);
  auto stored = torch::ones({64}).requires_grad_();
  std::vector<std::pair<std::string, at::Tensor>> named = {{"w", stored}};
  FlatBuckets flat({stored}, 1 << 20, 1, at::kBFloat16);
  ShardedAdamW adamw(named, o, flat, ShardedAdamWSetup{nullptr, true, {{"w", torch::ones({64})}}});
  const double lr = 1e-4;  // AdamW's steps are about lr; bf16's step below 1.0 is 2^-8 ~ 3.9e-3
  for (int step = 1; step <= 40; ++step) {
    {
      torch::NoGradGuard no_grad;
      alone.mutable_grad() = torch::ones({64}, at::kBFloat16);
      stored.mutable_grad().fill_(1.0);
    }
    bf16_only.step(lr);
    adamw.accumulate_local();
    adamw.step(lr);
    adamw.zero_grad();
    const double master = adamw.master_weights().at("w")[0].item<double>();
    EXPECT_NEAR(master, 1.0 - lr * step, 1e-5) << "step " << step;
    if (step == 10) {
      EXPECT_EQ(stored[0].item<double>(), 1.0) << "less than half a bf16 step so far";
    }
  }
  EXPECT_EQ(alone[0].item<double>(), 1.0) << "bf16 weights alone lost every update";
  EXPECT_EQ(stored[0].item<double>(), 1.0 - std::ldexp(1.0, -8)) << "the bf16 parameter follows its master (0.996)";
}

}  // namespace
}  // namespace segtrain::trainer

namespace segtrain::trainer {
namespace {

// without_gradient names the parameters that had no gradient; keep_gradients (a captured step,
// trainer/runtime/cuda_graph.h) gives them zeros, and from then on zero_grad zeroes every gradient in
// place (the same storage, as a graph needs), where before it dropped them.
TEST(FusedAdamW, KeptGradientsStayAtTheirAddressAndTheParametersWithoutOneAreNamed) {
  auto params = make_params(3);
  FusedAdamW adamw(params, AdamWOptions{});
  params[0].second.mutable_grad() = torch::randn_like(params[0].second);
  params[3].second.mutable_grad() = torch::randn_like(params[3].second);
  EXPECT_EQ(adamw.without_gradient(), (std::vector<std::string>{"h.0.attn.bias", "h.0.ln_1.weight"}));
  EXPECT_FALSE(params[1].second.grad().defined()) << "asking changes nothing";
  adamw.keep_gradients();
  std::vector<const void*> addresses;
  for (auto& [name, p] : params) {
    ASSERT_TRUE(p.grad().defined()) << name;
    addresses.push_back(p.grad().const_data_ptr());
  }
  EXPECT_EQ(params[1].second.grad().abs().sum().item<float>(), 0.0f);
  adamw.step(1e-3);
  adamw.zero_grad();
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].second.grad().defined()) << params[i].first;
    EXPECT_EQ(params[i].second.grad().const_data_ptr(), addresses[i]) << params[i].first;
    EXPECT_EQ(params[i].second.grad().abs().sum().item<float>(), 0.0f) << params[i].first;
  }
  EXPECT_TRUE(adamw.without_gradient().empty());  // all kept
}

// stop_keeping_gradients (SEGTRAIN_CUDA_GRAPH=auto dropping its graphs): the gradients kept and zeroed
// in place take the next backward's sums as before, then zero_grad drops them again, and a parameter
// without one is skipped by the step (no weight decay), as before keep_gradients.
TEST(FusedAdamW, AfterStopKeepingGradientsTheyAreDroppedAndAParameterWithoutOneIsSkipped) {
  auto params = make_params(3);
  FusedAdamW adamw(params, AdamWOptions{});
  for (auto& [name, p] : params) p.mutable_grad() = torch::randn_like(p);
  adamw.keep_gradients();
  adamw.step(1e-3);
  adamw.zero_grad();  // in place
  adamw.stop_keeping_gradients();
  const void* kept = params[0].second.grad().const_data_ptr();
  params[0].second.mutable_grad().add_(torch::ones_like(params[0].second));  // a backward adds into the zeros
  EXPECT_EQ(params[0].second.grad().const_data_ptr(), kept);
  adamw.zero_grad();
  for (auto& [name, p] : params) EXPECT_FALSE(p.grad().defined()) << name << ": dropped again";
  ASSERT_EQ(params[0].second.dim(), 2) << "a decayed matrix";
  params[1].second.mutable_grad() = torch::randn_like(params[1].second);
  const at::Tensor before = params[0].second.clone();
  adamw.step(1e-1);
  EXPECT_TRUE(params[0].second.equal(before)) << "no gradient: skipped, not decayed";
  // in the groups' order: the decayed matrices, then the rest
  EXPECT_EQ(adamw.without_gradient(), (std::vector<std::string>{"h.0.attn.weight", "wte.weight", "h.0.ln_1.weight"}));
}

}  // namespace
}  // namespace segtrain::trainer
