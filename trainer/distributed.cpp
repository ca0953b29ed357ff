#include "trainer/distributed.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdlib>

#include "common/error.h"

namespace segtrain::trainer {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

int64_t env_int(const char* name, int64_t fallback, int64_t min) {
  auto text = env(name);
  if (!text) return fallback;
  try {
    size_t used = 0;
    const int64_t v = std::stoll(*text, &used);
    if (used == text->size() && v >= min) return v;
  } catch (const std::exception&) {
  }
  throw InputError(std::string(name) + "=" + *text + ": expected an integer >= " + std::to_string(min));
}

class GlooGroup : public ProcessGroup {
 public:
  GlooGroup(const DistributedEnv& e, const DistributedConfig& config) {
    const auto timeout = std::chrono::milliseconds(config.timeout_s * 1000);
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(e.master_port);
    options.isServer = e.rank == 0 && !e.agent_store;
    options.numWorkers = e.agent_store ? std::nullopt : std::optional<std::size_t>(e.world_size);
    options.waitWorkers = !e.agent_store;
    options.timeout = timeout;
    c10::intrusive_ptr<c10d::Store> store;
    try {
      store = c10::make_intrusive<c10d::TCPStore>(e.master_addr, options);
    } catch (const std::exception& err) {
      throw InputError("MASTER_ADDR/MASTER_PORT: cannot reach the rendezvous store at " + e.master_addr + ":" +
                               std::to_string(e.master_port) + " within " + std::to_string(config.timeout_s) +
                               " s (distributed.timeout_s): " + err.what());
    }
    if (e.agent_store)  // torchrun's agent hosts the store; each restart gets its own keys
      store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(e.restart), store);
    auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
    gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, e.rank, e.world_size, gloo);
  }
  int64_t rank() const override { return group_->getRank(); }
  int64_t world_size() const override { return group_->getSize(); }
  void broadcast(std::vector<at::Tensor>& tensors) override {
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      group_->broadcast(one)->wait();
    }
  }
  void all_reduce_sum(std::vector<at::Tensor>& tensors) override { group_->allreduce(tensors)->wait(); }
  void barrier() override { group_->barrier()->wait(); }

 private:
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
};

}  // namespace

DistributedEnv read_distributed_env() {
  DistributedEnv e;
  const bool slurm = !env("WORLD_SIZE") && env("SLURM_NTASKS");
  e.world_size = env_int(slurm ? "SLURM_NTASKS" : "WORLD_SIZE", 1, 1);
  e.rank = env_int(slurm ? "SLURM_PROCID" : "RANK", 0, 0);
  e.local_rank = env_int(slurm ? "SLURM_LOCALID" : "LOCAL_RANK", e.rank, 0);
  e.local_world_size = env_int("LOCAL_WORLD_SIZE", e.world_size, 1);
  if (e.rank >= e.world_size)
    throw InputError("RANK=" + std::to_string(e.rank) + " is not below WORLD_SIZE=" + std::to_string(e.world_size));
  e.master_addr = env("MASTER_ADDR").value_or("127.0.0.1");
  e.master_port = env_int("MASTER_PORT", 29500, 1);
  if (e.master_port > 65535) throw InputError("MASTER_PORT=" + std::to_string(e.master_port) + ": not a TCP port");
  e.agent_store = env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  e.restart = env_int("TORCHELASTIC_RESTART_COUNT", 0, 0);
  return e;
}

std::unique_ptr<ProcessGroup> connect(const DistributedEnv& env, const DistributedConfig& config) {
  if (env.world_size == 1) return nullptr;
  if (config.backend == Backend::nccl)
    throw InputError("distributed.backend: nccl needs a CUDA build of LibTorch; this build trains on CPU with gloo");
  return std::make_unique<GlooGroup>(env, config);
}

void all_reduce_gradients(ProcessGroup& group, const std::vector<at::Tensor>& params, int64_t bucket_bytes) {
  // Buckets of consecutive gradients, each one flat tensor; copy_ writes the sums back.
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  size_t start = 0;
  while (start < grads.size()) {
    size_t end = start;
    int64_t size = 0;
    while (end < grads.size() && (end == start || size + grads[end].nbytes() <= static_cast<size_t>(bucket_bytes)))
      size += grads[end++].nbytes();
    std::vector<at::Tensor> flat_parts;
    for (size_t i = start; i < end; ++i) flat_parts.push_back(grads[i].reshape(-1));
    std::vector<at::Tensor> flat{at::cat(flat_parts)};
    group.all_reduce_sum(flat);
    int64_t offset = 0;
    for (size_t i = start; i < end; ++i) {
      grads[i].copy_(flat[0].narrow(0, offset, grads[i].numel()).view_as(grads[i]));
      offset += grads[i].numel();
    }
    start = end;
  }
}

}  // namespace segtrain::trainer
