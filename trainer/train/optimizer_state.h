#pragma once
// AdamW's state as pieces: what an optimizer holds of each parameter (a whole
// tensor, or the slices a sharded rank owns) and what a checkpoint keeps. Each
// rank saves its own pieces; a resumed run reads the ranges its own slicing
// needs from whatever slicing the checkpoint was saved with, so a run may resume
// on any number of ranks, sharded or not.
#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace segtrain::trainer {

// One contiguous range of a parameter's moments, in the parameter's flat order.
struct StatePiece {
  std::string param;
  int64_t offset = 0;              // the first element
  at::Tensor exp_avg, exp_avg_sq;  // 1-D fp32, the same number of elements
};

// The tensor names a piece is saved under: "exp_avg.<param>@<offset>" and
// "exp_avg_sq.<param>@<offset>".
std::string piece_key(const std::string& moment, const std::string& param, int64_t offset);

// A saved state, read back by range. The pieces may come from any number of
// files (each kept mapped, not read, until a range is asked for).
class SavedOptimizerState {
 public:
  // `source` names where the state came from, for errors.
  SavedOptimizerState(int64_t steps, std::string source) : steps_(steps), source_(std::move(source)) {}

  // Adds the pieces of a tensor map saved with piece_key names; a key without
  // "@<offset>" is a whole parameter (optimizer.safetensors before sharded
  // saving). Other keys are ignored.
  void add(const std::map<std::string, at::Tensor>& tensors);
  void add(const StatePiece& piece);

  // One step count for every parameter: they step together (FusedAdamW skips a
  // parameter without a gradient, which no model here has in a step that updates).
  int64_t steps() const { return steps_; }
  // InputError naming `param` unless both moments' pieces cover exactly its
  // `param_numel` elements. Every rank checks every parameter before loading its
  // own ranges, so all ranks refuse a checkpoint alike (none waits in a collective
  // for one that refused).
  void check_covers(const std::string& param, int64_t param_numel) const;
  // Elements [offset, offset + numel) of `moment` ("exp_avg" or "exp_avg_sq")
  // of `param`, which has `param_numel` elements: an fp32 CPU tensor, after
  // check_covers.
  at::Tensor read(const std::string& moment, const std::string& param, int64_t param_numel, int64_t offset,
                  int64_t numel) const;

 private:
  struct Range {
    int64_t offset = 0;
    at::Tensor values;  // 1-D view
  };
  void add_range(const std::string& moment, const std::string& param, int64_t offset, const at::Tensor& values);

  int64_t steps_ = 0;
  std::string source_;
  std::map<std::string, std::vector<Range>> ranges_;  // by "<moment>.<param>", sorted by offset when read
};

}  // namespace segtrain::trainer
