#include "trainer/experiment/schema.h"

#include <filesystem>

#include "trainer/config/yaml_text.h"
#include "trainer/experiment/plan.h"

namespace segtrain::trainer {
namespace {

using namespace schema;  // the field builders
namespace fs = std::filesystem;

const std::string kMethodsType = "a non-empty list of method names or {name, budgets, set} mappings";

// `key: value` run-config settings, kept as --set assignments with where each was
// written. `budget_fixed`: they belong to trained rows, whose budget the grid sets.
Field assignments(std::string path, std::vector<Assignment>& v, bool budget_fixed, FieldReader& reader,
                  std::string doc) {
  std::string type = "a mapping of run config keys to values";
  return {path, type, std::move(doc),
          [&v, &reader, path, type, budget_fixed](const YAML::Node& n) {
            if (!n.IsMap()) expected(type, n);
            for (auto it = n.begin(); it != n.end(); ++it) {
              const YAML::Node key = it->first, value = it->second;
              const std::string name = scalar(key, type);
              if (is_grid_key(name)) {
                reader.fail(key.Mark(), path + "." + name +
                                            ": the experiment sets this key for every run; it cannot be overridden here");
              } else if (budget_fixed && name == "train.budget.tokens") {
                reader.fail(key.Mark(), path + "." + name +
                                            ": every trained row has the same budget so that rows compare: the "
                                            "compute-equivalent one (Karypis et al. 2024, eq. 2), or experiment.train_tokens; a "
                                            "method's other budgets are its `budgets:` list");
              } else {
                YAML::Emitter text;
                text << YAML::Flow << value;
                // Where and under which key: "exp.yaml:6:11 (experiment.base.set)".
                v.push_back({name + "=" + text.c_str(), location(reader.source(), key.Mark()) + " (" + path + ")"});
              }
            }
          },
          [&v] {
            auto map = flow_map();
            for (const auto& a : v) map[a.text.substr(0, a.text.find('='))] = YAML::Load(a.text.substr(a.text.find('=') + 1));
            return map;
          }};
}

// A non-empty list of strings, described to the user as `type`.
Field non_empty_texts(std::string path, std::vector<std::string>& v, std::string type, std::string doc) {
  return {path, type, std::move(doc),
          [&v, type](const YAML::Node& n) {
            std::vector<std::string> out;
            for (const auto& item : sequence(n, type)) out.push_back(scalar(item, type));
            if (out.empty()) expected(type, n);
            v = out;
          },
          [&v] { return plain_list(v); }};
}

// Text inputs: files or folders (that they exist is the grid's check: check_corpus).
Field input_paths(std::string path, std::vector<std::string>& v, std::string doc) {
  return non_empty_texts(std::move(path), v, "a non-empty list of existing file or folder paths", std::move(doc));
}

Field seed(std::string path, uint64_t& v, std::string doc) {
  std::string type = "an integer >= 0";
  return {path, type, std::move(doc),
          [&v, type](const YAML::Node& n) { v = static_cast<uint64_t>(parse_integer(n, type, 0, kMaxInt)); },
          [&v] { return plain(std::to_string(v)); }};
}

std::vector<Field> method_fields(const std::string& prefix, MethodItem& m, FieldReader& reader) {
  return {
      text(prefix + ".name", m.name, "The method (required), as in experiment.methods."),
      integer_set(prefix + ".budgets", m.budgets, "none", 1,
                  "The budget curve: each budget adds the row NAME@TOKENS, trained from the base on that many "
                  "tokens with its own schedule after every main row, tabled and plotted by budget apart from the "
                  "comparisons."),
      assignments(prefix + ".set", m.set, /*budget_fixed=*/true, reader,
                  "Settings of this method's runs alone, applied after experiment.extend.set (e.g. activation "
                  "checkpointing for full, whose sequences are L_e long)."),
  };
}

std::vector<Field> variant_fields(const std::string& prefix, VariantItem& v, FieldReader& reader) {
  return {
      text(prefix + ".name", v.name,
           "Names the variant (required; letters, digits, - and _): its rows are <row>+<name>, e.g. "
           "chunk-0.25@262144+lora."),
      non_empty_texts(prefix + ".of", v.of, "a non-empty list of row names",
                "The trained rows it varies (required), by their names in experiment.methods: chunk-0.25, or a "
                "budget-curve point chunk-0.25@262144."),
      assignments(prefix + ".set", v.set, /*budget_fixed=*/true, reader,
                  "Settings of the variant's runs, applied after its row's own (e.g. model.adapters.lora.rank, "
                  "train.trainable): the one thing its comparison with the row measures."),
      non_empty_texts(prefix + ".versus", v.versus, "a non-empty list of row names",
                      "More rows each of its rows is compared with besides its own (optional), by their names in "
                      "experiment.methods: e.g. [da] for a variant meant to close chunk's gap to DA inside the "
                      "context; a point of a budget curve is matched with the same budget (da@262144)."),
  };
}

std::vector<Field> corpus_fields(const std::string& prefix, CorpusSpec& c, data::SynthOptions& s) {
  return {
      text(prefix + ".name", c.name, "Names the corpus's folder and table (required; a plain folder name)."),
      integer(prefix + ".synthetic.docs", s.documents, 10, kMaxInt,
              "A synthetic corpus (data/synth.h) of this many documents; one of synthetic, inputs or store."),
      integer(prefix + ".synthetic.min_tokens", s.min_words, 16, kMaxInt, "Shortest synthetic document, in words."),
      integer(prefix + ".synthetic.max_tokens", s.max_words, 16, kMaxInt, "Longest synthetic document, in words."),
      seed(prefix + ".synthetic.seed", s.seed, "Seeds the synthetic text."),
      input_paths(prefix + ".inputs", c.inputs,
                  "Text files or folders tokenized into the corpus's store: with an hf: base, "
                  "by the base's own tokenizer (its folder's tokenizer.json or tokenizer.model)."),
      text(prefix + ".store", c.store, "A token store written by `segtrain prepare` (a checkpoint base needs one in its vocabulary)."),
      integer(prefix + ".vocab_size", c.vocab_size, 16, kMaxInt,
              "Vocabulary of the tokenizer the grid trains on synthetic text or inputs when there is no hf: base."),
      real(prefix + ".valid_fraction", c.valid_fraction, above(0), below(1),
           "Fraction of the documents held out: no row trains on them, every row is scored on them."),
      text(prefix + ".base", c.base,
           "hf:DIR or checkpoint:DIR: a given base, extended from its own context (no pretraining); empty: the grid "
           "pretrains one at L_t."),
  };
}

template <class Item, class Read>
Field item_list(std::string path, std::vector<Item>& v, std::string type, std::string doc, Read read_item,
                std::function<YAML::Node()> emit) {
  return {path, type, std::move(doc),
          [&v, path, type, read_item](const YAML::Node& n) {
            std::vector<Item> out;
            for (const auto& item : sequence(n, type)) out.push_back(read_item(item, path + "[" + std::to_string(out.size()) + "]"));
            if (out.empty()) expected(type, n);
            v = std::move(out);
          },
          std::move(emit)};
}

// A list's items as their names, as `segtrain config` prints the list.
template <class Item>
YAML::Node names_of(const std::vector<Item>& items) {
  auto list = flow_list();
  for (const auto& item : items) list.push_back(plain(item.name));
  return list;
}

Field method_list(std::vector<MethodItem>& methods, FieldReader& reader) {
  auto read = [&reader](const YAML::Node& item, const std::string& prefix) {
    MethodItem m;
    m.origin = location(reader.source(), item.Mark());
    if (item.IsScalar() && !item.Scalar().empty()) {
      m.name = item.Scalar();
    } else if (item.IsMap()) {
      FieldTable table(method_fields(prefix, m, reader));
      reader.read(item, prefix, table);
      if (!reader.given(prefix + ".name")) reader.fail(item.Mark(), prefix + ".name: required (a method name)");
    } else {
      expected(kMethodsType, item);
    }
    return m;
  };
  return item_list(
      "experiment.methods", methods, kMethodsType,
      "Trained rows: da (truncate training on the base's positions, extended only when evaluated: Karypis et al.'s "
      "domain-adaptation control), truncate (truncate training with the rows' extension: the DA row of a base "
      "extended with a scaling), full, randompos, pose, chunk-α, chunk-ring-α (chunk with "
      "data.sampler.placement: ring), prefix-α; an item {name, budgets, set} adds settings and budgets of "
      "its own (experiment.methods[].*).",
      read, [&methods] { return names_of(methods); });
}

Field variant_list(std::vector<VariantItem>& variants, FieldReader& reader) {
  const std::string type = "a non-empty list of {name, of, set} mappings";
  auto read = [&reader, type](const YAML::Node& item, const std::string& prefix) {
    VariantItem v;
    v.origin = location(reader.source(), item.Mark());
    if (!item.IsMap()) expected(type, item);
    FieldTable table(variant_fields(prefix, v, reader));
    reader.read(item, prefix, table);
    for (const char* key : {".name", ".of", ".set"})
      if (!reader.given(prefix + key))
        reader.fail(item.Mark(), prefix + key + ": required (a variant is {name, of: [rows], set: {key: value}})");
    return v;
  };
  return item_list("experiment.variants", variants, type,
                   "Rows trained again with other settings, each compared with its row by paired intervals (e.g. "
                   "LoRA against full fine-tuning at the same budget): {name, of: [rows], set: {key: value}} "
                   "(experiment.variants[].*).",
                   read, [&variants] { return names_of(variants); });
}

Field corpus_list(std::vector<CorpusSpec>& corpora, FieldReader& reader) {
  auto read = [&reader](const YAML::Node& item, const std::string& prefix) {
    CorpusSpec c;
    c.origin = location(reader.source(), item.Mark());
    if (!item.IsMap())
      throw FieldError("expected a mapping with name and one of synthetic, inputs or store", item.Mark());
    data::SynthOptions synthetic;
    FieldTable table(corpus_fields(prefix, c, synthetic));
    reader.read(item, prefix, table);
    if (reader.given(prefix + ".synthetic")) c.synthetic = synthetic;
    return c;
  };
  return item_list("experiment.corpora", corpora, "a non-empty list of corpus mappings",
                   "The corpora (required), each a mapping of experiment.corpora[].* keys: one grid a corpus.", read,
                   [] { return flow_list(); });
}

}  // namespace

std::vector<MethodItem> default_method_items() {
  std::vector<MethodItem> out;
  for (const char* name : {"da", "full", "chunk-0.125", "chunk-0.25", "chunk-0.5", "prefix-0.25", "prefix-0.5", "randompos"})
    out.push_back({name, {}, {}, ""});
  return out;
}

std::vector<Field> experiment_fields(ExperimentConfig& x, std::vector<MethodItem>& methods,
                                     std::vector<VariantItem>& variants, FieldReader& reader) {
  return {
      text_or("experiment.name", x.name, "auto", "Names the output folder and the report; auto: the file's stem."),
      text_or("experiment.output_dir", x.output_dir, "auto", "Where everything goes; auto: runs/experiments/NAME."),
      integer_set("experiment.factors", x.factors, nullptr, 2, "Extension factors f: L_e = f * data.train_length."),
      maybe_integer("experiment.train_tokens", x.train_tokens, "null", 1,
                    "Tokens every trained row trains on; null: the compute-equivalent budget (L_e / L_t epochs of the "
                    "training split, Karypis et al. 2024, eq. 2). Either way every row the report compares sees the same number "
                    "(a method's budgets add rows beside them)."),
      method_list(methods, reader),
      variant_list(variants, reader),
      maybe_choice_list("experiment.ootb", x.ootb, "auto", models::kExtensionMethods,
                        "Out-of-the-box rows (no training), as model.extension.method names; auto: every method that "
                        "applies to the base."),
      maybe_choice("experiment.train_extension", x.train_extension, "auto", models::kExtensionMethods,
                   "Extension the trained rows use; auto: interpolate for gpt2 (Karypis et al. 2024, 3.2), none for RoPE and "
                   "ALiBi (the model learns the new distances)."),
      integer_set("experiment.eval_lengths", x.eval_lengths, "auto", 2,
                  "Lengths every row is evaluated at; auto: L_t and each L_e. Must hold L_t and L_e, with one factor "
                  "and none past its L_e (a row keeps the loss by position of its longest length, which the plots "
                  "show as L_e's)."),
      flag("experiment.eval_from_longest", x.eval_from_longest,
           "Every row and length scored on the first L tokens of the same windows of the longest length, so every "
           "figure of a column comes from the same text: one forward a window (dynamic NTK, dynamic interpolation "
           "and LongRoPE rows run one a length: their frequencies depend on it). Non-overlapping windows only "
           "(eval.stride 0)."),
      corpus_list(x.corpora, reader),
      assignments("experiment.base.set", x.base_set, /*budget_fixed=*/false, reader,
                  "Run config settings of the pretraining run at L_t (e.g. train.budget.tokens, train.lr)."),
      assignments("experiment.extend.set", x.extend_set, /*budget_fixed=*/true, reader,
                  "Run config settings of every trained row (not the budget: it is compute-equivalent or "
                  "experiment.train_tokens)."),
  };
}

std::string experiment_reference_rows() {
  ExperimentConfig x;
  auto methods = default_method_items();
  std::vector<VariantItem> variants;
  std::vector<std::string> errors;
  Origins origins;
  FieldReader reader("", errors, origins);
  MethodItem method;
  VariantItem variant;
  CorpusSpec corpus;
  data::SynthOptions synthetic;
  return reference_rows(experiment_fields(x, methods, variants, reader)) +
         reference_rows(corpus_fields("experiment.corpora[]", corpus, synthetic)) +
         reference_rows(method_fields("experiment.methods[]", method, reader)) +
         reference_rows(variant_fields("experiment.variants[]", variant, reader));
}

}  // namespace segtrain::trainer
