#include "trainer/config/mixture_field.h"

#include <set>

#include "common/strings.h"
#include "data/sampler_kind.h"
#include "trainer/config/field_reader.h"

namespace segtrain::trainer::schema {

namespace {

const char* const kMixtureType = "a list of source mappings ({store, weight, name, extended_length, sampler})";

// Reads `map`'s keys into `table` (paths `prefix`.key, nested mappings as sections); the
// first problem as a FieldError at its place.
void read_map(const YAML::Node& map, const std::string& prefix, FieldTable& table, std::set<std::string>& given) {
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key = it->first;  // copies: yaml-cpp's proxies (field_reader.cpp)
    const YAML::Node value = it->second;
    if (!key.IsScalar()) throw FieldError("keys must be plain names in '" + prefix + "'", key.Mark());
    const std::string path = prefix + "." + key.Scalar();
    if (!seen.insert(key.Scalar()).second) throw FieldError("duplicate key '" + path + "'", key.Mark());
    if (Field* field = table.field(path)) {
      try {
        field->parse(value);
      } catch (const FieldError& e) {
        throw FieldError(path + ": " + e.what(), e.mark.is_null() ? value.Mark() : e.mark);
      }
      given.insert(path);
    } else if (table.is_section(path) && value.IsMap()) {
      read_map(value, path, table, given);
    } else if (table.is_section(path)) {
      throw FieldError(path + ": expected a mapping with keys " + join(table.children(path), ", "), value.Mark());
    } else {
      throw FieldError(table.unknown_key_message(path), key.Mark());
    }
  }
}

YAML::Node emit_source(const data::DataSource& source) {
  auto map = flow_map();
  if (!source.name.empty()) map["name"] = plain(source.name);
  if (!source.store.empty()) map["store"] = plain(source.store);
  map["weight"] = plain(format_double(source.weight));
  if (source.extended_length) map["extended_length"] = plain(std::to_string(*source.extended_length));
  if (source.sampler) {
    data::DataSource copy = source;  // the builders bind mutable references
    data::SamplerConfig sampler = *source.sampler;
    auto sampler_map = flow_map();
    for (auto& f : source_fields("s", copy, sampler))
      if (f.path.rfind("s.sampler.", 0) == 0) sampler_map[f.path.substr(10)] = f.emit();
    map["sampler"] = sampler_map;
  }
  return map;
}

}  // namespace

std::vector<Field> source_fields(const std::string& prefix, data::DataSource& s, data::SamplerConfig& sampler) {
  const std::string p = prefix + ".";
  return {
      text(p + "name", s.name, "Names the source in logs, metrics.jsonl and trainer_state.json; default: its store's folder name."),
      text(p + "store", s.store, "Its token store (`segtrain prepare`); default: data.store."),
      real(p + "weight", s.weight, at_least(0), kNoHigh,
           "Required: its expected share of the samples, weight / the sum of the weights (each sample's source "
           "is drawn with the run's seed)."),
      maybe_integer(p + "extended_length", s.extended_length, "auto", 1,
                    "Its L_e (windows cut from its documents); auto: data.extended_length. Short documents at "
                    "their own positions: extended_length = data.train_length with sampler.method truncate."),
      word_choice(p + "sampler.method", sampler.method, data::sampler_names(),
                  "Its sampler; giving any sampler key gives the source a sampler of its own (the keys it leaves "
                  "out take their defaults, not data.sampler's); none: data.sampler."),
      real(p + "sampler.alpha", sampler.alpha, kAnyReal, kNoHigh, "As data.sampler.alpha, for this source."),
      choice(p + "sampler.targets", sampler.targets, data::kTargetModes, "As data.sampler.targets, for this source."),
      choice(p + "sampler.placement", sampler.placement, data::kChunkPlacements,
             "As data.sampler.placement, for this source."),
      real(p + "sampler.sigma", sampler.sigma, kAnyReal, kNoHigh, "As data.sampler.sigma, for this source."),
  };
}

Field mixture_list(std::vector<data::DataSource>& mixture) {
  return {"data.mixture", kMixtureType,
          "Several stores in one run, each with its weight and, if it differs, its own L_e and sampler "
          "(data.mixture[].*): e.g. long documents cut by chunk-0.25 at weight 0.8 and short documents at their "
          "own positions at 0.2. Every source gives samples of L_t tokens (or all L_e, with full), each its own "
          "stream; the budget counts them all; metrics.jsonl gives each one's tokens. []: data.store alone.",
          [&mixture](const YAML::Node& n) {
            if (n.IsSequence() && n.size() == 0) return mixture.clear();
            std::vector<data::DataSource> out;
            for (const auto& item : sequence(n, kMixtureType)) {
              const std::string prefix = "data.mixture[" + std::to_string(out.size()) + "]";
              if (!item.IsMap()) throw FieldError(prefix + ": expected a mapping {store, weight, ...}", item.Mark());
              data::DataSource source;
              data::SamplerConfig sampler;
              FieldTable table(source_fields(prefix, source, sampler));
              std::set<std::string> given;
              read_map(item, prefix, table, given);
              if (!given.count(prefix + ".weight"))
                throw FieldError(prefix + ".weight: required (the source's share of the samples)", item.Mark());
              for (const auto& key : given)
                if (key.rfind(prefix + ".sampler.", 0) == 0) source.sampler = sampler;
              out.push_back(std::move(source));
            }
            mixture = std::move(out);
          },
          [&mixture] {
            auto list = flow_list();
            for (const auto& source : mixture) list.push_back(emit_source(source));
            return list;
          }};
}

}  // namespace segtrain::trainer::schema
