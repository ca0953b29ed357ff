#pragma once
// Data parallelism on PyTorch's own c10d (Gloo on CPU). The environment is
// torchrun's (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_*) or SLURM's (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID); a single process needs none of it. c10d stays behind this
// interface so only distributed.cpp sees the Gloo headers.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/config.h"

namespace segtrain::trainer {

struct DistributedEnv {
  int64_t rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE: every rank is a store client
  int64_t restart = 0;       // TORCHELASTIC_RESTART_COUNT
};

// Reads the launcher's variables; InputError naming the variable when one is
// malformed or inconsistent (WORLD_SIZE=0, RANK >= WORLD_SIZE, a bad port).
DistributedEnv read_distributed_env();

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  virtual void broadcast(std::vector<at::Tensor>& tensors) = 0;   // from rank 0, in place
  virtual void all_reduce_sum(std::vector<at::Tensor>& tensors) = 0;
  virtual void barrier() = 0;
};

// nullptr for a single process; otherwise a connected Gloo group. Failing to
// reach the master within distributed.timeout_s is an InputError naming it.
std::unique_ptr<ProcessGroup> connect(const DistributedEnv& env, const DistributedConfig& config);

// Sums gradients of `params` over all ranks in flat buckets of about
// `bucket_bytes`, so one collective carries many small tensors.
void all_reduce_gradients(ProcessGroup& group, const std::vector<at::Tensor>& params, int64_t bucket_bytes = 25 << 20);

}  // namespace segtrain::trainer
