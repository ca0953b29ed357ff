#pragma once
// One YAML key of a config file: its dotted path, what it expects in words, its
// documentation, and how it is read and written back. The run config's table is
// schema.cpp; the experiment file's is trainer/experiment/schema.cpp. Both are read
// by FieldReader (field_reader.h) and both print as rows of `segtrain config reference`.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/enum_names.h"
#include "common/numbers.h"
#include "trainer/config/config.h"

namespace segtrain::trainer::schema {

// A value of the wrong type or out of range; the reader adds where and which key.
// `mark`: the offending item of a list, when it is not the key's value itself.
class FieldError : public std::runtime_error {
 public:
  explicit FieldError(const std::string& what, YAML::Mark where = YAML::Mark::null_mark())
      : std::runtime_error(what), mark(where) {}
  YAML::Mark mark;
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

// Shortest text that parses back to the same double (common/numbers.h).
using segtrain::format_double;

// --- ranges -----------------------------------------------------------------

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

struct Bound {
  double value;
  bool inclusive;
};
constexpr Bound kNoHigh{std::numeric_limits<double>::infinity(), true};
constexpr Bound kAnyReal{-std::numeric_limits<double>::infinity(), true};  // a range that is a rule of its section
constexpr Bound at_least(double v) { return {v, true}; }
constexpr Bound above(double v) { return {v, false}; }
constexpr Bound below(double v) { return {v, false}; }

// --- reading one value (each throws FieldError naming `type`) ---------------

[[noreturn]] void expected(const std::string& type, const YAML::Node& node);
const std::string& scalar(const YAML::Node& node, const std::string& type);
// Integers may be written as 1000000 or 1e6, never as 1.5.
int64_t parse_integer(const YAML::Node& node, const std::string& type, int64_t lo, int64_t hi);
double parse_real(const YAML::Node& node, const std::string& type, Bound lo, Bound hi);
const YAML::Node& sequence(const YAML::Node& node, const std::string& type);
// Entry `index` (from 0) of a list as a scalar; else FieldError at the entry naming it and what
// each entry is: "entry 2 is a list of 1 entry; each entry is one of q, k, v".
const std::string& entry_scalar(const YAML::Node& item, std::size_t index, const std::string& entry_type);
bool is_null_word(const YAML::Node& node, const char* word);
std::string int_range(int64_t lo, int64_t hi);
std::string real_range(Bound lo, Bound hi);

// --- writing one value back --------------------------------------------------

YAML::Node plain(const std::string& text);
YAML::Node null_or(const char* word);  // "null" is YAML's null, any other word itself
YAML::Node flow_list();
// A flow list of plain scalars: [a, b, c].
YAML::Node plain_list(const std::vector<std::string>& items);
YAML::Node flow_map();

// --- field builders ----------------------------------------------------------

Field integer(std::string path, int64_t& v, int64_t lo, int64_t hi, std::string doc);
Field maybe_integer(std::string path, std::optional<int64_t>& v, const char* word, int64_t lo, std::string doc);
Field real(std::string path, double& v, Bound lo, Bound hi, std::string doc);
Field maybe_real(std::string path, std::optional<double>& v, const char* word, Bound lo, Bound hi, std::string doc);
Field flag(std::string path, bool& v, std::string doc);
// true, false, an integer N >= 0 (the first N blocks) or auto (models/spec/config.h).
Field checkpointed_blocks(std::string path, models::ActivationCheckpointing& v, std::string doc);
Field text(std::string path, std::string& v, std::string doc);
// A non-empty string, or `word` (stored as the empty string: a default the reader works out).
Field text_or(std::string path, std::string& v, const char* word, std::string doc);
Field text_list(std::string path, std::vector<std::string>& v, std::string doc);
// A non-empty list, or `word` as an empty vector.
Field maybe_integer_list(std::string path, std::vector<int64_t>& v, const char* word, int64_t lo, std::string doc);
// A non-empty list of integers >= lo, none twice; or `word` as an empty vector
// (nullptr: the list is never empty).
Field integer_set(std::string path, std::vector<int64_t>& v, const char* word, int64_t lo, std::string doc);
Field real_list(std::string path, std::vector<double>& v, std::size_t size, Bound lo, Bound hi, std::string doc);
Field maybe_real_list(std::string path, std::vector<double>& v, const char* word, Bound lo, Bound hi, std::string doc);

// One of `words` (a table known only at run time, as the evaluation tasks').
Field word_choice(std::string path, std::string& v, std::vector<std::string> words, std::string doc);
// A non-empty list of `words`, none twice.
Field word_set(std::string path, std::vector<std::string>& v, std::vector<std::string> words, std::string doc);
// The same, or `word` as an empty vector (a default the reader works out).
Field maybe_word_set(std::string path, std::vector<std::string>& v, const char* word, std::vector<std::string> words,
                     std::string doc);

template <class E, std::size_t N>
E parse_choice(const YAML::Node& node, const EnumName<E> (&table)[N], const std::string& type) {
  auto e = enum_from_name(table, scalar(node, type));
  if (!e) expected(type, node);
  return *e;
}

template <class E, std::size_t N>
Field choice(std::string path, E& v, const EnumName<E> (&table)[N], std::string doc) {
  std::string type = "one of " + enum_choices(table);
  return {path, type, std::move(doc), [&v, &table, type](const YAML::Node& n) { v = parse_choice(n, table, type); },
          [&v, &table] { return plain(enum_name(table, v)); }};
}

// One of the table's names, or `word` (nullopt).
template <class E, std::size_t N>
Field maybe_choice(std::string path, std::optional<E>& v, const char* word, const EnumName<E> (&table)[N],
                   std::string doc) {
  std::string type = std::string(word) + " or one of " + enum_choices(table);
  return {path, type, std::move(doc),
          [&v, &table, type, word](const YAML::Node& n) {
            if (is_null_word(n, word)) v.reset();
            else v = parse_choice(n, table, type);
          },
          [&v, &table, word] { return v ? plain(enum_name(table, *v)) : null_or(word); }};
}

// A non-empty list of the table's names, none twice, or `word` (an empty vector).
template <class E, std::size_t N>
Field maybe_choice_list(std::string path, std::vector<E>& v, const char* word, const EnumName<E> (&table)[N],
                        std::string doc) {
  std::string type = std::string(word) + " or a non-empty list of " + enum_choices(table);
  return {path, type, std::move(doc),
          [&v, &table, type, word](const YAML::Node& n) {
            if (is_null_word(n, word)) return v.clear();
            std::vector<E> out;
            const std::string entry_type = "one of " + enum_choices(table);
            for (const auto& item : sequence(n, type)) {
              entry_scalar(item, out.size(), entry_type);
              const E e = parse_choice(item, table, type);
              if (std::find(out.begin(), out.end(), e) != out.end())
                throw FieldError(item.Scalar() + " is listed twice", item.Mark());
              out.push_back(e);
            }
            if (out.empty()) expected(type, n);
            v = out;
          },
          [&v, &table, word] {
            if (v.empty()) return null_or(word);
            auto list = flow_list();
            for (const auto& x : v) list.push_back(plain(enum_name(table, x)));
            return list;
          }};
}

// The reference rows of a key table: `| key | type | default | meaning |`.
std::string reference_rows(const std::vector<Field>& fields);

}  // namespace segtrain::trainer::schema
