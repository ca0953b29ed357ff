#include "trainer/train/optimizer_state.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace segtrain::trainer {

std::string piece_key(const std::string& moment, const std::string& param, int64_t offset) {
  return moment + "." + param + "@" + std::to_string(offset);
}

void SavedOptimizerState::add_range(const std::string& moment, const std::string& param, int64_t offset,
                                    const at::Tensor& values) {
  if (offset > std::numeric_limits<int64_t>::max() - values.numel())
    throw InputError(source_ + ": optimizer state piece '" + piece_key(moment, param, offset) +
                     "' ends past any parameter's size");
  auto& ranges = ranges_[moment + "." + param];
  const Range range{offset, values.reshape(-1)};
  // Kept sorted by offset, so read() walks them in order.
  ranges.insert(std::upper_bound(ranges.begin(), ranges.end(), range,
                                 [](const Range& a, const Range& b) { return a.offset < b.offset; }),
                range);
}

void SavedOptimizerState::add(const StatePiece& piece) {
  add_range("exp_avg", piece.param, piece.offset, piece.exp_avg);
  add_range("exp_avg_sq", piece.param, piece.offset, piece.exp_avg_sq);
}

void SavedOptimizerState::add(const std::map<std::string, at::Tensor>& tensors) {
  for (const auto& [key, values] : tensors) {
    for (const char* moment : {"exp_avg_sq", "exp_avg"}) {  // the longer prefix first
      const std::string prefix = std::string(moment) + ".";
      if (key.rfind(prefix, 0) != 0) continue;
      const std::string rest = key.substr(prefix.size());
      const size_t at = rest.rfind('@');
      int64_t offset = 0;
      if (at != std::string::npos) {
        size_t used = 0;
        try {
          offset = std::stoll(rest.substr(at + 1), &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || at + 1 + used != rest.size() || offset < 0)
          throw InputError(source_ + ": optimizer state entry '" + key + "' has no valid @offset");
      }
      if (values.scalar_type() != at::kFloat)
        throw InputError(source_ + ": optimizer state entry '" + key + "' is " + c10::toString(values.scalar_type()) +
                         ", expected F32");
      add_range(moment, at == std::string::npos ? rest : rest.substr(0, at), offset, values);
      break;
    }
  }
}

void SavedOptimizerState::check_covers(const std::string& param, int64_t param_numel) const {
  for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
    auto it = ranges_.find(std::string(moment) + "." + param);
    int64_t covered = 0, end = 0;  // the prefix the pieces cover without a gap; where the last one ends
    if (it != ranges_.end())
      for (const Range& r : it->second) {
        if (r.offset <= covered) covered = std::max(covered, r.offset + r.values.numel());
        end = std::max(end, r.offset + r.values.numel());
      }
    if (it != ranges_.end() && end != param_numel)
      throw InputError(source_ + ": optimizer state of '" + param + "' has " + std::to_string(end) +
                       " elements, this model's parameter " + std::to_string(param_numel) +
                       " (the checkpoint does not match this model)");
    if (covered < param_numel)
      throw InputError(source_ + ": optimizer state has no " + moment + " for element " + std::to_string(covered) +
                       " of '" + param + "' (the checkpoint does not match this model)");
  }
}

at::Tensor SavedOptimizerState::read(const std::string& moment, const std::string& param, int64_t param_numel,
                                     int64_t offset, int64_t numel) const {
  at::Tensor out = at::empty({numel}, at::kFloat);
  check_covers(param, param_numel);
  auto it = ranges_.find(moment + "." + param);
  int64_t next = offset;  // the first element not yet copied
  if (it != ranges_.end())
    for (const Range& r : it->second) {
      const int64_t end = r.offset + r.values.numel();
      if (end <= next || r.offset > next) {
        if (r.offset > next) break;  // a gap: sorted, so no later range starts at or before `next`
        continue;
      }
      const int64_t last = std::min(end, offset + numel);
      out.narrow(0, next - offset, last - next).copy_(r.values.narrow(0, next - r.offset, last - next));
      next = last;
      if (next == offset + numel) break;
    }
  if (next < offset + numel)
    throw InputError(source_ + ": optimizer state has no " + moment + " for element " + std::to_string(next) + " of '" +
                     param + "' (the checkpoint does not match this model)");
  return out;
}

}  // namespace segtrain::trainer
