#pragma once
// Internal to the config code: one Field per YAML key, bound to a Config.
#include <functional>
#include <initializer_list>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "trainer/config/config.h"
#include "common/numbers.h"

namespace segtrain::trainer::schema {

// A value of the wrong type or out of range; the parser adds where and which key.
class FieldError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Field {
  std::string path;  // "train.lr"
  std::string type;  // what is expected, in words: "number > 0"
  std::string doc;
  std::function<void(const YAML::Node&)> parse;  // throws FieldError
  std::function<YAML::Node()> emit;
  unsigned roles = 0;  // KeyRole bits: the rules that name this key

  bool has(KeyRole role) const { return (roles & bit(role)) != 0; }
  Field&& with(std::initializer_list<KeyRole> list) && {
    for (KeyRole role : list) roles |= bit(role);
    return std::move(*this);
  }
  static unsigned bit(KeyRole role) { return 1u << static_cast<unsigned>(role); }
};

// Every key of the config, in the order the resolved YAML lists them.
std::vector<Field> fields(Config& config);

// Shortest text that parses back to the same double (common/numbers.h).
using segtrain::format_double;

}  // namespace segtrain::trainer::schema
