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
#include "trainer/config/peft_init.h"
#include "trainer/config/field_reader.h"
#include "trainer/config/mixture_field.h"
#include "trainer/config/schema.h"
#include "trainer/config/setting.h"
#include "trainer/config/yaml_text.h"

namespace segtrain::trainer {
namespace {

using schema::Field;

// The run config's key table.
schema::FieldTable config_keys_of(Config& config) {
  schema::FieldTable keys(schema::fields(config));
  keys.note("experiment", "this is an experiment file; run it with `segtrain experiment FILE`");
  // Retired keys name what replaced them (a config of an older release says what to write).
  keys.note("eval.passkey_trials", "replaced by the evaluation tasks: list passkey in eval.tasks "
                                   "(eval.tasks: [perplexity, passkey]) and set eval.passkey.trials");
  keys.note("eval.passkey_style", "replaced by eval.passkey.style (with passkey in eval.tasks)");
  return keys;
}

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
  auto keys = config_keys_of(loaded.config);
  std::vector<std::string> errors;
  schema::FieldReader(source, errors, loaded.origins).read(root, "", keys, other_sections);
  settle_budget(loaded, loaded.origins.count("train.budget.tokens") > 0,
                loaded.origins.count("train.budget.compute_equivalent") > 0, source, errors);
  if (!errors.empty()) fail(errors);
  return loaded;
}

LoadedConfig parse_config_file(const std::string& file) {
  return parse_config_text(read_file(file, "config file"), file);
}

void apply_override(LoadedConfig& loaded, const std::string& assignment) {
  apply_setting(loaded, assignment, "--set " + assignment);
}

void apply_setting(LoadedConfig& loaded, const std::string& assignment, const std::string& where) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError(where + ": expected key=value, for example --set train.lr=1e-4");
  const std::string path = assignment.substr(0, eq);
  const std::string value_text = assignment.substr(eq + 1);
  auto keys = config_keys_of(loaded.config);
  Field* field = keys.field(path);
  if (!field) {
    if (keys.is_section(path))
      throw InputError(where + ": '" + path + "' is a section; set one of its keys: " +
                       join(keys.children(path), ", "));
    throw InputError(where + ": " + keys.unknown_key_message(path));
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
  auto errors = adopt_peft_adapter(loaded);
  for (auto& error : validate_config(loaded, /*check_paths=*/true, use)) errors.push_back(std::move(error));
  if (!errors.empty()) fail(errors);
  return loaded;
}

std::string to_yaml(const Config& config) {
  Config copy = config;  // fields() binds mutable references
  YAML::Node root(YAML::NodeType::Map);
  const auto& tasks = config.eval.tasks;
  for (const auto& f : schema::fields(copy)) {
    // The options of a task not in eval.tasks are not written: read back, they would be refused.
    if (const std::string task = task_of_key(f.path);
        !task.empty() && std::find(tasks.begin(), tasks.end(), task) == tasks.end())
      continue;
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
  data::DataSource source;
  data::SamplerConfig sampler;
  return "| key | type | default | meaning |\n|---|---|---|---|\n" + schema::reference_rows(schema::fields(config)) +
         schema::reference_rows(schema::source_fields("data.mixture[]", source, sampler));
}

}  // namespace segtrain::trainer
