#include "trainer/config/yaml_text.h"

namespace segtrain::trainer {

std::string location(const std::string& source, const YAML::Mark& mark) {
  if (mark.is_null()) return source;
  return source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

std::string key_text(const YAML::Node& root, const std::string& dotted_key) {
  YAML::Node node = YAML::Clone(root);  // operator[] on a const walk must not insert
  std::string rest = dotted_key;
  for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
    node = node[rest.substr(0, dot)];
    if (!node) return "(missing)";
    rest = rest.substr(dot + 1);
  }
  node = node[rest];
  if (!node) return "(missing)";
  YAML::Emitter out;
  out << node;
  return out.c_str();
}

}  // namespace segtrain::trainer
