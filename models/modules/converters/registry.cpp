// The registry of model converters: each one segtrain knows, in the order a run applies
// them, and converters.json read back through it. A converter lives in its own files and
// adds one line here.
#include <filesystem>
#include <set>
#include <string>

#include "common/error.h"
#include "common/file_io.h"
#include "models/modules/converters/converter.h"
#include "models/modules/converters/freeze.h"
#include "models/modules/converters/lora.h"

namespace segtrain::models {

namespace fs = std::filesystem;
using nlohmann::json;

const std::vector<ConverterKind>& converter_kinds() {
  // LoRA first: it freezes the base, and train.freeze may then freeze some of what it trains.
  static const std::vector<ConverterKind> kinds = {lora_converter(), freeze_converter()};
  return kinds;
}

Converters make_converters(const ConverterSettings& settings) {
  Converters converters;
  for (const auto& kind : converter_kinds())
    if (auto converter = kind.from_settings(settings)) converters.push_back(std::move(converter));
  return converters;
}

Converters converters_from_json(const std::string& text, const std::string& source) {
  const std::string expected = source + ": expected {\"converters\": [{\"name\": \"freeze\", ...}, ...]}";
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(expected + ", not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("converters") || !j["converters"].is_array()) throw InputError(expected);
  std::set<std::string> names;  // said in alphabetical order
  for (const auto& kind : converter_kinds()) names.insert(kind.name);
  std::string known;
  for (const auto& name : names) known += (known.empty() ? "" : ", ") + name;
  Converters converters;
  for (const json& entry : j["converters"]) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string()) throw InputError(expected);
    const auto name = entry["name"].get<std::string>();
    const ConverterKind* kind = nullptr;
    for (const auto& k : converter_kinds())
      if (k.name == name) kind = &k;
    if (!kind) throw InputError(source + ": unknown converter '" + name + "' (this segtrain knows: " + known + ")");
    converters.push_back(kind->from_json(entry, source));
  }
  return converters;
}

Converters read_converters(const std::string& dir) {
  const fs::path path = fs::path(dir) / kConvertersFile;
  if (!fs::exists(path)) return {};
  return converters_from_json(read_file(path, "model converters"), path.string());
}

}  // namespace segtrain::models
