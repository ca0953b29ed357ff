#include "models/spec/families/peft_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string_view>

#include <re2/re2.h>

#include "common/error.h"
#include "common/input_text.h"
#include "models/spec/converters/lora_config.h"
#include "models/spec/families/family.h"

namespace segtrain::models {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string shown(const std::string& text) { return shown_input(text); }
std::string shown(const json& value) { return shown(value.dump(-1, ' ', false, json::error_handler_t::replace)); }

std::string with_commas(size_t n) {
  std::string digits = std::to_string(n);
  for (auto at = static_cast<std::ptrdiff_t>(digits.size()) - 3; at > 0; at -= 3) digits.insert(static_cast<size_t>(at), ",");
  return digits;
}

// How adapter_config.json names modules: a list matched by name or "." suffix, or a regex
// the whole name must match (Python's re.fullmatch, in RE2: linear time, whatever the pattern).
class ModuleMatcher {
 public:
  ModuleMatcher(const json& value, const std::string& at) : at_(at) {
    if (value.is_null()) return;
    if (value.is_string()) {
      pattern_ = value.get<std::string>();
      if (pattern_->size() > kMaxModulePatternChars)
        throw InputError(at + ": a regular expression of " + with_commas(pattern_->size()) + " characters; at most " +
                         with_commas(kMaxModulePatternChars) + " ('" + shown(*pattern_) + "')");
      RE2::Options options;
      options.set_log_errors(false);
      regex_ = std::make_unique<RE2>(*pattern_, options);
      if (!regex_->ok())
        throw InputError(at + ": '" + shown(*pattern_) + "' is not a regular expression segtrain reads (" +
                         shown(regex_->error()) + "): it matches as Python's re.fullmatch does, in RE2, which has "
                         "no backreferences or lookaround");
      return;
    }
    if (!value.is_array()) throw InputError(at + ": expected a list of module names, a regular expression or null");
    if (value.size() > kMaxModuleNames)
      throw InputError(at + ": lists " + with_commas(value.size()) + " module names; at most " +
                       with_commas(kMaxModuleNames));
    for (const auto& entry : value) {
      if (!entry.is_string()) throw InputError(at + ": expected module names (strings), got " + shown(entry));
      names_.push_back(entry.get<std::string>());
    }
  }

  // The entry `module` matches ("" when none; the pattern for a regex).
  std::string match(const std::string& module) const {
    if (pattern_) return RE2::FullMatch(module, *regex_) ? *pattern_ : "";
    for (const auto& name : names_)
      if (module == name || (module.size() > name.size() && module.ends_with(name) &&
                             module[module.size() - name.size() - 1] == '.'))
        return name;
    return "";
  }

  // Each list entry once it matched something; what matched nothing is the config's error,
  // as PEFT's own ("Target modules ... not found in the base model").
  void matched(const std::string& entry) { used_.insert(entry); }
  void check_all_used(const std::string& what) const {
    for (const auto& name : names_)
      if (!used_.count(name)) throw InputError(at_ + ": '" + shown(name) + "' matches no " + what + " of the base");
    if (pattern_ && used_.empty())
      throw InputError(at_ + ": '" + shown(*pattern_) + "' matches no " + what + " of the base");
  }

 private:
  std::string at_;
  std::vector<std::string> names_;
  std::optional<std::string> pattern_;
  std::unique_ptr<RE2> regex_;
  std::set<std::string> used_;
};

// Layer `layer`'s name of a table pattern ("{}" is the layer slot).
std::string at_layer(std::string pattern, int64_t layer) {
  const auto slot = pattern.find("{}");
  if (slot != std::string::npos) pattern.replace(slot, 2, std::to_string(layer));
  return pattern;
}

std::string without_last(const std::string& name) { return name.substr(0, name.rfind('.')); }

const json& field(const json& config, const char* key) {
  static const json null;
  return config.contains(key) ? config.at(key) : null;
}

// A key that must hold PEFT's default for segtrain to continue the adapter as it is.
void expect_default(const json& config, const char* key, const json& fallback, const std::string& file,
                    const std::string& why) {
  const json& value = field(config, key);
  if (value.is_null() || value == fallback || (value.is_object() && value.empty()) || (value.is_array() && value.empty()))
    return;
  throw InputError(file + ": " + key + ": " + shown(value) + " is not supported: " + why);
}

// Where `text` stops being UTF-8 (npos when it is): a stray or missing continuation byte,
// an overlong form, a surrogate or a code point past U+10FFFF.
size_t utf8_error(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const auto byte = [&](size_t at) { return static_cast<unsigned char>(text[at]); };
    const unsigned char lead = byte(i);
    const size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 0;
    if (length == 0 || i + length > text.size()) return i;
    uint32_t code = length == 1 ? lead : lead & (0x7f >> length);
    for (size_t k = 1; k < length; ++k) {
      if ((byte(i + k) & 0xc0) != 0x80) return i;
      code = (code << 6) | (byte(i + k) & 0x3f);
    }
    const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < smallest[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return i;
    i += length;
  }
  return std::string_view::npos;
}

// Parses without building anything, stopping at the first value nested deeper than
// kMaxAdapterConfigDepth (a DOM that deep would be copied, printed and destroyed recursively)
// and keeping nlohmann's account of a syntax error.
class DepthBound final : public nlohmann::json_sax<json> {
 public:
  bool too_deep = false;
  std::string error;

  bool null() override { return true; }
  bool boolean(bool /*value*/) override { return true; }
  bool number_integer(number_integer_t /*value*/) override { return true; }
  bool number_unsigned(number_unsigned_t /*value*/) override { return true; }
  bool number_float(number_float_t /*value*/, const string_t& /*text*/) override { return true; }
  bool string(string_t& /*value*/) override { return true; }
  bool binary(binary_t& /*value*/) override { return true; }
  bool key(string_t& /*value*/) override { return true; }
  bool start_object(std::size_t /*elements*/) override { return enter(); }
  bool start_array(std::size_t /*elements*/) override { return enter(); }
  bool end_object() override { return leave(); }
  bool end_array() override { return leave(); }
  bool parse_error(std::size_t /*position*/, const std::string& last_token,
                   const nlohmann::detail::exception& e) override {
    // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error ...; last read: '...'":
    // the part between, without the bytes read (which may be anything).
    std::string what = e.what();
    if (const auto open = what.find("] "); open != std::string::npos) what = what.substr(open + 2);
    if (const auto read = what.find("; last read"); read != std::string::npos) what = what.substr(0, read);
    error = what;
    if (last_token.ends_with("N") || last_token.ends_with("I"))  // what was read up to NaN's or Infinity's first letter
      error += "; NaN and Infinity, which Python's json writes, are not JSON";
    return false;
  }

 private:
  int depth_ = 0;
  bool enter() {
    too_deep = ++depth_ > kMaxAdapterConfigDepth;
    return !too_deep;
  }
  bool leave() {
    --depth_;
    return true;
  }
};

// adapter_config.json as a JSON object, its size, encoding, syntax and nesting checked first.
json read_adapter_json(const std::string& file) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw InputError(file + ": cannot be read; expected a PEFT adapter folder (adapter_config.json, "
                     "adapter_model.safetensors)");
  const auto bytes = fs::file_size(file, ec);
  if (ec || bytes > static_cast<uintmax_t>(kMaxAdapterConfigBytes))
    throw InputError(file + ": " + (ec ? "its size cannot be read" : with_commas(bytes) + " bytes") +
                     "; an adapter_config.json may have at most 1 MiB (PEFT writes about 1 KB)");
  std::ifstream in(file, std::ios::binary);
  std::string text(static_cast<size_t>(bytes) + 1, '\0');  // one more byte: a file that grew is not read on
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw InputError(file + ": cannot be read");
  if (static_cast<uintmax_t>(in.gcount()) > bytes) throw InputError(file + ": changed while it was read");
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw InputError(file + ": is empty; expected PEFT's JSON object ({\"peft_type\": \"LORA\", \"r\": ...})");
  DepthBound bound;
  if (!json::sax_parse(text, &bound)) {
    if (bound.too_deep)
      throw InputError(file + ": values nested more than " + std::to_string(kMaxAdapterConfigDepth) +
                       " deep; PEFT's are 2");
    // The parser refuses bytes that are not UTF-8 (in strings, as anywhere else): say that first.
    if (const size_t at = utf8_error(text); at != std::string_view::npos)
      throw InputError(file + ": is not UTF-8 text (byte " + with_commas(at) + "); JSON is UTF-8");
    throw InputError(file + ": not JSON (" + bound.error + ")");
  }
  json config = json::parse(text);
  if (!config.is_object())
    throw InputError(file + ": a JSON " + std::string(config.type_name()) +
                     ", not an object; expected PEFT's {\"peft_type\": \"LORA\", \"r\": ...}");
  return config;
}

// LoRA's own fields (lora_config.h's records) and base_model_name_or_path; refused: what PEFT's LoRA has and segtrain's has not.
void read_numbers(const json& config, const std::string& file, PeftAdapterConfig& out) {
  if (field(config, "peft_type") != "LORA")
    throw InputError(file + ": peft_type: " + shown(field(config, "peft_type")) + "; segtrain continues LORA adapters");
  out.lora = lora_from_peft_fields(config, file);
  expect_default(config, "bias", "none", file, "segtrain's adapters train no bias");
  expect_default(config, "use_rslora", false, file, "segtrain scales adapters by alpha / r (no rsLoRA)");
  expect_default(config, "lora_bias", false, file, "segtrain's adapters train no bias");
  expect_default(config, "rank_pattern", json::object(), file, "every adapter of segtrain's has the one rank r");
  expect_default(config, "alpha_pattern", json::object(), file, "every adapter of segtrain's has the one lora_alpha");
  expect_default(config, "layers_to_transform", nullptr, file, "segtrain adapts every layer");
  expect_default(config, "target_parameters", nullptr, file, "segtrain adapts modules (target_modules)");
  if (field(config, "base_model_name_or_path").is_string())
    out.base_model = field(config, "base_model_name_or_path").get<std::string>();
}

// The base's HF names a family's table gives, with its prefix where the row has it.
struct HfNames {
  const Family& family;
  const ModelConfig& base;
  std::string full(bool prefixed, const std::string& hf) const { return (prefixed ? family.names().prefix : "") + hf; }
};

// target_modules -> segtrain's targets: each on every layer or on none (and fan_in_fan_out as the family holds them).
std::vector<std::string> read_targets(const json& config, const std::string& file, const HfNames& names) {
  if (field(config, "target_modules").is_null()) throw InputError(file + ": target_modules: required");
  ModuleMatcher targets(field(config, "target_modules"), file + ": target_modules");
  const HfNameTable& table = names.family.names();
  const BlockKind block = arch_layout(names.base.arch).block;
  std::vector<std::string> out;
  bool transposed = false;
  for (const auto& target : kLoraTargets) {
    const auto module = lora_module(block, target);
    if (!module) continue;
    const std::string ours = "blocks.{}." + *module + ".weight";
    const auto row = std::find_if(table.tensors.begin(), table.tensors.end(), [&](const auto& t) { return t.ours == ours; });
    if (row == table.tensors.end()) {  // a projection transformers fuses with others (Phi-3's qkv_proj)
      for (const auto& fused : table.fused)
        if (std::find(fused.parts.begin(), fused.parts.end(), ours) != fused.parts.end())
          if (const std::string entry = targets.match(without_last(names.full(fused.prefixed, at_layer(fused.hf, 0))));
              !entry.empty())
            throw InputError(file + ": target_modules: '" + entry + "' adapts " + names.family.model_type() +
                             "'s fused " + without_last(fused.hf) + " as one projection; segtrain adapts its parts apart");
      continue;
    }
    int64_t layers = 0;
    for (int64_t layer = 0; layer < names.base.n_layers; ++layer)
      if (const std::string entry = targets.match(without_last(names.full(row->prefixed, at_layer(row->hf, layer))));
          !entry.empty()) {
        targets.matched(entry);
        ++layers;
      }
    if (layers == 0) continue;
    if (layers != names.base.n_layers)
      throw InputError(file + ": target_modules: adapt " + without_last(row->hf) + " on " + std::to_string(layers) +
                       " of the base's " + std::to_string(names.base.n_layers) + " layers; segtrain adapts every layer");
    out.push_back(target);
    transposed = transposed || row->transpose;
  }
  targets.check_all_used("projection segtrain adapts (" +
                         std::string(block == BlockKind::llama ? "q, k, v, o, gate, up, down" : "qkv, o, up, down") + ")");
  const json& fan_in_fan_out = field(config, "fan_in_fan_out");
  if (!fan_in_fan_out.is_null() && !fan_in_fan_out.is_boolean())
    throw InputError(file + ": fan_in_fan_out: expected true or false, got " + shown(fan_in_fan_out));
  if (!fan_in_fan_out.is_null() && fan_in_fan_out.get<bool>() != transposed)
    throw InputError(file + ": fan_in_fan_out: " + shown(fan_in_fan_out) + ", but " + names.family.model_type() +
                     "'s adapted projections hold their weights " +
                     (transposed ? "transposed (Conv1D): true" : "as Linear: false"));
  return out;
}

// modules_to_save -> the groups of train.trainable they hold, after "adapters".
std::vector<std::string> read_saved_groups(const json& config, const std::string& file, const HfNames& names) {
  ModuleMatcher saved(field(config, "modules_to_save"), file + ": modules_to_save");
  std::set<std::string> groups;
  for (const auto& row : names.family.names().tensors) {
    const bool per_layer = row.hf.find("{}") != std::string::npos;
    for (int64_t layer = 0; layer < (per_layer ? names.base.n_layers : 1); ++layer) {
      const std::string module = without_last(names.full(row.prefixed, at_layer(row.hf, layer)));
      const std::string entry = saved.match(module);
      if (entry.empty()) continue;
      saved.matched(entry);
      const std::string group = trainable_group(row.ours);
      if (group.empty())
        throw InputError(file + ": modules_to_save: '" + entry + "' holds " + module +
                         ", which segtrain does not train besides adapters (norms, embeddings and the head do)");
      if (group == "embeddings" && names.base.tie_embeddings)
        throw InputError(file + ": modules_to_save: '" + entry + "' holds the token table, which the base's head is "
                         "tied to: PEFT trains a copy of it under the untied head, which segtrain's tied model cannot hold");
      groups.insert(group);
    }
  }
  saved.check_all_used("module");
  std::vector<std::string> out = {"adapters"};
  for (const auto& group : kTrainableGroups)
    if (groups.count(group)) out.push_back(group);
  return out;
}

}  // namespace

PeftAdapterConfig read_peft_adapter_config(const std::string& dir, const ModelConfig& base) {
  const std::string file = (fs::path(dir) / "adapter_config.json").string();
  const json config = read_adapter_json(file);
  PeftAdapterConfig out;
  read_numbers(config, file, out);
  const HfNames names{family_for_export(base), base};
  out.lora.targets = read_targets(config, file, names);
  out.lora.trainable = read_saved_groups(config, file, names);
  // The adapters' size on this base, before anything allocates them.
  for (const auto& problem : lora_size_problems(out.lora, base)) throw InputError(file + ": r: " + problem.message);
  return out;
}

std::string read_peft_base_model(const std::string& dir) {
  const json config = read_adapter_json((fs::path(dir) / "adapter_config.json").string());
  const json& base = field(config, "base_model_name_or_path");
  return base.is_string() ? base.get<std::string>() : "";
}

std::string find_peft_base(const std::string& adapter_dir, const std::string& base_model) {
  if (base_model.empty()) return "";
  for (const fs::path& candidate : {fs::path(base_model), fs::path(adapter_dir) / base_model})
    if (fs::is_regular_file(candidate / "config.json")) return candidate.string();
  // A model id "org/name" in the hub cache: models--org--name/snapshots/<refs/main>.
  if (base_model.find("..") != std::string::npos || base_model.starts_with("/")) return "";
  std::vector<fs::path> caches;
  if (const char* cache = std::getenv("HF_HUB_CACHE"); cache && *cache) caches.emplace_back(cache);
  if (const char* home = std::getenv("HF_HOME"); home && *home) caches.push_back(fs::path(home) / "hub");
  if (const char* home = std::getenv("HOME"); home && *home) caches.push_back(fs::path(home) / ".cache/huggingface/hub");
  std::string folder = "models--" + base_model;
  for (size_t slash = folder.find('/'); slash != std::string::npos; slash = folder.find('/')) folder.replace(slash, 1, "--");
  for (const auto& cache : caches) {
    const fs::path model = cache / folder;
    std::ifstream ref(model / "refs" / "main");
    std::string commit;
    if (!(ref >> commit) || commit.find('/') != std::string::npos) continue;
    if (fs::is_regular_file(model / "snapshots" / commit / "config.json")) return (model / "snapshots" / commit).string();
  }
  return "";
}

}  // namespace segtrain::models
