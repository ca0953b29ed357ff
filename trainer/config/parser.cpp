// YAML text -> Config. Every problem is collected with its location, so one run
// of `segtrain config check` reports all of them.
#include <algorithm>
#include <optional>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/file_io.h"
#include "common/strings.h"
#include "trainer/config/config.h"
#include "trainer/config/model_ref.h"
#include "trainer/config/schema.h"
#include "trainer/config/yaml_text.h"

namespace segtrain::trainer {
namespace {

using schema::Field;

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string leaf(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// The key table of a Config, with the sections (prefixes) it implies.
class Keys {
 public:
  explicit Keys(Config& config) : fields_(schema::fields(config)) {
    for (auto& f : fields_) {
      for (auto dot = f.path.find('.'); dot != std::string::npos; dot = f.path.find('.', dot + 1))
        sections_.insert(f.path.substr(0, dot));
    }
  }
  Field* field(const std::string& path) {
    for (auto& f : fields_)
      if (f.path == path) return &f;
    return nullptr;
  }
  bool is_section(const std::string& path) const { return sections_.count(path) > 0; }
  std::vector<std::string> children(const std::string& section) const {
    std::vector<std::string> out;
    for (const auto& f : fields_)
      if (f.path.rfind(section + ".", 0) == 0) out.push_back(f.path);
    return out;
  }

  // The closest valid key: a near spelling of the whole path, or the same leaf
  // name in another section ("model.lr" -> "train.lr").
  std::string suggest(const std::string& unknown) const {
    std::string best;
    std::size_t best_distance = std::string::npos;
    auto consider = [&](const std::string& candidate, std::size_t distance) {
      if (distance < best_distance) best = candidate, best_distance = distance;
    };
    for (const auto& f : fields_) {
      consider(f.path, edit_distance(unknown, f.path));
      if (leaf(f.path) == leaf(unknown)) consider(f.path, 1);
      else consider(f.path, edit_distance(leaf(unknown), leaf(f.path)) + 1);
    }
    for (const auto& s : sections_) consider(s, edit_distance(unknown, s));
    const std::size_t limit = std::max<std::size_t>(2, leaf(unknown).size() / 3 + 1);
    return best_distance <= limit ? best : "";
  }

 private:
  std::vector<Field> fields_;
  std::set<std::string> sections_;
};

// The 1-based number of the first line whose indentation holds a tab.
std::optional<int> first_tab_indented_line(const std::string& text) {
  int line = 1;
  bool indenting = true;
  for (char ch : text) {
    if (ch == '\n') {
      ++line;
      indenting = true;
    } else if (indenting && ch == '\t') {
      return line;
    } else if (ch != ' ') {
      indenting = false;
    }
  }
  return std::nullopt;
}

std::string unknown_key_message(const Keys& keys, const std::string& path) {
  std::string message = "unknown key '" + path + "'";
  if (path == "experiment") return message + ": this is an experiment file; run it with `segtrain experiment FILE`";
  auto suggestion = keys.suggest(path);
  if (!suggestion.empty()) message += "; did you mean '" + suggestion + "'?";
  return message;
}

struct Walker {
  Keys& keys;
  LoadedConfig& loaded;
  const std::string& source;
  std::vector<std::string>& errors;
  const std::vector<std::string>& other_sections;  // top-level keys another reader owns

  void walk(const YAML::Node& map, const std::string& prefix) {
    std::set<std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      // Copies: yaml-cpp's operator-> returns a temporary proxy, so a reference
      // to it->first would dangle after this statement (ASan: stack-use-after-scope).
      const YAML::Node key = it->first;
      const YAML::Node value = it->second;
      const std::string where = location(source, key.Mark());
      if (!key.IsScalar()) {
        errors.push_back(where + ": keys must be plain names" + (prefix.empty() ? "" : " in '" + prefix + "'"));
        continue;
      }
      const std::string path = prefix.empty() ? key.Scalar() : prefix + "." + key.Scalar();
      if (prefix.empty() && std::find(other_sections.begin(), other_sections.end(), path) != other_sections.end())
        continue;
      if (!seen.insert(key.Scalar()).second) {
        errors.push_back(where + ": duplicate key '" + path + "'");
        continue;
      }
      if (Field* field = keys.field(path)) {
        try {
          field->parse(value);
          loaded.origins[path] = where;
        } catch (const schema::FieldError& e) {
          // Point at the offending value when it has a place of its own.
          const std::string value_at = value.Mark().is_null() || value.IsNull() ? where : location(source, value.Mark());
          errors.push_back(value_at + ": " + path + ": " + e.what());
        }
      } else if (keys.is_section(path)) {
        if (value.IsMap()) walk(value, path);
        else if (!value.IsNull())
          errors.push_back(where + ": " + path + ": expected a mapping with keys " +
                           join(keys.children(path), ", ") + "; got " +
                           (value.IsSequence() ? "a list" : "'" + value.Scalar() + "'"));
      } else {
        errors.push_back(where + ": " + unknown_key_message(keys, path));
      }
    }
  }
};

// A token budget and compute_equivalent are alternatives: giving tokens selects
// the token budget unless the same source also asks for compute_equivalent.
void settle_budget(LoadedConfig& loaded, bool tokens_given, bool equivalent_given, const std::string& where,
                   std::vector<std::string>& errors) {
  auto& budget = loaded.config.train.budget;
  if (tokens_given && budget.tokens) {
    if (equivalent_given && budget.compute_equivalent)
      errors.push_back(where + ": train.budget: give either tokens or compute_equivalent: true, not both");
    else
      budget.compute_equivalent = false;
  } else if (equivalent_given && budget.compute_equivalent) {
    budget.tokens.reset();
  }
}

[[noreturn]] void fail(const std::vector<std::string>& errors) {
  throw InputError(join(errors, "\n"));
}

}  // namespace

LoadedConfig parse_config_text(const std::string& text, const std::string& source,
                               const std::vector<std::string>& other_sections) {
  LoadedConfig loaded;
  loaded.source = source;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    // yaml-cpp's words for a tab in the indentation ("illegal map value") do not say so.
    if (const auto tab_line = first_tab_indented_line(text); tab_line && *tab_line <= e.mark.line + 1)
      throw InputError(source + ":" + std::to_string(*tab_line) +
                       ": indented with a tab; YAML indentation takes spaces only");
    throw InputError(location(source, e.mark) + ": YAML syntax error: " + e.msg);
  }
  if (root.IsNull()) throw InputError(source + ": the config is empty; it needs at least data.store");
  if (!root.IsMap())
    throw InputError(location(source, root.Mark()) + ": expected a mapping of sections (run, model, data, train, "
                     "eval, distributed) at the top level");
  Keys keys(loaded.config);
  std::vector<std::string> errors;
  Walker{keys, loaded, source, errors, other_sections}.walk(root, "");
  settle_budget(loaded, loaded.origins.count("train.budget.tokens") > 0,
                loaded.origins.count("train.budget.compute_equivalent") > 0, source, errors);
  if (!errors.empty()) fail(errors);
  return loaded;
}

LoadedConfig parse_config_file(const std::string& file) {
  return parse_config_text(read_file(file, "config file"), file);
}

void apply_override(LoadedConfig& loaded, const std::string& assignment) {
  const std::string where = "--set " + assignment;
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError(where + ": expected key=value, for example --set train.lr=1e-4");
  const std::string path = assignment.substr(0, eq);
  const std::string value_text = assignment.substr(eq + 1);
  Keys keys(loaded.config);
  Field* field = keys.field(path);
  if (!field) {
    if (keys.is_section(path))
      throw InputError(where + ": '" + path + "' is a section; set one of its keys: " +
                       join(keys.children(path), ", "));
    throw InputError(where + ": " + unknown_key_message(keys, path));
  }
  YAML::Node value;
  try {
    value = YAML::Load(value_text);
  } catch (const YAML::ParserException& e) {
    throw InputError(where + ": the value is not valid YAML: " + e.msg);
  }
  try {
    field->parse(value);
  } catch (const schema::FieldError& e) {
    throw InputError(where + ": " + path + ": " + e.what());
  }
  loaded.origins[path] = where;
  std::vector<std::string> errors;
  settle_budget(loaded, path == "train.budget.tokens", path == "train.budget.compute_equivalent", where, errors);
  if (!errors.empty()) fail(errors);
}

std::vector<int64_t> eval_lengths_for(const data::DataConfig& data) {
  std::vector<int64_t> lengths;
  // Doubling stops at L_e / 2, so it never overflows (L_e near 2^63 once did: UBSan, fuzz_config).
  for (int64_t length = data.train_length; length < data.extended_length; length *= 2) {
    lengths.push_back(length);
    if (length > data.extended_length / 2) break;
  }
  lengths.push_back(data.extended_length);
  return lengths;
}

LoadedConfig load_config(const std::string& file, const std::vector<std::string>& overrides, ConfigUse use) {
  LoadedConfig loaded = parse_config_file(file);
  for (const auto& assignment : overrides) apply_override(loaded, assignment);
  if (loaded.config.eval.lengths.empty()) loaded.config.eval.lengths = eval_lengths_for(loaded.config.data);
  // A base folder's own architecture, unless the config names one (which must then match it).
  if (!loaded.origins.count("model.arch"))
    if (const auto arch = model_ref_arch(loaded.config.model.init)) loaded.config.model.spec.arch = *arch;
  auto errors = validate_config(loaded, /*check_paths=*/true, use);
  if (!errors.empty()) fail(errors);
  return loaded;
}

std::string to_yaml(const Config& config) {
  Config copy = config;  // fields() binds mutable references
  YAML::Node root(YAML::NodeType::Map);
  for (const auto& f : schema::fields(copy)) {
    // Walk down by section names, creating maps in schema order.
    std::vector<YAML::Node> path{root};
    std::string rest = f.path;
    for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
      path.push_back(path.back()[rest.substr(0, dot)]);
      rest = rest.substr(dot + 1);
    }
    path.back()[rest] = f.emit();
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

std::vector<std::string> config_keys() {
  Config config;
  std::vector<std::string> keys;
  for (const auto& f : schema::fields(config)) keys.push_back(f.path);
  return keys;
}

std::vector<std::string> keys_with(KeyRole role) {
  Config config;
  std::vector<std::string> keys;
  for (const auto& f : schema::fields(config))
    if (f.has(role)) keys.push_back(f.path);
  return keys;
}

bool key_has(const std::string& key, KeyRole role) {
  const auto keys = keys_with(role);
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::string key_text(const Config& config, const std::string& key) {
  Config copy = config;  // fields() binds mutable references
  for (const auto& f : schema::fields(copy))
    if (f.path == key) {
      YAML::Emitter out;
      out << f.emit();
      return out.c_str();
    }
  throw std::logic_error("key_text: no config key " + key);
}

std::string reference_markdown() {
  Config config;
  std::ostringstream out;
  out << "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& f : schema::fields(config)) {
    YAML::Emitter value;
    value << f.emit();
    out << "| `" << f.path << "` | " << f.type << " | `" << value.c_str() << "` | " << f.doc
        << (f.has(KeyRole::grid) ? " `segtrain experiment` sets it for each of its runs." : "") << " |\n";
  }
  return out.str();
}

}  // namespace segtrain::trainer
