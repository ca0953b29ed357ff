// The GPU suite (gpu/gpu_suite.h): one optimizer step of each architecture on the device against the CPU.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#if SEGTRAIN_WITH_CUDA
// CUDA's sync debug mode (OneStep.TheTrainerLossPathNeverWaitsForTheDevice); CMake
// defines SEGTRAIN_WITH_CUDA for CUDA builds of LibTorch (cmake/SegtrainTorch.cmake).
#include <ATen/record_function.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#endif

#include "gpu/gpu_suite.h"
#include "models/modules/converters/lora.h"
#include "models/modules/transformer.h"
#include "test_util.h"
#include "tiny_models.h"
#include "trainer/runtime/device.h"
#include "trainer/train/optimizer.h"
#include "trainer/train/step_loss.h"

namespace segtrain::models {
// How gtest prints a parameter, which ctest's test names carry: the architecture's name.
inline void PrintTo(Arch arch, std::ostream* out) { *out << enum_name(kArchs, arch); }
}  // namespace segtrain::models

namespace segtrain {
namespace {

using test::device_under_test;
using test::record;

// ---------------------------------------------------------------------------
// One optimizer step of the model itself, in this process.

// llama with grouped-query attention (through SDPA's enable_gqa).
models::ModelConfig tiny(models::Arch arch) {
  auto c = test::tiny_model_config(arch, 96, 160, /*grouped_kv=*/true);
  c.d_model = 64;
  c.d_ff = std::nullopt;  // auto: 4 * d_model
  return c;
}

// A chunk-like batch: two pieces of a document keep their original positions.
data::Batch chunk_batch(int64_t vocab) {
  data::Batch b;
  b.batch_size = 2;
  b.length = 48;
  for (int64_t row = 0; row < b.batch_size; ++row)
    for (int64_t i = 0; i < b.length; ++i) {
      b.tokens.push_back(static_cast<int32_t>((7 * i + 13 * row + 3) % vocab));
      b.targets.push_back(static_cast<int32_t>((7 * (i + 1) + 13 * row + 3) % vocab));
      b.positions.push_back(static_cast<int32_t>(i < 24 ? i : 90 + i + 10 * row));
      b.loss_mask.push_back(1);
    }
  return b;
}

struct StepOutcome {
  double loss = 0;
  std::vector<at::Tensor> grads, before, after;  // on the CPU, fp32
};

// How a step computes its loss: `plain` is the reference (the whole logits, then
// cross-entropy); `trainer` is the trainer's own path, micro_batch_loss with the
// LM head and loss over slices of kLossChunk tokens and the model built with
// activation checkpointing (its blocks recomputed in backward).
enum class LossPath { plain, trainer };
constexpr int64_t kLossChunk = 7;  // 96 tokens a batch: 13 slices of 7 and one of 5

StepOutcome one_step(models::TransformerLM& model, const c10::Device& device, bool bf16,
                     LossPath path = LossPath::plain) {
  model->to(device);
  model->train();
  // What trains: every parameter, or what a converter (LoRA) left training.
  const std::vector<std::pair<std::string, at::Tensor>> named = models::trainable_parameters(model);
  trainer::AdamWOptions options;
  options.lr = 1e-3;
  options.no_decay = {"bias", "norm", "ln_"};
  trainer::FusedAdamW optimizer(named, options);
  const data::Batch batch = chunk_batch(*model->config().vocab_size);
  const trainer::MicroBatch m = trainer::to_tensors(batch, device);
  StepOutcome out;
  for (const auto& [name, p] : named) out.before.push_back(p.detach().to(at::kCPU, at::kFloat).clone());
  at::Tensor summed;
  {
    trainer::Autocast autocast(bf16, device.type());
    if (path == LossPath::trainer) {
      summed = trainer::micro_batch_loss(model, m, kLossChunk).sum;
    } else {
      const at::Tensor logits = model->forward(m.tokens, m.positions, m.bounds);
      summed = trainer::summed_loss(logits, m.targets);
    }
  }
  at::Tensor loss = summed / static_cast<double>(m.loss_tokens);
  loss.backward();
  out.loss = loss.item<double>();
  for (const auto& [name, p] : named) out.grads.push_back(p.grad().to(at::kCPU, at::kFloat));
  optimizer.step(options.lr);
  for (const auto& [name, p] : named) out.after.push_back(p.detach().to(at::kCPU, at::kFloat));
  return out;
}

// ||a - b|| / ||b|| over all tensors together.
double relative_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]).to(at::kDouble).pow(2).sum().item<double>();
    norm += b[i].to(at::kDouble).pow(2).sum().item<double>();
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

std::vector<at::Tensor> updates(const StepOutcome& s) {
  std::vector<at::Tensor> u;
  for (size_t i = 0; i < s.after.size(); ++i) u.push_back(s.after[i] - s.before[i]);
  return u;
}

struct Tolerance {
  double loss, grads, updates;
};

// Rank-4 adapters on every projection of the block, the norms trained too (LoRA+ without
// the embedding), B drawn at random so that A has a gradient from the first step.
void convert_to_lora(models::TransformerLM& model) {
  models::LoraConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.targets = models::arch_layout(model->config().arch).block == models::BlockKind::llama
                     ? std::vector<std::string>{"q", "k", "v", "o", "gate", "up", "down"}
                     : std::vector<std::string>{"qkv", "o", "up", "down"};
  models::make_lora(test::lora_training(lora, {"adapters", "norms"}))->convert(model);
}

// The tested step (on the device under test, in `path`) against the reference:
// fp32 on the CPU, whole logits, no checkpointing. With `lora`, both converted alike.
void expect_step_matches_cpu(models::Arch arch, bool bf16, Tolerance tol, LossPath path = LossPath::plain,
                             bool lora = false) {
  const c10::Device device(device_under_test());
  torch::manual_seed(11);
  models::TransformerLM reference(tiny(arch));
  auto tested_config = tiny(arch);
  tested_config.activation_checkpointing = models::ActivationCheckpointing::every_block_if(path == LossPath::trainer);
  models::TransformerLM tested(tested_config);
  if (lora) {
    convert_to_lora(reference);
    convert_to_lora(tested);
    torch::NoGradGuard no_grad;
    for (auto& item : reference->named_parameters())
      if (item.key().find(".lora_B") != std::string::npos) item.value().normal_(0.0, 0.05);
  }
  tested->load_tensors(reference->tensors(), "the CPU model");
  const StepOutcome want = one_step(reference, c10::Device(c10::kCPU), /*bf16=*/false);
  const StepOutcome got = one_step(tested, device, bf16, path);
  const std::string what =
      std::string(enum_name(models::kArchs, arch)) + (lora ? " LoRA" : "") + (bf16 ? " bf16" : " fp32") +
      (path == LossPath::trainer ? " (trainer loss path: chunks of 7 tokens, activation checkpointing)" : "") +
      " on " + device.str() + " vs fp32 on cpu";
  ASSERT_TRUE(std::isfinite(got.loss)) << what;
  const double loss = std::abs(got.loss - want.loss) / want.loss;
  const double grads = relative_difference(got.grads, want.grads);
  const double steps = relative_difference(updates(got), updates(want));
  // The measured differences, for the record on every machine that runs this.
  std::ostringstream line;
  line << what << ": relative difference of the loss " << loss << ", gradients " << grads << ", updates " << steps;
  record(line.str());
  EXPECT_LE(loss, tol.loss) << what << ": loss " << got.loss << " vs " << want.loss;
  EXPECT_LE(grads, tol.grads) << what << ": gradients";
  EXPECT_LE(steps, tol.updates) << what << ": AdamW updates";
}

// fp32 on the device: the same arithmetic up to summation order (TF32 is off in
// LibTorch by default). bf16 autocast: 8-bit mantissas in the matmuls, fp32
// accumulation, positions and the loss in fp32 (the ALiBi precision study); AdamW's first step is
// about lr * sign(g), so gradients near zero may flip and the update bound is loose.
// bf16 autocast on the CPU measured 1e-5 (loss), 0.5% (gradients) and 7-9%
// (updates) against fp32 here; the bounds leave CUDA's kernels 3-6x that.
constexpr Tolerance kFp32{1e-5, 1e-4, 1e-3};
constexpr Tolerance kBf16{2e-3, 0.03, 0.3};

class OneStep : public ::testing::TestWithParam<models::Arch> {};

TEST_P(OneStep, Fp32OnTheDeviceEqualsTheCpu) {
  REQUIRE_DEVICE(1);
  expect_step_matches_cpu(GetParam(), /*bf16=*/false, kFp32);
}

// LoRA (issue 50): the adapters' and the norms' step on the device, through the trainer's loss
// path (activation checkpointing recomputes the adapted projections), equals the CPU's.
TEST_P(OneStep, LoraStepOnTheDeviceEqualsTheCpu) {
  REQUIRE_DEVICE(1);
  expect_step_matches_cpu(GetParam(), /*bf16=*/false, kFp32, LossPath::trainer, /*lora=*/true);
}

TEST_P(OneStep, Bf16AutocastOnTheDeviceStaysWithinBf16ToleranceOfFp32OnTheCpu) {
  REQUIRE_DEVICE(1);
  expect_step_matches_cpu(GetParam(), /*bf16=*/true, kBf16);
}

// The trainer's own loss path (trainer/train/step_loss.h) on the device: the
// chunked LM-head loss and activation checkpointing's recomputation under the
// device's kernels give the reference's loss and gradients to the same bounds as
// the plain forward (the chunked loss equals the whole one within fp32 rounding,
// tests/models/lm_head_loss_test.cpp; the recomputation repeats the forward).
TEST_P(OneStep, TrainerLossPathFp32OnTheDeviceEqualsTheCpu) {
  REQUIRE_DEVICE(1);
  expect_step_matches_cpu(GetParam(), /*bf16=*/false, kFp32, LossPath::trainer);
}

TEST_P(OneStep, TrainerLossPathBf16AutocastStaysWithinBf16ToleranceOfFp32OnTheCpu) {
  REQUIRE_DEVICE(1);
  expect_step_matches_cpu(GetParam(), /*bf16=*/true, kBf16, LossPath::trainer);
}

#if SEGTRAIN_WITH_CUDA
// Collects the warnings raised on this thread (and those autograd's device
// threads replay to it at the end of backward).
class WarningRecorder : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  // The warnings of CUDA's sync debug mode ("called a synchronizing CUDA operation").
  std::vector<std::string> syncs() const {
    std::vector<std::string> out;
    for (const auto& m : messages)
      if (m.find("synchroniz") != std::string::npos) out.push_back(m);
    return out;
  }
  std::vector<std::string> messages;
};

// CUDA's sync debug mode at L_WARN while alive: every operation that makes the
// host wait for a CUDA stream (item(), a blocking copy to the host, nonzero, a
// stream or device synchronize) raises a warning.
class SyncDebugWarn {
 public:
  SyncDebugWarn() { c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN); }
  ~SyncDebugWarn() { c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED); }
  SyncDebugWarn(const SyncDebugWarn&) = delete;
  SyncDebugWarn& operator=(const SyncDebugWarn&) = delete;
};

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += "\n  " + l;
  return out;
}

// The host-to-device copies ATen makes while alive, on any thread (backward's run on autograd's
// device thread): a copy_ from a CPU tensor into a CUDA one, or a CPU tensor's _to_copy to CUDA.
// Sync debug mode does not see them (the driver may synchronise a copy from pageable memory
// without PyTorch asking), so they are counted apart.
class HostToDeviceCopies {
 public:
  HostToDeviceCopies()
      : handle_(at::addGlobalCallback(
            at::RecordFunctionCallback(&on_call).needsInputs(true).scopes({at::RecordScope::FUNCTION}))) {
    std::lock_guard<std::mutex> lock(mutex());
    seen().clear();
  }
  ~HostToDeviceCopies() { at::removeCallback(handle_); }
  HostToDeviceCopies(const HostToDeviceCopies&) = delete;
  HostToDeviceCopies& operator=(const HostToDeviceCopies&) = delete;
  std::vector<std::string> calls() const {
    std::lock_guard<std::mutex> lock(mutex());
    return seen();
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::string>& seen() {
    static std::vector<std::string> calls;
    return calls;
  }
  static std::string shape(const at::Tensor& t) {
    std::ostringstream out;
    out << t.sizes() << " " << t.scalar_type();
    return out.str();
  }
  static std::unique_ptr<at::ObserverContext> on_call(const at::RecordFunction& fn) {
    const std::string name = fn.name();
    if (name != "aten::copy_" && name != "aten::_to_copy") return nullptr;
    const auto in = fn.inputs();
    std::string copy;
    if (name == "aten::copy_" && in.size() >= 2 && in[0].isTensor() && in[1].isTensor() && in[0].toTensor().is_cuda() &&
        in[1].toTensor().is_cpu())
      copy = "copy_ of " + shape(in[1].toTensor());
    // _to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format)
    if (name == "aten::_to_copy" && in.size() >= 4 && in[0].isTensor() && in[0].toTensor().is_cpu() &&
        in[3].isDevice() && in[3].toDevice().is_cuda())
      copy = "_to_copy of " + shape(in[0].toTensor());
    if (!copy.empty()) {
      std::lock_guard<std::mutex> lock(mutex());
      seen().push_back(copy);
    }
    return nullptr;
  }
  at::CallbackHandle handle_;
};
#endif

// A trainer micro-batch on CUDA never makes the host wait: its copies to the
// device (to_tensors: pinned, non-blocking; the position bounds read on the host)
// and its forward and backward (micro_batch_loss under bf16 autocast, whole and in
// slices of 7 tokens, with activation checkpointing) raise no warning of CUDA's
// sync debug mode, each part watched on its own so a failure names it. The
// step's one wait is its totals (step_totals.h), not here. The first pass
// (kernel selection, cuBLAS workspaces, RoPE caches) is a warm-up outside the
// watch: it happens once a run, not once a step.
TEST_P(OneStep, TheTrainerLossPathNeverWaitsForTheDevice) {
  REQUIRE_DEVICE(1);
  if (device_under_test() != "cuda")
    SKIP_NOT_APPLICABLE("CUDA's sync debug mode watches CUDA streams only; nothing to watch on " << device_under_test());
#if SEGTRAIN_WITH_CUDA
  const c10::Device device(device_under_test());
  torch::manual_seed(11);
  auto config = tiny(GetParam());
  config.activation_checkpointing = models::ActivationCheckpointing::every_block();
  models::TransformerLM model(config);
  model->to(device);
  model->train();
  const data::Batch single = chunk_batch(*config.vocab_size);
  // A mixture's micro-batch (data.mixture): its loss also split by source (step_loss.h).
  data::Batch mixed = single;
  mixed.step_samples = {0, 0};
  for (int64_t b = 0; b < mixed.batch_size; ++b) ++mixed.step_samples[static_cast<size_t>(b % 2)];
  for (int64_t b = 0; b < mixed.batch_size; ++b) mixed.sources.push_back(static_cast<int32_t>(b % 2));
  for (const auto& [batch, kind] : {std::pair{single, "one store"}, std::pair{mixed, "a mixture of 2"}}) {
    for (const int64_t chunk : {int64_t{0}, kLossChunk}) {
      const std::string what = std::string(enum_name(models::kArchs, GetParam())) + ", " + kind +
                               ", loss_chunk_tokens " + std::to_string(chunk) + ", activation checkpointing, bf16 autocast";
      at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
      at::Tensor source_sums = at::zeros({2}, at::TensorOptions().dtype(at::kDouble).device(device));
      // As Trainer::forward_backward: forward under autocast, backward of the summed loss
      // outside it, the loss summed on the device. Each part under its own watch.
      WarningRecorder copies, forward, backward;
      std::vector<std::string> model_uploads;  // host-to-device copies in the forward and backward
      auto micro_batch = [&](bool watched) {
        auto watch = [&](WarningRecorder& recorder, const std::function<void()>& part) {
          if (!watched) return part();
          const c10::WarningUtils::WarningHandlerGuard guard(&recorder);
          const SyncDebugWarn on;
          part();
        };
        trainer::MicroBatch m;
        trainer::MicroBatchLoss loss;
        watch(copies, [&] { m = trainer::to_tensors(batch, device); });
        std::optional<HostToDeviceCopies> uploads;
        if (watched) uploads.emplace();
        watch(forward, [&] {
          trainer::Autocast autocast(/*enabled=*/true, device.type());
          loss = trainer::micro_batch_loss(model, m, chunk);
        });
        watch(backward, [&] {
          loss.sum.backward();
          loss_sum += loss.sum.detach().to(at::kDouble);
          if (loss.by_source.defined()) source_sums += loss.by_source.to(at::kDouble);
        });
        if (uploads) model_uploads = uploads->calls();
      };
      micro_batch(/*watched=*/false);  // the warm-up
      torch::cuda::synchronize();
      micro_batch(/*watched=*/true);
      torch::cuda::synchronize();
      record(what + ": host waits in to_tensors " + std::to_string(copies.syncs().size()) + ", in forward " +
             std::to_string(forward.syncs().size()) + ", in backward " + std::to_string(backward.syncs().size()) +
             "; host-to-device copies in forward and backward " + std::to_string(model_uploads.size()));
      // The positional tables went to the device in the warm-up (models/modules/device_table.h); the
      // batch's own copies are to_tensors'.
      EXPECT_TRUE(model_uploads.empty()) << what << ": host-to-device copies in the forward or backward:"
                                         << joined(model_uploads);
      EXPECT_TRUE(copies.syncs().empty()) << what << ": to_tensors waited for the device:" << joined(copies.syncs());
      EXPECT_TRUE(forward.syncs().empty()) << what << ": the forward waited for the device:" << joined(forward.syncs());
      EXPECT_TRUE(backward.syncs().empty()) << what << ": backward waited for the device:" << joined(backward.syncs());
      EXPECT_TRUE(std::isfinite(loss_sum.item<double>())) << what;
      if (batch.sources.empty()) {
        EXPECT_EQ(source_sums.abs().sum().item<double>(), 0.0) << what;
      } else {
        const double total = loss_sum.item<double>();
        EXPECT_NEAR(source_sums.sum().item<double>(), total, 1e-4 * std::abs(total)) << what;
      }
      model->zero_grad();
    }
  }
#else
  SKIP_NOT_APPLICABLE("this build has no CUDA");
#endif
}

INSTANTIATE_TEST_SUITE_P(EveryArchitecture, OneStep,
                         ::testing::Values(models::Arch::gpt2, models::Arch::gpt_neox, models::Arch::bloom,
                                           models::Arch::llama),
                         [](const auto& info) { return std::string(enum_name(models::kArchs, info.param)); });

}  // namespace
}  // namespace segtrain
