#pragma once
// A training step replayed as CUDA graphs (SEGTRAIN_CUDA_GRAPH=1): a step of GPT-2 medium
// launches a few thousand kernels, each a few microseconds of host time, so on a fast GPU the
// host's launches, not the kernels, can set the pace; a graph launches them all as one. What
// it needs of the step is that every replay does what the capture did: the same kernels on the
// same addresses. So the inputs are copied into tensors that stay (the trainer's static
// micro-batches), gradients stay allocated and are zeroed in place, and every host decision a
// step takes (a non-finite step skipped, the learning rate and the clipping factor, written
// into device scalars) is taken outside the graphs. Two graphs, one on each side of the step's
// one host read (trainer/train/trainer_loop.cpp).
//
// Off unless SEGTRAIN_CUDA_GRAPH=1 (or auto) until a GPU session has run its gpu test (docs/gpus.md).
// SEGTRAIN_CUDA_GRAPH=static runs the same static path without capturing, on any device: the
// CPU tests check that path against the ordinary step, and on a GPU it tells a capture's
// problem from the static path's. SEGTRAIN_CUDA_GRAPH=auto captures where the run can be
// captured and trains the ordinary step, saying why, where =1 would refuse the run or stop it
// after it started (another shape, a parameter without a gradient): the behaviour a default
// needs. A capture that fails (a kernel that cannot be captured) still stops it, as it stops =1.
#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace segtrain::trainer {

enum class CudaGraphMode {
  off,        // the ordinary step
  captured,   // 1: the step's two halves captured after warm-up steps, replayed after
  static_path,  // static: the captured step's path (static inputs, gradients zeroed in place), run eagerly
};

// What SEGTRAIN_CUDA_GRAPH asks for: a mode, and whether the run falls back to the ordinary step
// where a capture cannot be taken (auto) rather than stopping.
struct CudaGraphRequest {
  CudaGraphMode mode = CudaGraphMode::off;
  bool automatic = false;
};

// The value of SEGTRAIN_CUDA_GRAPH (nullptr: unset): unset, empty or 0 off, 1 captured, static
// the static path, auto captured where it can be; any other value is an InputError naming the
// variable and what it takes.
CudaGraphRequest cuda_graph_switch(const char* value);

// The switch as this process's environment sets it, read once.
CudaGraphRequest cuda_graph_requested();

// Calls a body eagerly for its first `warmup` calls, then captures the next call into a CUDA
// graph (the body runs once, into the graph, which is then replayed for that call) and replays
// the graph for every call after. Mode static_path: eagerly every time. The caller runs every
// call on one non-default stream (StepStream) and keeps whatever the body reads and writes at
// the same addresses. The graph's memory (what the body allocates and frees inside) is its own
// pool, kept while the GraphedCall lives.
class GraphedCall {
 public:
  GraphedCall(CudaGraphMode mode, int64_t warmup);
  ~GraphedCall();
  GraphedCall(const GraphedCall&) = delete;
  GraphedCall& operator=(const GraphedCall&) = delete;

  void operator()(const std::function<void()>& body);
  bool captured() const { return captured_; }
  int64_t calls() const { return calls_; }
  // The next call is the capture (no other thread may touch the device during it).
  bool captures_next() const { return mode_ == CudaGraphMode::captured && !captured_ && calls_ == warmup_; }
  // The last call was the capture.
  bool just_captured() const { return captured_ && calls_ == warmup_ + 1; }

 private:
  CudaGraphMode mode_;
  int64_t warmup_;
  int64_t calls_ = 0;
  bool captured_ = false;
  struct Graph;  // the CUDA graph, in CUDA builds
  std::unique_ptr<Graph> graph_;
};

// While alive, work on `device` goes to one stream of its own (capture cannot use the default
// stream), ordered after what the default stream had queued; at the end the default stream
// waits for it, so evaluation and checkpoints, on the default stream, see the step's results.
// Nothing on a CPU device.
class StepStream {
 public:
  explicit StepStream(const c10::Device& device);
  ~StepStream();
  StepStream(const StepStream&) = delete;
  StepStream& operator=(const StepStream&) = delete;

 private:
  struct Guard;
  std::unique_ptr<Guard> guard_;
};

}  // namespace segtrain::trainer
