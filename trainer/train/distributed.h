#pragma once
// Data parallelism on PyTorch's own c10d: Gloo on CPU, NCCL on CUDA builds of
// LibTorch (compiled only when CMake finds c10d's ProcessGroupNCCL and nccl.h,
// SEGTRAIN_WITH_NCCL). The environment is torchrun's (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*) or
// SLURM's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID); a single process needs
// none of it. c10d stays behind this interface so only c10d_group.cpp and
// rendezvous.cpp (environment: distributed_env.cpp) see the
// Gloo and NCCL headers.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/config/config.h"

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

// A collective in flight. wait() returns once its result is in place for what
// the caller does next and throws (std::runtime_error) when a peer failed or
// distributed.timeout_s ran out. On Gloo (CPU) that is on the host: wait()
// blocks until the data is there. On NCCL it is on the device: wait() makes the
// caller's CUDA stream wait for the collective and returns at once (as DDP's
// reducer waits), so the host keeps queueing work; the group's watchdog
// enforces distributed.timeout_s and ends the process on a hung collective.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
};

// shutdown() ends a connected group cleanly (NCCL: its communicators
// destroyed) once every rank is done with it, also after a stop all ranks
// agreed on. Destroying a group not shut down does it then, or aborts it while
// an exception unwinds (a clean destroy may wait for a peer that is gone).
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  virtual void broadcast(std::vector<at::Tensor>& tensors) = 0;   // from rank 0, in place
  virtual void all_reduce_sum(std::vector<at::Tensor>& tensors) = 0;
  // Starts summing `tensor` over all ranks in place and returns at once. Every
  // rank must start its collectives in the same order.
  virtual std::unique_ptr<PendingCollective> all_reduce_sum_async(const at::Tensor& tensor) = 0;
  // ZeRO-1's two halves of an all-reduce, in place on a flat 1-D `whole` whose
  // length divides by world_size(); rank r's slice is [r*n/W, (r+1)*n/W).
  // reduce-scatter: afterwards rank r's slice holds the sum over ranks of that
  // slice (the rest of `whole` is left as it was). all-gather: afterwards all of
  // `whole` holds every rank's slice. NCCL: c10d's reduce_scatter_tensor and
  // all_gather_into_tensor (_reduce_scatter_base, _allgather_base) with the
  // slice as the output (input) buffer, NCCL's in-place form (recvbuff ==
  // sendbuff + rank * count). Gloo, whose versions of both allocate a whole
  // copy (c10d_group.cpp): the reduce-scatter is an all-to-all
  // (alltoall_base) into a buffer of `whole`'s size that lives until wait(),
  // summed by the receiver; the all-gather is one in-place broadcast a rank.
  virtual std::unique_ptr<PendingCollective> reduce_scatter_sum_async(const at::Tensor& whole) = 0;
  virtual std::unique_ptr<PendingCollective> all_gather_async(const at::Tensor& whole) = 0;
  virtual void barrier() = 0;
  // Throws runtime_error (one line: which failure, distributed.timeout_s) when
  // the backend has seen a collective fail. NCCL: its watchdog times out a
  // collective whose peer died, aborts the communicator (so a host read waiting
  // on it returns, with what the collective never wrote) and records the error;
  // the blocking collectives and the step's host read check here before any
  // value is used. Gloo fails in wait() itself.
  virtual void check_healthy() const {}
  // How many collectives GradientSync may leave in flight before it waits for
  // the oldest, 0 for no limit. Gloo allocates buffers per collective (its
  // reduce-scatter's all-to-all) and its waits block the host, so a few at a
  // time; NCCL's waits are stream-ordered and its buffers are the tensors, so
  // every bucket's collective starts as soon as backward has produced it.
  virtual size_t in_flight_limit() const { return 0; }
  // Blocking collectives of host values (broadcast, all_reduce_sum, barrier):
  // each is a point where the host stops until every rank arrived. On Gloo
  // the gradient buckets' collectives block the host as well (not counted).
  virtual int64_t host_waits() const { return 0; }
  virtual void shutdown() {}
};

// Which c10d backend `distributed.backend` means on this build and device:
// auto is nccl for a CUDA device when this build has NCCL, gloo otherwise;
// nccl on a build without it (or on a CPU device) is an InputError.
Backend resolve_backend(Backend wanted, bool cuda_device);

// nullptr for a single process; otherwise a connected group for the backend
// resolve_backend picks (NCCL works on `device`, the rank's cuda:LOCAL_RANK).
// Gloo binds the interfaces GLOO_SOCKET_IFNAME names (comma-separated, as in
// PyTorch), else the local address that reaches MASTER_ADDR (127.0.0.1 for a
// loopback master); NCCL reads NCCL_SOCKET_IFNAME itself. Each rank publishes
// its address in the rendezvous, which takes at most distributed.timeout_s.
// InputError naming the cause: the master unreachable, an interface this host
// lacks, a rank that never joined (named, with its node), an unavailable
// backend (even for one process). A failure of c10d here or in a collective is
// one line naming the peer (rank and address) and the cause; LibTorch's C++
// backtrace follows only at run.log_level: debug.
std::unique_ptr<ProcessGroup> connect(const DistributedEnv& env, const DistributedConfig& config,
                                      const at::Device& device);

}  // namespace segtrain::trainer
