// An ATen op census of a whole process, loaded with LD_PRELOAD: every op that runs a kernel of its own (it calls
// no other op that does; about one kernel launch on a GPU), counted by name, its inputs' dtypes and shapes and where
// it ran (the autograd node it ran under, else the outermost op that called it), and every op called, written as
// CSV when the process exits. bench/op_census.py builds it (g++, against the LibTorch `segtrain` links) and runs
// `segtrain train` with it twice, N and 2N steps, so that the difference is what N steps run: the copies, adds and
// launches of a step, on the CPU, where no GPU profiler is.
// segtrain has no profiler hook of its own (trainer/ is not touched for a benchmark); ATen reports every op it
// dispatches to global RecordFunction callbacks, on every thread (autograd's too), which this library registers
// when the dynamic linker loads it, after LibTorch (its dependency).
//
//   LD_PRELOAD=libop_census.so SEGTRAIN_OP_CENSUS=census.csv segtrain train ...
//
// census.csv: kind,count,elements,op,inputs,context. kind "kernel": the ops that ran a kernel, as above; kind
// "call": every op called (a composite such as the fused AdamW too), by op and inputs (context ""). inputs:
// each tensor input's dtype and shape ("bf16[2,64,64],f32[64]"); elements: the first tensor input's, summed over
// the calls.
#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace {

struct Frame {
  std::string name;
  bool backward = false;      // an autograd node, or the engine's scope around one: a context, not an op
  bool runs_kernels = false;  // it called an op that ran a kernel (it is then not counted itself)
  std::string inputs;
  int64_t elements = 0;
};

struct Tally {
  int64_t count = 0, elements = 0;
};

using Key = std::tuple<std::string, std::string, std::string, std::string>;  // kind, op, inputs, context

// Never destroyed: the census is written by an exit handler, which may run after this library's static
// destructors (the handler of a library's constructor runs when the library is finalised).
std::mutex& tallies_mutex = *new std::mutex;
std::map<Key, Tally>& tallies = *new std::map<Key, Tally>;
thread_local std::vector<Frame> stack;

// Ops that only describe or allocate a tensor: no kernel on a GPU, so an op that calls only these (an mm that
// allocates its result and resolves its inputs' conjugation) counts as the kernel itself. Its blind spot: an op
// that runs a kernel of its own and also calls one that does counts as that one alone (the CPU's mul_out into
// a narrower dtype multiplies into a temporary, then copies: one copy_ counted).
const std::set<std::string>& kNoKernel = *new std::set<std::string>{
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::view", "aten::as_strided", "aten::_reshape_alias",
    "aten::t", "aten::transpose", "aten::expand", "aten::permute", "aten::slice", "aten::select", "aten::unsqueeze",
    "aten::squeeze", "aten::detach", "detach", "aten::alias", "aten::resize_", "aten::set_", "aten::lift_fresh",
    "aten::_unsafe_view", "aten::unflatten", "aten::split", "aten::chunk", "aten::narrow", "aten::unbind",
    "aten::split_with_sizes", "aten::result_type", "aten::resolve_conj", "aten::resolve_neg", "aten::view_as",
    "aten::expand_as", "aten::reshape", "aten::flatten", "aten::contiguous", "aten::numel", "aten::size",
    "aten::stride", "aten::lift", "aten::squeeze_", "aten::unsqueeze_", "aten::as_strided_", "aten::_to_copy",
    "aten::to", "aten::is_nonzero", "aten::item"};  // never destroyed, as the tallies

const char* short_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "f32";
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "f16";
    case at::kLong: return "i64";
    case at::kInt: return "i32";
    case at::kBool: return "bool";
    case at::kDouble: return "f64";
    default: return c10::toString(t);
  }
}

// "bf16[2,64,64],f32[64]": each tensor input's dtype and shape, in order; a tensor list as its length and first
// tensor ("28 x f32[4096]").
void describe_inputs(const at::RecordFunction& fn, Frame& frame) {
  bool first_tensor = true;
  for (const c10::IValue& input : fn.inputs()) {
    at::Tensor tensor;
    std::string prefix;
    if (input.isTensor()) {
      tensor = input.toTensor();
    } else if (input.isTensorList() && !input.toTensorList().empty()) {
      tensor = input.toTensorList().get(0);
      prefix = std::to_string(input.toTensorList().size()) + " x ";
    }
    if (!tensor.defined()) continue;
    if (!frame.inputs.empty()) frame.inputs += ',';
    frame.inputs += prefix + short_dtype(tensor.scalar_type()) + "[";
    for (int64_t d = 0; d < tensor.dim(); ++d) frame.inputs += (d ? "," : "") + std::to_string(tensor.size(d));
    frame.inputs += "]";
    if (first_tensor) frame.elements = tensor.numel();
    first_tensor = false;
  }
}

// Where a leaf ran: the innermost autograd node, else the outermost op ("" at top level).
std::string context_of(const std::vector<Frame>& frames) {
  for (auto it = frames.rbegin(); it != frames.rend(); ++it)
    if (it->backward) return it->name;
  return frames.empty() ? "" : frames.front().name;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Frame frame;
  frame.name = fn.name();
  // An autograd node, or the engine's "autograd::engine::evaluate_function: <node>" scope around it.
  frame.backward = fn.scope() == at::RecordScope::BACKWARD_FUNCTION || frame.name.rfind("autograd::", 0) == 0;
  if (!frame.backward) {
    describe_inputs(fn, frame);
    const std::lock_guard<std::mutex> lock(tallies_mutex);
    Tally& tally = tallies[Key{"call", frame.name, frame.inputs, ""}];
    ++tally.count;
    tally.elements += frame.elements;
  }
  stack.push_back(std::move(frame));
  return nullptr;
}

void on_end(const at::RecordFunction&, at::ObserverContext*) {
  if (stack.empty()) return;  // started before this library was loaded
  Frame frame = std::move(stack.back());
  stack.pop_back();
  const bool counted = !frame.backward && !frame.runs_kernels && kNoKernel.count(frame.name) == 0;
  if (!stack.empty() && (counted || frame.runs_kernels)) stack.back().runs_kernels = true;
  if (!counted) return;
  Key key{"kernel", frame.name, frame.inputs, context_of(stack)};
  const std::lock_guard<std::mutex> lock(tallies_mutex);
  Tally& tally = tallies[key];
  ++tally.count;
  tally.elements += frame.elements;
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

at::CallbackHandle census_callback = 0;

void write_census() {
  at::removeCallback(census_callback);  // no op counted while the process tears down what the callback reads
  const char* path = std::getenv("SEGTRAIN_OP_CENSUS");
  std::FILE* out = std::fopen(path, "w");
  if (out == nullptr) {
    std::fprintf(stderr, "op_census: cannot write %s\n", path);
    return;
  }
  const std::lock_guard<std::mutex> lock(tallies_mutex);
  std::fprintf(out, "kind,count,elements,op,inputs,context\n");
  for (const auto& [key, tally] : tallies)
    std::fprintf(out, "%s,%lld,%lld,%s,%s,%s\n", std::get<0>(key).c_str(), static_cast<long long>(tally.count),
                 static_cast<long long>(tally.elements), quoted(std::get<1>(key)).c_str(),
                 quoted(std::get<2>(key)).c_str(), quoted(std::get<3>(key)).c_str());
  std::fclose(out);
}

__attribute__((constructor)) void start_census() {
  if (std::getenv("SEGTRAIN_OP_CENSUS") == nullptr) return;
  census_callback = at::addGlobalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                            .needsInputs(true)
                            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  std::atexit(write_census);
}

}  // namespace
