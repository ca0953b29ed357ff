// The `experiment:` section of an experiment file -> ExperimentConfig: read through
// its key table (schema.cpp) by the run config's reader, so every problem is
// collected with its file:line:col and reported at once; then the rules of several
// keys, and every run of the grid is built and validated before anything runs.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "common/error.h"
#include "common/file_io.h"
#include "common/strings.h"
#include "data/sampler_kind.h"
#include "models/modules/model_io.h"
#include "models/spec/config_rules.h"
#include "trainer/config/eval_tasks.h"
#include "trainer/config/model_ref.h"
#include "trainer/config/yaml_text.h"
#include "trainer/experiment/experiment.h"
#include "trainer/experiment/plan.h"
#include "trainer/experiment/schema.h"

namespace segtrain::trainer {
namespace {

namespace fs = std::filesystem;

// experiment.methods -> rows: each name a method, each budget of an item the row
// <name>@<tokens> (the budget curve), which runs after every row the text compares.
void resolve_methods(const std::vector<MethodItem>& items, schema::FieldReader& reader, ExperimentConfig& x) {
  auto add = [&](const TrainedMethod& m, const std::string& origin) {
    if (std::any_of(x.methods.begin(), x.methods.end(), [&](const auto& o) { return o.name == m.name; }))
      reader.errors().push_back(origin + ": experiment.methods: '" + m.name + "' is listed twice");
    else
      x.methods.push_back(m);
  };
  std::vector<std::pair<TrainedMethod, std::string>> curve;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& item = items[i];
    if (item.name.empty()) continue;  // reported by the reader
    const std::string origin = item.origin.empty() ? x.file : item.origin;
    auto method = parse_trained_method(item.name);
    if (!method) {
      reader.errors().push_back(origin + ": experiment.methods: unknown method '" + item.name +
                                "'; expected da, truncate, full, randompos, pose, chunk-<alpha>, chunk-ring-<alpha> or "
                                "prefix-<alpha> (or {name: <method>, budgets: [tokens...], set: {key: value}})");
      continue;
    }
    method->set = item.set;
    add(*method, origin);
    for (int64_t tokens : item.budgets) {
      if (tokens == x.train_tokens) {
        reader.errors().push_back(origin + ": experiment.methods[" + std::to_string(i) + "].budgets: " +
                                  std::to_string(tokens) +
                                  " is experiment.train_tokens, the budget every method already trains on");
        continue;
      }
      TrainedMethod point = *method;
      point.name += "@" + std::to_string(tokens);
      point.budget = tokens;
      curve.emplace_back(point, origin);
    }
  }
  for (const auto& [point, origin] : curve) add(point, origin);
}

// experiment.variants -> rows after every method's: each row it names trained again with its
// settings after the row's own, as <row>+<name>, which the report compares with the row.
void resolve_variants(const std::vector<VariantItem>& items, schema::FieldReader& reader, ExperimentConfig& x) {
  const size_t method_rows = x.methods.size();
  for (size_t i = 0; i < items.size(); ++i) {
    const VariantItem& item = items[i];
    const std::string path = "experiment.variants[" + std::to_string(i) + "]";
    if (item.name.empty()) continue;  // reported by the reader
    if (item.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") !=
        std::string::npos) {
      reader.errors().push_back(reader.where(path + ".name") + ": " + path + ".name: '" + item.name +
                                "' must be letters, digits, - and _ (it names the rows <row>+" + item.name +
                                " and their folders)");
      continue;
    }
    for (size_t j = 0; j < i; ++j)
      if (items[j].name == item.name)
        reader.errors().push_back(reader.where(path + ".name") + ": " + path + ".name: '" + item.name +
                                  "' is used by experiment.variants[" + std::to_string(j) + "]");
    for (const auto& of : item.of) {
      const auto row = std::find_if(x.methods.begin(), x.methods.begin() + static_cast<std::ptrdiff_t>(method_rows),
                                     [&](const TrainedMethod& m) { return m.name == of; });
      if (row == x.methods.begin() + static_cast<std::ptrdiff_t>(method_rows)) {
        std::vector<std::string> names;
        for (size_t m = 0; m < method_rows; ++m) names.push_back(x.methods[m].name);
        reader.errors().push_back(reader.where(path + ".of") + ": " + path + ".of: '" + of +
                                  "' is not a trained row of experiment.methods; expected one of " + join(names, ", "));
        continue;
      }
      TrainedMethod variant = *row;
      variant.name = row->name + "+" + item.name;
      variant.variant_of = row->name;
      // versus names methods; a budget-curve row is compared with their point of its budget.
      const std::string budget = row->budget ? "@" + std::to_string(*row->budget) : "";
      for (const auto& other : item.versus) {
        const std::string key = other + budget;
        if (std::none_of(x.methods.begin(), x.methods.begin() + static_cast<std::ptrdiff_t>(method_rows),
                         [&](const TrainedMethod& m) { return m.name == key; }))
          reader.errors().push_back(reader.where(path + ".versus") + ": " + path + ".versus: '" + other +
                                    "' has no row " + key + " beside " + row->name +
                                    " in experiment.methods (a variant is compared with rows of its budget)");
        else
          variant.variant_versus.push_back(key);
      }
      for (Assignment a : item.set) {  // its origin names the variant: "x.yaml:9:20 (experiment.variants[0].set, variant lora)"
        a.origin.insert(a.origin.size() - 1, ", variant " + item.name);
        variant.set.push_back(std::move(a));
      }
      if (std::any_of(x.methods.begin(), x.methods.end(), [&](const auto& m) { return m.name == variant.name; }))
        reader.errors().push_back(reader.where(path + ".of") + ": " + path + ".of: '" + of + "' is listed twice");
      else
        x.methods.push_back(variant);
    }
  }
}

// A corpus's keys together: one source, a plain name, a usable base.
// `use`: a report written again reads no corpus or base from disk.
void check_corpus(const CorpusSpec& corpus, size_t index, schema::FieldReader& reader, const ExperimentConfig& x,
                  ExperimentUse use) {
  const std::string path = "experiment.corpora[" + std::to_string(index) + "]";
  auto& errors = reader.errors();
  if (!reader.given(path + ".name"))
    errors.push_back(corpus.origin + ": " + path + ".name: required (names the corpus's folder and table)");
  else if (corpus.name.empty() || corpus.name.find_first_of("/\\ ") != std::string::npos || corpus.name[0] == '.')
    errors.push_back(reader.where(path + ".name") + ": " + path + ".name: '" + corpus.name +
                     "' must be a plain folder name (no slashes, spaces or leading dot)");
  const int sources = int(corpus.synthetic.has_value()) + int(reader.given(path + ".inputs")) +
                      int(reader.given(path + ".store"));
  if (sources != 1)
    errors.push_back(corpus.origin + ": " + path + ": give exactly one of synthetic, inputs or store (got " +
                     std::to_string(sources) + ")");
  if (corpus.synthetic && corpus.synthetic->max_words < corpus.synthetic->min_words)
    errors.push_back(reader.where(path + ".synthetic") + ": " + path + ".synthetic: max_tokens is below min_tokens");
  for (size_t other = 0; other < index; ++other)
    if (x.corpora[other].name == corpus.name && !corpus.name.empty())
      errors.push_back(reader.where(path + ".name") + ": " + path + ".name: '" + corpus.name +
                       "' is used by another corpus");
  if (use == ExperimentUse::report) return;
  for (const auto& input : corpus.inputs)
    if (!fs::exists(input))
      errors.push_back(reader.where(path + ".inputs") + ": " + path + ".inputs: '" + input + "' does not exist" +
                       (input.find("linux-doc") != std::string::npos
                            ? " (scripts/setup.sh installs linux-doc-6.1 from scripts/apt-packages.txt)"
                            : ""));
  if (reader.given(path + ".store") && !fs::exists(fs::path(corpus.store) / "meta.json"))
    errors.push_back(reader.where(path + ".store") + ": " + path + ".store: '" + corpus.store +
                     "' is not a token store (no meta.json); create it with `segtrain prepare`");
  if (reader.given(path + ".base")) {
    const auto ref = parse_model_ref(corpus.base);
    const std::string dir = ref ? ref->dir : "";
    const std::string at = reader.where(path + ".base") + ": " + path + ".base: ";
    if (!ref || !ref->from_folder() || ref->kind == ModelRef::Kind::peft)
      errors.push_back(at + "expected hf:DIR or checkpoint:DIR, got '" + corpus.base + "'");
    else if (!fs::is_directory(dir))
      errors.push_back(at + "'" + dir + "' does not exist or is not a directory");
    else if (!corpus.store.empty() || ref->kind != ModelRef::Kind::hf)
      ;  // a ready store (checked against the base's vocabulary when evaluated), or a checkpoint's (below)
    else if (!fs::exists(fs::path(dir) / "tokenizer.json") && !fs::exists(fs::path(dir) / "tokenizer.model"))
      errors.push_back(at + "'" + dir +
                       "' has neither tokenizer.json nor tokenizer.model to tokenize the corpus's text with; "
                       "give a store made in its vocabulary (corpora[].store)");
    if (ref && ref->kind == ModelRef::Kind::checkpoint && corpus.store.empty())
      errors.push_back(at + "a checkpoint base needs the corpus as a store tokenized with its vocabulary "
                            "(corpora[].store), not text to train a new tokenizer on");
  }
}

// L_e = factor * L_t must be a 64-bit integer (the grid computes it; UBSan, fuzz_experiment).
void check_factors(const ExperimentConfig& x, schema::FieldReader& reader) {
  const int64_t lt = x.base_template.config.data.train_length;  // >= 1 (schema)
  for (const int64_t f : x.factors)
    if (f > std::numeric_limits<int64_t>::max() / lt)
      reader.errors().push_back(reader.where("experiment.factors") + ": experiment.factors: " + std::to_string(f) +
                                " * data.train_length " + std::to_string(lt) + " does not fit in a 64-bit L_e");
}

void check_eval_lengths(ExperimentConfig& x, schema::FieldReader& reader) {
  const int64_t lt = x.base_template.config.data.train_length;
  auto& errors = reader.errors();
  std::sort(x.eval_lengths.begin(), x.eval_lengths.end());
  if (x.eval_from_longest && x.base_template.config.eval.stride > 0)
    errors.push_back(reader.where("experiment.eval_from_longest") +
                     ": experiment.eval_from_longest: needs non-overlapping windows, but eval.stride is " +
                     std::to_string(x.base_template.config.eval.stride));
  if (x.eval_lengths.empty()) return;
  const std::string at = reader.where("experiment.eval_lengths") + ": experiment.eval_lengths: ";
  // A row keeps the loss by position of its longest length, which the plots and the
  // ring section read as L_e's: with lengths of its own, a grid has one factor and no
  // length past its L_e.
  const int64_t max = std::numeric_limits<int64_t>::max();
  if (x.factors.size() != 1 || (x.factors.front() <= max / lt && x.eval_lengths.back() > x.factors.front() * lt))
    errors.push_back(at + "give them with one factor and none longer than its L_e (the loss-by-position plots are "
                          "drawn at L_e)");
  // The tables compare rows at L_t and at each L_e: both must be among the lengths.
  std::vector<int64_t> needed = {lt};
  for (int64_t f : x.factors)
    if (f <= max / lt) needed.push_back(f * lt);
  for (int64_t length : needed)
    if (std::find(x.eval_lengths.begin(), x.eval_lengths.end(), length) == x.eval_lengths.end())
      errors.push_back(at + std::to_string(length) + " is missing; the lengths must include L_t = " +
                       std::to_string(lt) + " and every L_e = factor * L_t");
}

// Which rows fit depends on each corpus's base architecture: truncate needs an
// extension to train with, and the OOTB methods must apply to the base.
void check_rows_fit_bases(const ExperimentConfig& x, schema::FieldReader& reader) {
  for (const auto& corpus : x.corpora) {
    if (!corpus.base.empty() && !fs::is_directory(model_ref_dir(corpus.base))) continue;  // reported above
    const models::Arch arch = base_arch(x, corpus);
    // truncate is DA with the rows' extension: with none, it would train DA's run again.
    if (std::any_of(x.methods.begin(), x.methods.end(), [](const auto& m) { return m.name == "truncate"; }) &&
        x.train_extension.value_or(default_train_extension(arch)) == models::ExtensionMethod::none)
      reader.errors().push_back(
          reader.where("experiment.methods") + ": experiment.methods: truncate trains with the rows' extension, " +
          "which is none for corpus '" + corpus.name + "' (experiment.train_extension): that is the da row; use da, " +
          "or set experiment.train_extension");
    const auto applicable = ootb_methods_for(arch);
    for (auto m : x.ootb)
      if (std::find(applicable.begin(), applicable.end(), m) == applicable.end()) {
        std::vector<std::string> names;
        for (auto a : applicable) names.emplace_back(enum_name(models::kExtensionMethods, a));
        reader.errors().push_back(reader.where("experiment.ootb") + ": experiment.ootb: " +
                                  enum_name(models::kExtensionMethods, m) + " does not apply out of the box to the " +
                                  enum_name(models::kArchs, arch) + " base of corpus '" + corpus.name +
                                  "'; choose from " + join(names, ", "));
      }
  }
}

// The section through its key table (schema.cpp), then the rules that need several keys.
void read_experiment_section(const YAML::Node& node, ExperimentConfig& x, std::vector<std::string>& errors,
                             ExperimentUse use) {
  Origins origins;
  schema::FieldReader reader(x.file, errors, origins);
  auto items = default_method_items();
  std::vector<VariantItem> variants;
  schema::FieldTable table(experiment_fields(x, items, variants, reader));
  table.note("experiment.passkey", "replaced by the evaluation tasks of the run sections: eval.tasks: [perplexity, "
                                   "passkey] and eval.passkey: {lengths: [...], trials: N, style: digits|recall}");
  reader.read(node, "experiment", table);
  if (x.name.empty()) x.name = fs::path(x.file).stem().string();
  if (x.output_dir.empty()) x.output_dir = "runs/experiments/" + x.name;
  check_factors(x, reader);
  resolve_methods(items, reader, x);
  resolve_variants(variants, reader, x);
  check_eval_lengths(x, reader);
  if (!node["corpora"])
    errors.push_back(location(x.file, node.Mark()) +
                     ": experiment.corpora: required: a list of corpora, e.g. [{name: synthetic, synthetic: {docs: 200}}]");
  for (size_t i = 0; i < x.corpora.size(); ++i) check_corpus(x.corpora[i], i, reader, x, use);
  if (use == ExperimentUse::grid) check_rows_fit_bases(x, reader);  // reads each base's config
}

}  // namespace

std::optional<TrainedMethod> parse_trained_method(const std::string& name) {
  TrainedMethod m;
  m.name = name;
  if (name == "da") {
    m.domain_adaptation = true;
    return m;
  }
  if (name.rfind("chunk-ring-", 0) == 0) {  // chunk with data.sampler.placement ring
    auto m = parse_trained_method("chunk-" + name.substr(11));
    if (!m) return std::nullopt;
    m->name = name;
    m->placement = data::ChunkPlacement::ring;
    return m;
  }
  // A registered sampler by its name, or "<name>-<alpha>" for one named with its alpha (chunk-0.25).
  // `truncate` trains with the rows' extension (the domain-adaptation row of a base extended with a
  // scaling); `da` trains on the base's own positions instead.
  for (const data::SamplerKind* kind : data::samplers()) {
    const std::string stem(kind->name);
    if (!kind->named_with_alpha) {
      if (name == stem) return m.sampler = stem, m;
      continue;
    }
    if (name.rfind(stem + "-", 0) != 0) continue;
    const std::string number = name.substr(stem.size() + 1);
    try {
      size_t used = 0;
      const double alpha = std::stod(number, &used);
      // Its range and its fit with L_t and L_e: data/sampler_rules.h, through validate_config on each run.
      if (used != number.size() || !std::isfinite(alpha)) return std::nullopt;
      m.sampler = stem;
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

ExperimentConfig load_experiment(const std::string& file, const std::vector<std::string>& overrides,
                                 ExperimentUse use) {
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
  read_experiment_section(root["experiment"], x, errors, use);
  const auto& tasks = x.base_template.config.eval.tasks;
  if (std::none_of(tasks.begin(), tasks.end(), [](const std::string& t) { return scores_windows(t); }))
    errors.push_back(x.base_template.locate("eval.tasks") + ": an experiment scores every row's perplexity (its "
                     "tables and intervals are perplexity's): list perplexity among them");
  if (!errors.empty()) throw InputError(join(errors, "\n"));
  if (use == ExperimentUse::report) return x;

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
