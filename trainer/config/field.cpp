#include "trainer/config/field.h"

#include <charconv>
#include <cmath>
#include <sstream>

namespace segtrain::trainer::schema {
namespace {

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "nothing (null)";
    case YAML::NodeType::Sequence:  // its size: "a list" alone said nothing of a list too long, short or empty
      if (node.size() == 0) return "an empty list";
      return "a list of " + std::to_string(node.size()) + (node.size() == 1 ? " entry" : " entries");
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: return "'" + node.Scalar() + "'";
    default: return "an undefined value";
  }
}

std::optional<int64_t> to_integer(const std::string& text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc() && ptr == end) return value;
  double d = 0;
  auto [dptr, dec] = std::from_chars(text.data(), end, d);
  if (dec == std::errc() && dptr == end && std::isfinite(d) && d == std::floor(d) &&
      std::fabs(d) < 9.0e15)
    return static_cast<int64_t>(d);
  return std::nullopt;
}

std::optional<double> to_real(const std::string& text) {
  double value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<bool> to_bool(const std::string& text) {
  if (text == "true" || text == "True" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "False" || text == "no" || text == "off") return false;
  return std::nullopt;
}

bool in_range(double v, Bound lo, Bound hi) {
  return (lo.inclusive ? v >= lo.value : v > lo.value) && (hi.inclusive ? v <= hi.value : v < hi.value);
}

// A non-empty list, or `word` as an empty vector; each item read by `parse_item`
// (YAML item, type text) and written back by `text_of`.
template <class T, class ParseItem, class TextOf>
Field maybe_list(std::string path, std::vector<T>& v, const char* word, std::string type, std::string entry_type,
                 std::string doc, ParseItem parse_item, TextOf text_of) {
  return {path, type, std::move(doc),
          [&v, type, entry_type, word, parse_item](const YAML::Node& n) {
            if (is_null_word(n, word)) {
              v.clear();
              return;
            }
            std::vector<T> out;
            for (const auto& item : sequence(n, type)) {
              entry_scalar(item, out.size(), entry_type);
              out.push_back(parse_item(item, type));
            }
            if (out.empty()) expected(type, n);
            v = out;
          },
          [&v, word, text_of] {
            if (v.empty()) return null_or(word);
            auto list = flow_list();
            for (const auto& x : v) list.push_back(plain(text_of(x)));
            return list;
          }};
}

}  // namespace

void expected(const std::string& type, const YAML::Node& node) {
  throw FieldError("expected " + type + ", got " + describe(node), node.Mark());
}

const std::string& scalar(const YAML::Node& node, const std::string& type) {
  if (!node.IsScalar()) expected(type, node);
  return node.Scalar();
}

int64_t parse_integer(const YAML::Node& node, const std::string& type, int64_t lo, int64_t hi) {
  auto v = to_integer(scalar(node, type));
  if (!v || *v < lo || *v > hi) expected(type, node);
  return *v;
}

double parse_real(const YAML::Node& node, const std::string& type, Bound lo, Bound hi) {
  auto v = to_real(scalar(node, type));
  if (!v || !in_range(*v, lo, hi)) expected(type, node);
  return *v;
}

const YAML::Node& sequence(const YAML::Node& node, const std::string& type) {
  if (!node.IsSequence()) expected(type, node);
  return node;
}

const std::string& entry_scalar(const YAML::Node& item, std::size_t index, const std::string& entry_type) {
  if (!item.IsScalar())
    throw FieldError("entry " + std::to_string(index + 1) + " is " + describe(item) + "; each entry is " + entry_type,
                     item.Mark());
  return item.Scalar();
}

bool is_null_word(const YAML::Node& node, const char* word) {
  return node.IsNull() || (node.IsScalar() && node.Scalar() == word);
}

std::string int_range(int64_t lo, int64_t hi) {
  if (hi == kMaxInt) return lo == std::numeric_limits<int64_t>::min() ? "" : " >= " + std::to_string(lo);
  return " in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

std::string real_range(Bound lo, Bound hi) {
  const bool has_lo = std::isfinite(lo.value), has_hi = std::isfinite(hi.value);
  if (has_lo && has_hi)
    return std::string(" in ") + (lo.inclusive ? "[" : "(") + format_double(lo.value) + ", " +
           format_double(hi.value) + (hi.inclusive ? "]" : ")");
  if (has_lo) return (lo.inclusive ? " >= " : " > ") + format_double(lo.value);
  if (has_hi) return (hi.inclusive ? " <= " : " < ") + format_double(hi.value);
  return "";
}

YAML::Node plain(const std::string& text) { return YAML::Node(text); }

YAML::Node null_or(const char* word) {
  return std::string(word) == "null" ? YAML::Node(YAML::NodeType::Null) : plain(word);
}

YAML::Node flow_list() {
  YAML::Node list(YAML::NodeType::Sequence);
  list.SetStyle(YAML::EmitterStyle::Flow);
  return list;
}

YAML::Node plain_list(const std::vector<std::string>& items) {
  auto list = flow_list();
  for (const auto& x : items) list.push_back(plain(x));
  return list;
}

YAML::Node flow_map() {
  YAML::Node map(YAML::NodeType::Map);
  map.SetStyle(YAML::EmitterStyle::Flow);
  return map;
}

Field integer(std::string path, int64_t& v, int64_t lo, int64_t hi, std::string doc) {
  std::string type = "an integer" + int_range(lo, hi);
  return {path, type, std::move(doc),
          [&v, type, lo, hi](const YAML::Node& n) { v = parse_integer(n, type, lo, hi); },
          [&v] { return plain(std::to_string(v)); }};
}

Field maybe_integer(std::string path, std::optional<int64_t>& v, const char* word, int64_t lo, std::string doc) {
  std::string type = std::string(word) + " or an integer" + int_range(lo, kMaxInt);
  return {path, type, std::move(doc),
          [&v, type, word, lo](const YAML::Node& n) {
            if (is_null_word(n, word)) v.reset();
            else v = parse_integer(n, type, lo, kMaxInt);
          },
          [&v, word] { return v ? plain(std::to_string(*v)) : null_or(word); }};
}

Field real(std::string path, double& v, Bound lo, Bound hi, std::string doc) {
  std::string type = "a number" + real_range(lo, hi);
  return {path, type, std::move(doc),
          [&v, type, lo, hi](const YAML::Node& n) { v = parse_real(n, type, lo, hi); },
          [&v] { return plain(format_double(v)); }};
}

Field maybe_real(std::string path, std::optional<double>& v, const char* word, Bound lo, Bound hi, std::string doc) {
  std::string type = std::string(word) + " or a number" + real_range(lo, hi);
  return {path, type, std::move(doc),
          [&v, type, word, lo, hi](const YAML::Node& n) {
            if (is_null_word(n, word)) v.reset();
            else v = parse_real(n, type, lo, hi);
          },
          [&v, word] { return v ? plain(format_double(*v)) : null_or(word); }};
}

Field flag(std::string path, bool& v, std::string doc) {
  std::string type = "true or false";
  return {path, type, std::move(doc),
          [&v, type](const YAML::Node& n) {
            auto b = to_bool(scalar(n, type));
            if (!b) expected(type, n);
            v = *b;
          },
          [&v] { return plain(v ? "true" : "false"); }};
}

Field checkpointed_blocks(std::string path, models::ActivationCheckpointing& v, std::string doc) {
  using Kind = models::ActivationCheckpointing::Kind;
  std::string type = "true, false, auto or an integer >= 0";
  return {path, type, std::move(doc),
          [&v, type](const YAML::Node& n) {
            const std::string& word = scalar(n, type);
            if (const auto on = to_bool(word)) v = models::ActivationCheckpointing::every_block_if(*on);
            else if (word == "auto") v = {Kind::automatic, 0};
            else v = models::ActivationCheckpointing::first_blocks(parse_integer(n, type, 0, kMaxInt));
          },
          [&v] {
            switch (v.kind) {
              case Kind::none: return plain("false");
              case Kind::all: return plain("true");
              case Kind::first: return plain(std::to_string(v.blocks));
              case Kind::automatic: break;
            }
            return plain("auto");
          }};
}

Field text(std::string path, std::string& v, std::string doc) {
  std::string type = "a string";
  return {path, type, std::move(doc), [&v, type](const YAML::Node& n) { v = scalar(n, type); },
          [&v] { return plain(v); }};
}

Field text_or(std::string path, std::string& v, const char* word, std::string doc) {
  std::string type = std::string(word) + " or a non-empty string";
  return {path, type, std::move(doc),
          [&v, type, word](const YAML::Node& n) {
            if (is_null_word(n, word)) return v.clear();
            v = scalar(n, type);
            if (v.empty()) expected(type, n);
          },
          [&v, word] { return v.empty() ? null_or(word) : plain(v); }};
}

Field text_list(std::string path, std::vector<std::string>& v, std::string doc) {
  std::string type = "a list of strings";
  return {path, type, std::move(doc),
          [&v, type](const YAML::Node& n) {
            std::vector<std::string> out;
            for (const auto& item : sequence(n, type)) out.push_back(entry_scalar(item, out.size(), "a string"));
            v = out;
          },
          [&v] { return plain_list(v); }};
}

namespace {
std::string one_of(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}
}  // namespace

Field word_choice(std::string path, std::string& v, std::vector<std::string> words, std::string doc) {
  std::string type = "one of " + one_of(words);
  return {path, type, std::move(doc),
          [&v, words, type](const YAML::Node& n) {
            const std::string& word = scalar(n, type);
            if (std::find(words.begin(), words.end(), word) == words.end()) expected(type, n);
            v = word;
          },
          [&v] { return plain(v); }};
}

Field word_set(std::string path, std::vector<std::string>& v, std::vector<std::string> words, std::string doc) {
  std::string type = "a non-empty list of " + one_of(words) + ", none twice";
  return {path, type, std::move(doc),
          [&v, words, type](const YAML::Node& n) {
            std::vector<std::string> out;
            for (const auto& item : sequence(n, type)) {
              const std::string& word = entry_scalar(item, out.size(), "one of " + one_of(words));
              if (std::find(words.begin(), words.end(), word) == words.end())
                throw FieldError("'" + word + "' is not one of " + one_of(words), item.Mark());
              if (std::find(out.begin(), out.end(), word) != out.end())
                throw FieldError(word + " is listed twice", item.Mark());
              out.push_back(word);
            }
            if (out.empty()) expected(type, n);
            v = out;
          },
          [&v] { return plain_list(v); }};
}

Field maybe_word_set(std::string path, std::vector<std::string>& v, const char* word, std::vector<std::string> words,
                     std::string doc) {
  Field list = word_set(std::move(path), v, std::move(words), std::move(doc));
  list.type = std::string(word) + " or " + list.type;
  auto parse_list = list.parse;
  list.parse = [&v, word, parse_list](const YAML::Node& n) {
    if (is_null_word(n, word)) v.clear();
    else parse_list(n);
  };
  list.emit = [&v, word] { return v.empty() ? null_or(word) : plain_list(v); };
  return list;
}

Field maybe_integer_list(std::string path, std::vector<int64_t>& v, const char* word, int64_t lo, std::string doc) {
  return maybe_list(
      std::move(path), v, word, std::string(word) + " or a non-empty list of integers" + int_range(lo, kMaxInt),
      "an integer" + int_range(lo, kMaxInt), std::move(doc),
      [lo](const YAML::Node& item, const std::string& type) { return parse_integer(item, type, lo, kMaxInt); },
      [](int64_t x) { return std::to_string(x); });
}

Field integer_set(std::string path, std::vector<int64_t>& v, const char* word, int64_t lo, std::string doc) {
  const std::string list = "a non-empty list of integers" + int_range(lo, kMaxInt) + ", none twice";
  std::string type = word ? std::string(word) + " or " + list : list;
  return {path, type, std::move(doc),
          [&v, type, word, lo](const YAML::Node& n) {
            if (word && is_null_word(n, word)) return v.clear();
            std::vector<int64_t> out;
            for (const auto& item : sequence(n, type)) {
              entry_scalar(item, out.size(), "an integer" + int_range(lo, kMaxInt));
              const int64_t x = parse_integer(item, type, lo, kMaxInt);
              if (std::find(out.begin(), out.end(), x) != out.end())
                throw FieldError(std::to_string(x) + " is listed twice", item.Mark());
              out.push_back(x);
            }
            if (out.empty()) expected(type, n);
            v = out;
          },
          [&v, word] {
            if (v.empty() && word) return null_or(word);
            auto list = flow_list();
            for (auto x : v) list.push_back(plain(std::to_string(x)));
            return list;
          }};
}

Field real_list(std::string path, std::vector<double>& v, std::size_t size, Bound lo, Bound hi, std::string doc) {
  std::string type = "a list of " + std::to_string(size) + " numbers" + real_range(lo, hi);
  return {path, type, std::move(doc),
          [&v, type, size, lo, hi](const YAML::Node& n) {
            std::vector<double> out;
            for (const auto& item : sequence(n, type)) {
              entry_scalar(item, out.size(), "a number" + real_range(lo, hi));
              out.push_back(parse_real(item, type, lo, hi));
            }
            if (out.size() != size) expected(type, n);
            v = out;
          },
          [&v] {
            auto list = flow_list();
            for (auto x : v) list.push_back(plain(format_double(x)));
            return list;
          }};
}

Field maybe_real_list(std::string path, std::vector<double>& v, const char* word, Bound lo, Bound hi, std::string doc) {
  return maybe_list(
      std::move(path), v, word, std::string(word) + " or a non-empty list of numbers" + real_range(lo, hi),
      "a number" + real_range(lo, hi), std::move(doc),
      [lo, hi](const YAML::Node& item, const std::string& type) { return parse_real(item, type, lo, hi); },
      [](double x) { return format_double(x); });
}

std::string reference_rows(const std::vector<Field>& fields) {
  std::ostringstream out;
  for (const auto& f : fields) {
    YAML::Emitter value;
    value << f.emit();
    out << "| `" << f.path << "` | " << f.type << " | `" << value.c_str() << "` | " << f.doc
        << (f.has(KeyRole::grid) ? " `segtrain experiment` sets it for each of its runs." : "") << " |\n";
  }
  return out.str();
}

}  // namespace segtrain::trainer::schema
