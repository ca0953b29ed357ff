#include "models/modules/converters/freeze.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"

namespace segtrain::models {

bool glob_matches(const std::string& pattern, const std::string& name) {
  // Iterative wildcard matching: on a mismatch, the last "*" takes one more character.
  size_t p = 0, n = 0, star = std::string::npos, star_n = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p, ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_n = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++star_n;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {

struct Rule {
  std::string glob;
  bool freezes = true;  // false: a "!" pattern, trains again
  std::string text;     // as written
};

class Freeze final : public ModelConverter {
 public:
  explicit Freeze(std::vector<std::string> patterns) : patterns_(std::move(patterns)) {
    for (const auto& text : patterns_) {
      const bool keeps = !text.empty() && text[0] == '!';
      Rule rule{keeps ? text.substr(1) : text, !keeps, text};
      if (rule.glob.empty())
        throw InputError("the pattern '" + text + "' is empty; expected a glob over parameter names "
                         "such as 'blocks.*.attn.*' (or '!' and one, to keep what it matches training)");
      rules_.push_back(std::move(rule));
    }
  }

  std::string name() const override { return "freeze"; }
  std::string config_key() const override { return "train.freeze"; }

  void convert(TransformerLM& model) const override {
    std::vector<int64_t> matched(rules_.size(), 0);
    int64_t trainable = 0;
    std::vector<std::string> names;
    for (auto& item : model->named_parameters()) {
      names.push_back(item.key());
      bool frozen = false;
      for (size_t r = 0; r < rules_.size(); ++r)
        if (glob_matches(rules_[r].glob, item.key())) {
          frozen = rules_[r].freezes;  // the last match decides
          ++matched[r];
        }
      if (frozen) item.value().set_requires_grad(false);
      else if (item.value().requires_grad()) ++trainable;
    }
    for (size_t r = 0; r < rules_.size(); ++r)
      if (matched[r] == 0)
        throw InputError("the pattern '" + rules_[r].text + "' matches no parameter of this model (" +
                         some_names(names) + ")");
    if (trainable == 0)
      throw InputError("these patterns freeze every parameter, so nothing would train; keep some "
                       "training with a '!' pattern after them, e.g. '!*norm*'");
  }

  nlohmann::json to_json() const override { return {{"name", name()}, {"patterns", patterns_}}; }

 private:
  // A few names, to show what the globs are matched against.
  static std::string some_names(const std::vector<std::string>& names) {
    std::ostringstream out;
    out << "its " << names.size() << " parameters are named like ";
    const size_t shown = std::min<size_t>(names.size(), 4);
    for (size_t i = 0; i < shown; ++i) out << (i ? ", " : "") << names[i];
    if (names.size() > shown) out << ", ..., " << names.back();
    return out.str();
  }

  std::vector<std::string> patterns_;
  std::vector<Rule> rules_;
};

}  // namespace

std::unique_ptr<ModelConverter> make_freeze(std::vector<std::string> patterns) {
  return std::make_unique<Freeze>(std::move(patterns));
}

ConverterKind freeze_converter() {
  return {"freeze", "train.freeze",
          [](const ConverterSettings& settings) -> std::unique_ptr<ModelConverter> {
            if (settings.freeze.empty()) return nullptr;
            return make_freeze(settings.freeze);
          },
          [](const nlohmann::json& entry, const std::string& source) -> std::unique_ptr<ModelConverter> {
            const bool fits = entry.contains("patterns") && entry["patterns"].is_array() &&
                              std::all_of(entry["patterns"].begin(), entry["patterns"].end(),
                                          [](const nlohmann::json& v) { return v.is_string(); });
            if (!fits) throw InputError(source + ": the freeze converter needs \"patterns\": a list of strings");
            return make_freeze(entry["patterns"].get<std::vector<std::string>>());
          }};
}

}  // namespace segtrain::models
