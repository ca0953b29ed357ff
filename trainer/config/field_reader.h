#pragma once
// Reads YAML mappings through a table of Fields (field.h): each key at most once,
// unknown keys with the nearest valid one, every problem collected with its
// file:line:col so one pass reports all of them. The run config (parser.cpp) and
// the experiment file (trainer/experiment/schema.cpp) read through it.
#include <map>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "trainer/config/config.h"
#include "trainer/config/field.h"

namespace segtrain::trainer::schema {

// A key table with the sections (dotted prefixes) its paths imply.
class FieldTable {
 public:
  explicit FieldTable(std::vector<Field> fields);
  Field* field(const std::string& path);
  bool is_section(const std::string& path) const { return sections_.count(path) > 0; }
  std::vector<std::string> children(const std::string& section) const;
  // "unknown key 'model.lr'; did you mean 'train.lr'?", or with the note given for it.
  std::string unknown_key_message(const std::string& path) const;
  // What to say of a key this table does not have but a user may write ("experiment"
  // in a run config names the command that reads it).
  void note(const std::string& path, std::string text) { notes_[path] = std::move(text); }
  std::vector<Field>& fields() { return fields_; }

 private:
  // The closest valid key: a near spelling of the whole path, or the same leaf
  // name in another section ("model.lr" -> "train.lr"); empty when none is near.
  std::string suggest(const std::string& unknown) const;
  std::vector<Field> fields_;
  std::set<std::string> sections_;
  std::map<std::string, std::string> notes_;
};

class FieldReader {
 public:
  FieldReader(std::string source, std::vector<std::string>& errors, Origins& origins)
      : source_(std::move(source)), errors_(errors), origins_(origins) {}

  // Reads `map`'s keys, whose paths are `prefix`.key, into the table's fields and
  // records where each was written (origins[path], sections included). Top-level
  // keys named in `other_sections` belong to another reader and are skipped.
  void read(const YAML::Node& map, const std::string& prefix, FieldTable& table,
            const std::vector<std::string>& other_sections = {});

  // "file.yaml:12:5: <message>", collected with the rest.
  void fail(const YAML::Mark& mark, const std::string& message);
  // Where `path` was written ("file.yaml:12:5"), or `fallback`'s place when it was not.
  std::string where(const std::string& path, const YAML::Mark& fallback = YAML::Mark::null_mark()) const;
  bool given(const std::string& path) const { return origins_.count(path) > 0; }
  const std::string& source() const { return source_; }
  std::vector<std::string>& errors() { return errors_; }

 private:
  std::string source_;
  std::vector<std::string>& errors_;
  Origins& origins_;
};

}  // namespace segtrain::trainer::schema
