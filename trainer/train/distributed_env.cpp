// The launcher's environment (torchrun's or SLURM's variables) and which c10d
// backend a run uses: no c10d here.
#include <cstdlib>
#include <optional>
#include <string>

#include "common/error.h"
#include "trainer/train/distributed.h"

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

Backend resolve_backend(Backend wanted, bool cuda_device) {
  if (wanted == Backend::auto_select) return SEGTRAIN_WITH_NCCL && cuda_device ? Backend::nccl : Backend::gloo;
  if (wanted == Backend::nccl && !SEGTRAIN_WITH_NCCL)
    throw InputError(
        "distributed.backend: nccl is not available: this build of segtrain has no NCCL (LibTorch without CUDA/c10d "
        "NCCL, see `segtrain --version`); use gloo or auto");
  if (wanted == Backend::nccl && !cuda_device)
    throw InputError("distributed.backend: nccl needs run.device cuda (or auto on a machine with a CUDA device)");
  return wanted;
}

}  // namespace segtrain::trainer
