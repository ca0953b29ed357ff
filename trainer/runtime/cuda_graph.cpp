#include "trainer/runtime/cuda_graph.h"

#include <cstdlib>
#include <utility>

#include "common/error.h"
#if SEGTRAIN_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace segtrain::trainer {

CudaGraphRequest cuda_graph_switch(const char* value) {
  const std::string v = value ? value : "";
  if (v.empty() || v == "0") return {CudaGraphMode::off, false};
  if (v == "1") return {CudaGraphMode::captured, false};
  if (v == "static") return {CudaGraphMode::static_path, false};
  if (v == "auto") return {CudaGraphMode::captured, true};
  throw InputError("SEGTRAIN_CUDA_GRAPH=" + v +
                   ": expected 0 (the ordinary step), 1 (the step captured as CUDA graphs), auto (captured where "
                   "the run can be, else the ordinary step) or static (the captured step's path, not captured)");
}

CudaGraphRequest cuda_graph_requested() {
  static const CudaGraphRequest request = cuda_graph_switch(std::getenv("SEGTRAIN_CUDA_GRAPH"));
  return request;
}

#if SEGTRAIN_WITH_CUDA
struct GraphedCall::Graph {
  at::cuda::CUDAGraph graph;
};
struct StepStream::Guard {
  c10::cuda::CUDAStream outer;
  c10::cuda::CUDAStreamGuard on_side;
  explicit Guard(const c10::cuda::CUDAStream& side)
      : outer(c10::cuda::getCurrentCUDAStream(side.device_index())), on_side(side) {}
};
#else
struct GraphedCall::Graph {};
struct StepStream::Guard {};
#endif

GraphedCall::GraphedCall(CudaGraphMode mode, int64_t warmup) : mode_(mode), warmup_(warmup) {}
GraphedCall::~GraphedCall() = default;

void GraphedCall::operator()(const std::function<void()>& body) {
  ++calls_;
  if (mode_ != CudaGraphMode::captured || calls_ <= warmup_) return body();
#if SEGTRAIN_WITH_CUDA
  if (!captured_) {
    // What the eager calls left cached is handed back, so the graph's pool does not sit beside it.
    c10::cuda::CUDACachingAllocator::emptyCache();
    graph_ = std::make_unique<Graph>();
    graph_->graph.capture_begin();
    try {
      body();
    } catch (...) {
      // A body that fails inside the capture leaves the stream capturing: end it (its graph is
      // invalid and dropped) so that the error, not a capture error after it, reaches the user.
      try {
        graph_->graph.capture_end();
      } catch (...) {
      }
      graph_.reset();
      throw;
    }
    graph_->graph.capture_end();
    captured_ = true;
  }
  graph_->graph.replay();
#else
  throw InputError("SEGTRAIN_CUDA_GRAPH=1 needs a CUDA build of segtrain");
#endif
}

StepStream::StepStream(const c10::Device& device) {
#if SEGTRAIN_WITH_CUDA
  if (!device.is_cuda()) return;
  // One stream for the whole run: the graphs replay on the stream they were captured on.
  static const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  guard_ = std::make_unique<Guard>(side);
  at::cuda::CUDAEvent queued;
  queued.record(guard_->outer);
  queued.block(side);
#else
  (void)device;
#endif
}

StepStream::~StepStream() {
#if SEGTRAIN_WITH_CUDA
  if (!guard_) return;
  const c10::cuda::CUDAStream side = c10::cuda::getCurrentCUDAStream(guard_->outer.device_index());
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(guard_->outer);
#endif
}

}  // namespace segtrain::trainer
