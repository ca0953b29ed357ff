#include "models/spec/families/hf_names.h"

#include <algorithm>
#include <cctype>

namespace segtrain::models {

std::optional<std::string> rename_slot(const std::string& from, const std::string& to, const std::string& name) {
  const auto slot = from.find("{}");
  if (slot == std::string::npos) return name == from ? std::optional<std::string>(to) : std::nullopt;
  const std::string head = from.substr(0, slot), tail = from.substr(slot + 2);
  if (name.size() <= head.size() + tail.size() || !name.starts_with(head) || !name.ends_with(tail))
    return std::nullopt;
  const std::string layer = name.substr(head.size(), name.size() - head.size() - tail.size());
  const bool index = std::all_of(layer.begin(), layer.end(), [](unsigned char ch) { return std::isdigit(ch); });
  if (!index || (layer.size() > 1 && layer[0] == '0')) return std::nullopt;  // "h.01" is not layer 1
  std::string out = to;
  return out.replace(out.find("{}"), 2, layer);
}

}  // namespace segtrain::models
