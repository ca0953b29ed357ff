#include "models/spec/base_record.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "common/error.h"
#include "common/file_io.h"

namespace segtrain::models {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// What loading a model folder reads (models/modules/model_io.h, models/modules/hf.h).
bool read_by_loading(const std::string& name) {
  return name.ends_with(".safetensors") || name == "model.safetensors.index.json" || name == "config.json" ||
         name == "model_config.json" || name == "converters.json" || name == kBaseFile;
}

// A base's shards hash side by side: each thread reads its own file.
unsigned hashing_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

}  // namespace

int64_t BaseRecord::bytes() const {
  int64_t total = 0;
  for (const auto& f : files) total += f.bytes;
  return total;
}

BaseRecord record_base(const std::string& folder) {
  BaseRecord record{fs::absolute(folder).lexically_normal().string(), DigestKind::xxh3_64, {}};
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.is_regular_file() && read_by_loading(entry.path().filename().string())) paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  const auto digests = file_digests(paths, record.digest, hashing_threads());
  for (size_t i = 0; i < paths.size(); ++i)
    record.files.push_back(
        {paths[i].filename().string(), static_cast<int64_t>(fs::file_size(paths[i])), digests[i]});
  return record;
}

std::string base_record_to_json(const BaseRecord& record) {
  json files = json::array();
  for (const auto& f : record.files)
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {digest_name(record.digest), f.digest}});
  return json{{"folder", record.folder}, {"files", files}}.dump(2) + "\n";
}

BaseRecord base_record_from_json(const std::string& text, const std::string& source) {
  const std::string expected =
      source + ": expected {\"folder\": ..., \"files\": [{\"name\", \"bytes\", \"xxh3_64\" (or \"fnv1a64\")}, ...]}";
  BaseRecord record;
  try {
    const json j = json::parse(text);
    record.folder = j.at("folder").get<std::string>();
    const json& files = j.at("files");
    // One kind for the whole record: the first file's says which (earlier versions: FNV-1a).
    if (files.is_array() && !files.empty() && files[0].is_object() && files[0].contains("fnv1a64"))
      record.digest = DigestKind::fnv1a64;
    const char* key = digest_name(record.digest);
    for (const auto& f : files) {
      // nlohmann casts a float such as 1e300 to an integer, which is undefined (UBSan, fuzz_base_record).
      if (!f.at("bytes").is_number_integer())
        throw InputError(expected + " (\"bytes\" must be an integer, got " + f.at("bytes").dump() + ")");
      BaseFile file{f.at("name").get<std::string>(), f.at("bytes").get<int64_t>(), f.at(key).get<std::string>()};
      // A name is one file of the base's folder, never a path out of it.
      if (file.name.empty() || file.name == "." || file.name == ".." || file.name.find('/') != std::string::npos)
        throw InputError(expected + " (file name '" + file.name + "' is not a file of the base's folder)");
      record.files.push_back(std::move(file));
    }
  } catch (const json::exception& e) {
    throw InputError(expected + " (" + e.what() + ")");
  }
  return record;
}

std::optional<BaseRecord> read_base_record(const std::string& dir) {
  const fs::path path = fs::path(dir) / kBaseFile;
  if (!fs::exists(path)) return std::nullopt;
  const BaseRecord record = base_record_from_json(read_file(path, "base record"), path.string());
  const std::string what = path.string() + ": this model holds only what trained on its base " + record.folder;
  auto changed = [&](const BaseFile& f, const std::string& how) {
    return InputError(what + ", whose " + f.name + " changed since (" + how +
                      "); restore the base, or train again from this one");
  };
  std::vector<fs::path> files;
  for (const auto& f : record.files) {
    const fs::path file = fs::path(record.folder) / f.name;
    if (!fs::is_regular_file(file)) throw InputError(what + ", whose " + f.name + " is gone");
    if (const auto bytes = static_cast<int64_t>(fs::file_size(file)); bytes != f.bytes)
      throw changed(f, std::to_string(bytes) + " bytes, recorded " + std::to_string(f.bytes));
    files.push_back(file);
  }
  const auto digests = file_digests(files, record.digest, hashing_threads());
  for (size_t i = 0; i < files.size(); ++i)
    if (digests[i] != record.files[i].digest) throw changed(record.files[i], "another digest");
  return record;
}

}  // namespace segtrain::models
