#include "trainer/config/field_reader.h"

#include <algorithm>

#include "common/strings.h"
#include "trainer/config/yaml_text.h"

namespace segtrain::trainer::schema {
namespace {

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

}  // namespace

FieldTable::FieldTable(std::vector<Field> fields) : fields_(std::move(fields)) {
  for (auto& f : fields_)
    for (auto dot = f.path.find('.'); dot != std::string::npos; dot = f.path.find('.', dot + 1))
      sections_.insert(f.path.substr(0, dot));
}

Field* FieldTable::field(const std::string& path) {
  for (auto& f : fields_)
    if (f.path == path) return &f;
  return nullptr;
}

std::vector<std::string> FieldTable::children(const std::string& section) const {
  std::vector<std::string> out;
  for (const auto& f : fields_)
    if (f.path.rfind(section + ".", 0) == 0) out.push_back(f.path);
  return out;
}

std::string FieldTable::suggest(const std::string& unknown) const {
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

std::string FieldTable::unknown_key_message(const std::string& path) const {
  std::string message = "unknown key '" + path + "'";
  if (auto it = notes_.find(path); it != notes_.end()) return message + ": " + it->second;
  auto suggestion = suggest(path);
  if (!suggestion.empty()) message += "; did you mean '" + suggestion + "'?";
  return message;
}

void FieldReader::read(const YAML::Node& map, const std::string& prefix, FieldTable& table,
                       const std::vector<std::string>& other_sections) {
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    // Copies: yaml-cpp's operator-> returns a temporary proxy, so a reference
    // to it->first would dangle after this statement (ASan: stack-use-after-scope).
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    const std::string at = location(source_, key.Mark());
    if (!key.IsScalar()) {
      errors_.push_back(at + ": keys must be plain names" + (prefix.empty() ? "" : " in '" + prefix + "'"));
      continue;
    }
    const std::string path = prefix.empty() ? key.Scalar() : prefix + "." + key.Scalar();
    if (prefix.empty() && std::find(other_sections.begin(), other_sections.end(), path) != other_sections.end())
      continue;
    if (!seen.insert(key.Scalar()).second) {
      errors_.push_back(at + ": duplicate key '" + path + "'");
      continue;
    }
    if (Field* field = table.field(path)) {
      try {
        field->parse(value);
        origins_[path] = at;
      } catch (const FieldError& e) {
        // Point at the offending value (or list item) when it has a place of its own.
        const YAML::Mark value_mark = !e.mark.is_null() ? e.mark : value.Mark();
        const std::string value_at = value_mark.is_null() || value.IsNull() ? at : location(source_, value_mark);
        errors_.push_back(value_at + ": " + path + ": " + e.what());
      }
    } else if (table.is_section(path)) {
      origins_[path] = at;
      if (value.IsMap()) read(value, path, table);
      else if (!value.IsNull())
        errors_.push_back(at + ": " + path + ": expected a mapping with keys " + join(table.children(path), ", ") +
                          "; got " + (value.IsSequence() ? "a list" : "'" + value.Scalar() + "'"));
    } else {
      errors_.push_back(at + ": " + table.unknown_key_message(path));
    }
  }
}

void FieldReader::fail(const YAML::Mark& mark, const std::string& message) {
  errors_.push_back(location(source_, mark) + ": " + message);
}

std::string FieldReader::where(const std::string& path, const YAML::Mark& fallback) const {
  auto it = origins_.find(path);
  return it != origins_.end() ? it->second : location(source_, fallback);
}

}  // namespace segtrain::trainer::schema
