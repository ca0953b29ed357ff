#pragma once
// Where a YAML value was written and what it says: the two things every config
// message needs (run configs, experiment files, saved config.yaml on resume).
#include <string>

#include <yaml-cpp/yaml.h>

namespace segtrain::trainer {

// "file.yaml:12:5" for a node's mark, or just the source when it has none.
std::string location(const std::string& source, const YAML::Mark& mark);

// The YAML text of a dotted key ("train.lr") under `root`, or "(missing)".
std::string key_text(const YAML::Node& root, const std::string& dotted_key);

}  // namespace segtrain::trainer
