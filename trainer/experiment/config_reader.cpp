// The `experiment:` section of an experiment file -> ExperimentConfig. Like the
// run config, every problem is collected with its file:line:col and reported at
// once; then every run of the grid is built and validated before anything runs.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "common/error.h"
#include "common/file_io.h"
#include "common/strings.h"
#include "trainer/experiment/experiment.h"
#include "trainer/experiment/plan.h"
#include "models/config_rules.h"
#include "models/model_io.h"
#include "trainer/config/model_ref.h"
#include "trainer/config/yaml_text.h"

namespace segtrain::trainer {
namespace {

namespace fs = std::filesystem;

// Reads one mapping's keys, each at most once, and complains about the rest.
class MapReader {
 public:
  MapReader(const YAML::Node& map, std::string path, const std::string& source, std::vector<std::string>& errors)
      : map_(map), path_(std::move(path)), source_(source), errors_(errors) {}

  std::optional<YAML::Node> get(const std::string& key) {
    known_.push_back(key);
    if (!map_.IsMap()) return std::nullopt;
    const YAML::Node value = map_[key];
    if (!value.IsDefined() || value.IsNull()) return std::nullopt;
    return value;
  }
  void fail(const YAML::Node& node, const std::string& key, const std::string& message) {
    errors_.push_back(location(source_, node.Mark()) + ": " + path_ + "." + key + ": " + message);
  }
  std::optional<std::string> string(const std::string& key) {
    auto node = get(key);
    if (!node) return std::nullopt;
    if (!node->IsScalar() || node->Scalar().empty()) {
      fail(*node, key, "expected a non-empty string");
      return std::nullopt;
    }
    return node->Scalar();
  }
  std::optional<int64_t> integer(const std::string& key, int64_t lo) {
    auto node = get(key);
    if (!node) return std::nullopt;
    int64_t value = 0;
    if (!node->IsScalar() || !YAML::convert<int64_t>::decode(*node, value) || value < lo) {
      fail(*node, key, "expected an integer >= " + std::to_string(lo));
      return std::nullopt;
    }
    return value;
  }
  std::optional<bool> boolean(const std::string& key) {
    auto node = get(key);
    if (!node) return std::nullopt;
    bool value = false;
    if (!node->IsScalar() || !YAML::convert<bool>::decode(*node, value)) {
      fail(*node, key, "expected true or false");
      return std::nullopt;
    }
    return value;
  }
  // A list of integers >= lo, each once.
  std::optional<std::vector<int64_t>> integers(const std::string& key, int64_t lo) {
    auto items = list(key);
    if (!items) return std::nullopt;
    std::vector<int64_t> out;
    for (const auto& item : *items) {
      int64_t v = 0;
      if (!item.IsScalar() || !YAML::convert<int64_t>::decode(item, v) || v < lo)
        errors_.push_back(location(source_, item.Mark()) + ": " + path_ + "." + key + ": expected integers >= " +
                          std::to_string(lo));
      else if (std::find(out.begin(), out.end(), v) != out.end())
        errors_.push_back(location(source_, item.Mark()) + ": " + path_ + "." + key + ": " + std::to_string(v) +
                          " is listed twice");
      else
        out.push_back(v);
    }
    return out;
  }
  std::optional<double> fraction(const std::string& key) {
    auto node = get(key);
    if (!node) return std::nullopt;
    double value = 0;
    if (!node->IsScalar() || !YAML::convert<double>::decode(*node, value) || !(value > 0 && value < 1)) {
      fail(*node, key, "expected a number in (0, 1)");
      return std::nullopt;
    }
    return value;
  }
  // Items of a list key, or nullopt (an error) when it is not a list.
  std::optional<std::vector<YAML::Node>> list(const std::string& key) {
    auto node = get(key);
    if (!node) return std::nullopt;
    if (!node->IsSequence() || node->size() == 0) {
      fail(*node, key, "expected a non-empty list");
      return std::nullopt;
    }
    return std::vector<YAML::Node>(node->begin(), node->end());
  }
  // Unknown keys are errors, with the known ones listed.
  void finish() {
    if (!map_.IsMap()) return;
    for (auto it = map_.begin(); it != map_.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : "?";
      if (std::find(known_.begin(), known_.end(), key) == known_.end())
        errors_.push_back(location(source_, it->first.Mark()) + ": unknown key '" + path_ + "." + key + "'; expected one of " +
                          join(known_, ", "));
    }
  }
  const std::string& source() const { return source_; }
  std::vector<std::string>& errors() { return errors_; }

 private:
  YAML::Node map_;
  std::string path_;
  const std::string& source_;
  std::vector<std::string>& errors_;
  std::vector<std::string> known_;
};

std::optional<YAML::Node> section(MapReader& parent, const std::string& key) {
  auto node = parent.get(key);
  if (node && !node->IsMap()) {
    parent.fail(*node, key, "expected a mapping");
    return std::nullopt;
  }
  return node;
}

// The `set:` mapping of `reader`'s section (`path`), as assignments. `budget_fixed`: the
// section belongs to trained rows, whose budget the grid sets.
std::vector<Assignment> read_assignments(MapReader& reader, const std::string& path, bool budget_fixed) {
  std::vector<Assignment> out;
  if (auto set = section(reader, "set")) {
    for (auto it = set->begin(); it != set->end(); ++it) {
      const std::string name = it->first.Scalar();
      const std::string where = location(reader.source(), it->first.Mark());
      if (is_grid_key(name)) {
        reader.errors().push_back(where + ": " + path + ".set." + name +
                                  ": the experiment sets this key for every run; it cannot be overridden here");
        continue;
      }
      if (budget_fixed && name == "train.budget.tokens") {
        reader.errors().push_back(where + ": " + path + ".set." + name +
                                  ": every trained row has the same budget so that rows compare: the "
                                  "compute-equivalent one (seed 004, eq. 2), or experiment.train_tokens; a "
                                  "method's other budgets are its `budgets:` list");
        continue;
      }
      YAML::Emitter value;
      value << YAML::Flow << it->second;
      out.push_back({name + "=" + value.c_str(), where});
    }
  }
  return out;
}

std::vector<Assignment> read_set(MapReader& parent, const std::string& key, const std::string& path) {
  auto map = section(parent, key);
  if (!map) return {};
  MapReader reader(*map, path, parent.source(), parent.errors());
  auto out = read_assignments(reader, path, key == "extend");
  reader.finish();
  return out;
}

// experiment.methods: names, or {name, budgets, set} for a method with settings of its
// own or more budgets (each budget adds the row <name>@<tokens>: the budget curve).
void read_methods(MapReader& r, ExperimentConfig& x) {
  const std::string& file = x.file;
  std::vector<std::pair<YAML::Node, YAML::Mark>> items;
  std::vector<std::string> defaults = {"da",         "full",        "chunk-0.125", "chunk-0.25",
                                       "chunk-0.5",  "prefix-0.25", "prefix-0.5",  "randompos"};
  if (auto methods = r.list("methods"))
    for (const auto& item : *methods) items.emplace_back(item, item.Mark());
  else
    for (const auto& name : defaults) items.emplace_back(YAML::Node(name), YAML::Mark::null_mark());
  auto add = [&](const TrainedMethod& m, const YAML::Mark& mark) {
    if (std::any_of(x.methods.begin(), x.methods.end(), [&](const auto& o) { return o.name == m.name; }))
      r.errors().push_back(location(file, mark) + ": experiment.methods: '" + m.name + "' is listed twice");
    else
      x.methods.push_back(m);
  };
  std::vector<std::pair<TrainedMethod, YAML::Mark>> curve;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& [item, mark] = items[i];
    const std::string path = "experiment.methods[" + std::to_string(i) + "]";
    std::string name = item.IsScalar() ? item.Scalar() : "?";
    std::vector<Assignment> set;
    std::vector<int64_t> budgets;
    if (item.IsMap()) {
      MapReader m(item, path, file, r.errors());
      name = m.string("name").value_or("");
      if (name.empty()) r.errors().push_back(location(file, mark) + ": " + path + ".name: required (a method name)");
      budgets = m.integers("budgets", 1).value_or(std::vector<int64_t>{});
      set = read_assignments(m, path, /*budget_fixed=*/true);
      m.finish();
      if (name.empty()) continue;
    }
    auto method = parse_trained_method(name);
    if (!method) {
      r.errors().push_back(location(file, mark) + ": experiment.methods: unknown method '" + name +
                           "'; expected da, truncate, full, randompos, pose, chunk-<alpha>, chunk-ring-<alpha> or "
                           "prefix-<alpha> (or {name: <method>, budgets: [tokens...], set: {key: value}})");
      continue;
    }
    method->set = set;
    add(*method, mark);
    for (int64_t tokens : budgets) {
      if (tokens == x.train_tokens) {
        r.errors().push_back(location(file, mark) + ": " + path + ".budgets: " + std::to_string(tokens) +
                             " is experiment.train_tokens, the budget every method already trains on");
        continue;
      }
      TrainedMethod point = *method;
      point.name += "@" + std::to_string(tokens);
      point.budget = tokens;
      curve.emplace_back(point, mark);
    }
  }
  // The budget curve runs after every row the text compares at the experiment's budget.
  for (const auto& [point, mark] : curve) add(point, mark);
}

void read_corpus(const YAML::Node& node, size_t index, MapReader& parent, ExperimentConfig& x) {
  const std::string path = "experiment.corpora[" + std::to_string(index) + "]";
  CorpusSpec corpus;
  corpus.origin = location(parent.source(), node.Mark());
  if (!node.IsMap()) {
    parent.errors().push_back(corpus.origin + ": " + path +
                              ": expected a mapping with name and one of synthetic, inputs or store");
    return;
  }
  MapReader r(node, path, parent.source(), parent.errors());
  corpus.name = r.string("name").value_or("");
  if (corpus.name.empty())
    r.errors().push_back(corpus.origin + ": " + path + ".name: required (names the corpus's folder and table)");
  else if (corpus.name.find_first_of("/\\ ") != std::string::npos || corpus.name[0] == '.')
    r.errors().push_back(corpus.origin + ": " + path + ".name: '" + corpus.name +
                         "' must be a plain folder name (no slashes, spaces or leading dot)");
  int sources = 0;
  if (auto synth = section(r, "synthetic")) {
    ++sources;
    MapReader s(*synth, path + ".synthetic", parent.source(), parent.errors());
    data::SynthOptions o;
    o.documents = s.integer("docs", 10).value_or(o.documents);
    o.min_words = s.integer("min_tokens", 16).value_or(o.min_words);
    o.max_words = s.integer("max_tokens", 16).value_or(o.max_words);
    o.seed = static_cast<uint64_t>(s.integer("seed", 0).value_or(static_cast<int64_t>(o.seed)));
    if (o.max_words < o.min_words)
      parent.errors().push_back(location(parent.source(), synth->Mark()) + ": " + path +
                                ".synthetic: max_tokens is below min_tokens");
    s.finish();
    corpus.synthetic = o;
  }
  if (auto inputs = r.list("inputs")) {
    ++sources;
    for (const auto& item : *inputs) {
      if (!item.IsScalar()) {
        r.errors().push_back(location(parent.source(), item.Mark()) + ": " + path + ".inputs: expected file or folder paths");
        continue;
      }
      if (!fs::exists(item.Scalar()))
        r.errors().push_back(location(parent.source(), item.Mark()) + ": " + path + ".inputs: '" + item.Scalar() +
                             "' does not exist" +
                             (item.Scalar().find("linux-doc") != std::string::npos
                                  ? " (scripts/setup.sh installs linux-doc-6.1 from scripts/apt-packages.txt)"
                                  : ""));
      corpus.inputs.push_back(item.Scalar());
    }
  }
  if (auto store = r.string("store")) {
    ++sources;
    corpus.store = *store;
    if (!fs::exists(fs::path(*store) / "meta.json"))
      r.errors().push_back(corpus.origin + ": " + path + ".store: '" + *store +
                           "' is not a token store (no meta.json); create it with `segtrain prepare`");
  }
  if (sources != 1)
    r.errors().push_back(corpus.origin + ": " + path + ": give exactly one of synthetic, inputs or store (got " +
                         std::to_string(sources) + ")");
  corpus.vocab_size = r.integer("vocab_size", 16).value_or(corpus.vocab_size);
  corpus.valid_fraction = r.fraction("valid_fraction").value_or(corpus.valid_fraction);
  if (auto base = r.string("base")) {
    corpus.base = *base;
    const auto ref = parse_model_ref(*base);
    const std::string dir = ref ? ref->dir : "";
    if (!ref || !ref->from_folder())
      r.errors().push_back(corpus.origin + ": " + path + ".base: expected hf:DIR or checkpoint:DIR, got '" + *base + "'");
    else if (!fs::is_directory(dir))
      r.errors().push_back(corpus.origin + ": " + path + ".base: '" + dir + "' does not exist or is not a directory");
    else if (!corpus.store.empty() || ref->kind != ModelRef::Kind::hf)
      ;  // a ready store (checked against the base's vocabulary when evaluated), or a checkpoint's (below)
    else if (!fs::exists(fs::path(dir) / "tokenizer.json") && !fs::exists(fs::path(dir) / "tokenizer.model"))
      r.errors().push_back(corpus.origin + ": " + path + ".base: '" + dir +
                           "' has neither tokenizer.json nor tokenizer.model to tokenize the corpus's text with; "
                           "give a store made in its vocabulary (corpora[].store)");
    if (ref && ref->kind == ModelRef::Kind::checkpoint && corpus.store.empty())
      r.errors().push_back(corpus.origin + ": " + path +
                           ".base: a checkpoint base needs the corpus as a store tokenized with its vocabulary "
                           "(corpora[].store), not text to train a new tokenizer on");
  }
  r.finish();
  for (const auto& other : x.corpora)
    if (other.name == corpus.name && !corpus.name.empty())
      r.errors().push_back(corpus.origin + ": " + path + ".name: '" + corpus.name + "' is used by another corpus");
  x.corpora.push_back(std::move(corpus));
}

void read_factors(MapReader& r, const YAML::Node& node, ExperimentConfig& x, std::vector<std::string>& errors) {
  const int64_t lt = x.base_template.config.data.train_length;  // >= 1 (schema)
  if (auto factors = r.list("factors")) {
    x.factors.clear();
    for (const auto& item : *factors) {
      int64_t f = 0;
      if (!item.IsScalar() || !YAML::convert<int64_t>::decode(item, f) || f < 2)
        errors.push_back(location(x.file, item.Mark()) + ": experiment.factors: expected integers >= 2 (L_e = factor * L_t)");
      else if (std::find(x.factors.begin(), x.factors.end(), f) != x.factors.end())
        errors.push_back(location(x.file, item.Mark()) + ": experiment.factors: " + std::to_string(f) + " is listed twice");
      else
        x.factors.push_back(f);
    }
  }
  // L_e = factor * L_t must be a 64-bit integer (the grid computes it; UBSan, fuzz_experiment).
  for (const int64_t f : x.factors)
    if (f > std::numeric_limits<int64_t>::max() / lt)
      errors.push_back(location(x.file, node.Mark()) + ": experiment.factors: " + std::to_string(f) +
                       " * data.train_length " + std::to_string(lt) + " does not fit in a 64-bit L_e");
}

// experiment.ootb and experiment.train_extension; returns where ootb was given.
std::optional<YAML::Mark> read_extensions(MapReader& r, ExperimentConfig& x, std::vector<std::string>& errors) {
  auto extension_name = [&](const YAML::Node& item, const std::string& key) -> std::optional<models::ExtensionMethod> {
    auto method = item.IsScalar() ? enum_from_name(models::kExtensionMethods, item.Scalar()) : std::nullopt;
    if (!method) {
      std::vector<std::string> names;
      for (const auto& e : models::kExtensionMethods) names.emplace_back(e.first);
      errors.push_back(location(x.file, item.Mark()) + ": experiment." + key + ": expected one of " + join(names, ", ") +
                       (item.IsScalar() ? ", got '" + item.Scalar() + "'" : ""));
    }
    return method;
  };
  std::optional<YAML::Mark> ootb_mark;
  if (auto ootb = r.list("ootb")) {
    ootb_mark = ootb->front().Mark();
    for (const auto& item : *ootb)
      if (auto m = extension_name(item, "ootb")) x.ootb.push_back(*m);
  }
  if (auto te = r.get("train_extension"); te && !(te->IsScalar() && te->Scalar() == "auto"))
    x.train_extension = extension_name(*te, "train_extension");
  return ootb_mark;
}

void read_eval_lengths(MapReader& r, ExperimentConfig& x, std::vector<std::string>& errors) {
  const int64_t lt = x.base_template.config.data.train_length;
  x.eval_lengths = r.integers("eval_lengths", 2).value_or(std::vector<int64_t>{});
  std::sort(x.eval_lengths.begin(), x.eval_lengths.end());
  x.eval_from_longest = r.boolean("eval_from_longest").value_or(false);
  if (x.eval_from_longest && x.base_template.config.eval.stride > 0)
    errors.push_back(location(x.file, r.get("eval_from_longest")->Mark()) +
                     ": experiment.eval_from_longest: needs non-overlapping windows, but eval.stride is " +
                     std::to_string(x.base_template.config.eval.stride));
  if (x.eval_lengths.empty()) return;
  // A row keeps the loss by position of its longest length, which the plots and the
  // ring section read as L_e's: with lengths of its own, a grid has one factor and no
  // length past its L_e.
  if (x.factors.size() != 1 || x.eval_lengths.back() > x.factors.front() * lt)
    errors.push_back(location(x.file, r.get("eval_lengths")->Mark()) +
                     ": experiment.eval_lengths: give them with one factor and none longer than its L_e (the "
                     "loss-by-position plots are drawn at L_e)");
  // The tables compare rows at L_t and at each L_e: both must be among the lengths.
  std::vector<int64_t> needed = {lt};
  for (int64_t f : x.factors)
    if (f <= std::numeric_limits<int64_t>::max() / lt) needed.push_back(f * lt);
  for (int64_t length : needed)
    if (std::find(x.eval_lengths.begin(), x.eval_lengths.end(), length) == x.eval_lengths.end())
      errors.push_back(location(x.file, r.get("eval_lengths")->Mark()) + ": experiment.eval_lengths: " +
                       std::to_string(length) + " is missing; the lengths must include L_t = " + std::to_string(lt) +
                       " and every L_e = factor * L_t");
}

void read_passkey(MapReader& r, ExperimentConfig& x, std::vector<std::string>& errors) {
  auto passkey = section(r, "passkey");
  if (!passkey) return;
  MapReader p(*passkey, "experiment.passkey", x.file, errors);
  x.passkey.lengths = p.integers("lengths", 2).value_or(std::vector<int64_t>{});
  std::sort(x.passkey.lengths.begin(), x.passkey.lengths.end());
  x.passkey.trials = p.integer("trials", 1).value_or(x.passkey.trials);
  if (auto style = p.string("style")) {
    if (auto s = enum_from_name(kPasskeyStyles, *style))
      x.passkey.style = *s;
    else
      p.fail(*p.get("style"), "style", "expected digits or recall, got '" + *style + "'");
  }
  if (x.passkey.lengths.empty() && !passkey->operator[]("lengths").IsDefined())
    errors.push_back(location(x.file, passkey->Mark()) + ": experiment.passkey.lengths: required (the prompt lengths)");
  p.finish();
}

// Which rows fit depends on each corpus's base architecture: truncate needs an
// extension to train with, and the OOTB methods must apply to the base.
void check_rows_fit_bases(const ExperimentConfig& x, const std::optional<YAML::Mark>& ootb_mark,
                          std::vector<std::string>& errors) {
  for (const auto& corpus : x.corpora) {
    if (!corpus.base.empty() && !fs::is_directory(model_ref_dir(corpus.base))) continue;  // reported above
    const models::Arch arch = base_arch(x, corpus);
    // truncate is DA with the rows' extension: with none, it would train DA's run again.
    if (std::any_of(x.methods.begin(), x.methods.end(), [](const auto& m) { return m.name == "truncate"; }) &&
        x.train_extension.value_or(default_train_extension(arch)) == models::ExtensionMethod::none)
      errors.push_back(x.file + ": experiment.methods: truncate trains with the rows' extension, which is none for " +
                       "corpus '" + corpus.name + "' (experiment.train_extension): that is the da row; use da, or set " +
                       "experiment.train_extension");
    const auto applicable = ootb_methods_for(arch);
    for (auto m : x.ootb)
      if (std::find(applicable.begin(), applicable.end(), m) == applicable.end()) {
        std::vector<std::string> names;
        for (auto a : applicable) names.emplace_back(enum_name(models::kExtensionMethods, a));
        errors.push_back((ootb_mark ? location(x.file, *ootb_mark) : x.file) + ": experiment.ootb: " +
                         enum_name(models::kExtensionMethods, m) + " does not apply out of the box to the " +
                         enum_name(models::kArchs, arch) + " base of corpus '" + corpus.name + "'; choose from " +
                         join(names, ", "));
      }
  }
}

void read_experiment_section(const YAML::Node& node, ExperimentConfig& x, std::vector<std::string>& errors) {
  MapReader r(node, "experiment", x.file, errors);
  x.name = r.string("name").value_or(fs::path(x.file).stem().string());
  x.output_dir = r.string("output_dir").value_or("runs/experiments/" + x.name);
  read_factors(r, node, x, errors);
  x.train_tokens = r.integer("train_tokens", 1);  // before the methods: their budgets are checked against it
  read_methods(r, x);
  const auto ootb_mark = read_extensions(r, x, errors);
  read_eval_lengths(r, x, errors);
  read_passkey(r, x, errors);
  if (auto corpora = r.list("corpora")) {
    for (size_t i = 0; i < corpora->size(); ++i) read_corpus((*corpora)[i], i, r, x);
  } else if (!r.get("corpora")) {
    errors.push_back(location(x.file, node.Mark()) +
                     ": experiment.corpora: required: a list of corpora, e.g. [{name: synthetic, synthetic: {docs: 200}}]");
  }
  x.base_set = read_set(r, "base", "experiment.base");
  x.extend_set = read_set(r, "extend", "experiment.extend");
  r.finish();
  check_rows_fit_bases(x, ootb_mark, errors);
}

}  // namespace

std::optional<TrainedMethod> parse_trained_method(const std::string& name) {
  TrainedMethod m;
  m.name = name;
  if (name == "da") {
    m.domain_adaptation = true;
    return m;
  }
  // Truncate training with the rows' extension (the domain-adaptation row of a base
  // extended with a scaling); `da` trains on the base's own positions instead.
  if (name == "truncate") return m.sampler = data::SamplerMethod::truncate, m;
  if (name == "full") return m.sampler = data::SamplerMethod::full, m;
  if (name == "randompos") return m.sampler = data::SamplerMethod::randompos, m;
  if (name == "pose") return m.sampler = data::SamplerMethod::pose, m;
  if (name.rfind("chunk-ring-", 0) == 0) {  // chunk with data.sampler.placement ring
    auto m = parse_trained_method("chunk-" + name.substr(11));
    if (!m) return std::nullopt;
    m->name = name;
    m->placement = data::ChunkPlacement::ring;
    return m;
  }
  for (auto [prefix, sampler] : {std::pair{"chunk-", data::SamplerMethod::chunk}, {"prefix-", data::SamplerMethod::prefix}}) {
    const std::string p = prefix;
    if (name.rfind(p, 0) != 0) continue;
    const std::string number = name.substr(p.size());
    try {
      size_t used = 0;
      const double alpha = std::stod(number, &used);
      // Its range and its fit with L_t and L_e: data/sampler_rules.h, through validate_config on each run.
      if (used != number.size() || !std::isfinite(alpha)) return std::nullopt;
      m.sampler = sampler;
      m.alpha = alpha;
      return m;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

std::vector<models::ExtensionMethod> ootb_methods_for(models::Arch arch) {
  using E = models::ExtensionMethod;
  const auto scheme = models::position_scheme(arch);
  std::vector<E> out;
  for (const auto& [name, m] : models::kExtensionMethods) {
    if (!models::method_fits(m, scheme)) continue;
    // LongRoPE's per-frequency factors come with a base that has them, not from a factor.
    if (m == E::longrope) continue;
    // A learned table has no rows past L_t unless it is interpolated.
    if (m == E::none && scheme == models::PositionScheme::learned) continue;
    out.push_back(m);
  }
  return out;
}

models::ExtensionMethod default_train_extension(models::Arch arch) {
  return models::position_scheme(arch) == models::PositionScheme::learned ? models::ExtensionMethod::interpolate
                                                                          : models::ExtensionMethod::none;
}

ExperimentConfig load_experiment(const std::string& file, const std::vector<std::string>& overrides) {
  const std::string text = read_file(file, "experiment file");
  ExperimentConfig x;
  x.file = file;
  x.base_template = parse_config_text(text, file, {"experiment"});
  for (const auto& assignment : overrides) {
    if (assignment.rfind("experiment.", 0) == 0)
      throw InputError("--set " + assignment + ": experiment.* keys are read from the file only; edit " + file);
    apply_override(x.base_template, assignment);
  }
  const YAML::Node root = YAML::Load(text);  // parse_config_text has checked the syntax
  std::vector<std::string> errors;
  if (!root["experiment"] || !root["experiment"].IsMap())
    throw InputError(file + ": an experiment file needs an `experiment:` section (name, factors, methods, corpora...) "
                     "beside the run sections; see configs/experiments/");
  read_experiment_section(root["experiment"], x, errors);
  if (!errors.empty()) throw InputError(join(errors, "\n"));

  // Build every run of the grid now, so a bad combination fails in the first
  // second rather than after an hour of training. A problem of the template
  // shows up in many runs: report it once, naming them.
  std::vector<std::pair<std::string, std::vector<std::string>>> problems;
  for (const auto& corpus : x.corpora)
    for (const auto& run : plan_training_runs(x, corpus))
      for (const auto& p : validate_config(run.config, /*check_paths=*/false)) {
        auto it = std::find_if(problems.begin(), problems.end(), [&](const auto& e) { return e.first == p; });
        if (it == problems.end()) it = problems.insert(problems.end(), {p, {}});
        it->second.push_back(corpus.name + "/" + run.label);
      }
  for (const auto& [problem, runs] : problems) errors.push_back(problem + " (in run " + join(runs, ", ") + ")");
  if (!errors.empty()) throw InputError(join(errors, "\n"));
  return x;
}

}  // namespace segtrain::trainer
