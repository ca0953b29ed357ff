#include "data/mixture.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>

#include "common/numbers.h"
#include "data/sampler_kind.h"
#include "data/sampler_rules.h"

namespace segtrain::data {

namespace {

// The store's folder name: "runs/stores/linux-c/" -> "linux-c".
std::string folder_name(const std::string& store) {
  std::filesystem::path path(store);
  if (path.filename().empty()) path = path.parent_path();
  const std::string name = path.filename().string();
  return name.empty() ? store : name;
}

// A sample's length under `c` (L_e for a whole-window sampler, else L_t); 0 when the method is unknown.
int64_t length_of(const DataConfig& c) {
  const SamplerKind* kind = find_sampler(c.sampler.method);
  return !kind ? 0 : kind->whole_window ? c.extended_length : c.train_length;
}

}  // namespace

std::vector<SourceSetting> data_sources(const DataConfig& config) {
  std::vector<SourceSetting> out;
  if (config.mixture.empty()) {
    DataConfig data = config;
    out.push_back({folder_name(config.store), 1.0, std::move(data)});
    return out;
  }
  for (const DataSource& s : config.mixture) {
    DataConfig data = config;
    data.mixture.clear();
    if (!s.store.empty()) data.store = s.store;
    if (s.extended_length) data.extended_length = *s.extended_length;
    if (s.sampler) data.sampler = *s.sampler;
    out.push_back({s.name.empty() ? folder_name(data.store) : s.name, s.weight, std::move(data)});
  }
  return out;
}

std::string source_key(const DataConfig& config, std::size_t source) {
  return config.mixture.empty() ? "data" : "data.mixture[" + std::to_string(source) + "]";
}

std::vector<ConfigProblem> mixture_problems(const DataConfig& config) {
  std::vector<ConfigProblem> out;
  if (config.mixture.empty()) return out;
  const auto sources = data_sources(config);
  // The data section's own problems are its keys' (the validator reports them): a source that
  // inherits them does not repeat them.
  std::vector<std::string> inherited;
  for (const auto& p : sampler_problems(config)) inherited.push_back(p.key + p.message);
  double sum = 0;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const std::string key = source_key(config, i);
    const double w = sources[i].weight;
    if (!std::isfinite(w) || w < 0)
      out.push_back({key + ".weight", format_double(w) + " is not a weight; expected a finite number >= 0"});
    else
      sum += w;
    if (sources[i].data.store.empty())
      out.push_back({key + ".store", "no store: give this source's store, or data.store for it to read"});
    for (std::size_t j = 0; j < i; ++j)
      if (sources[j].name == sources[i].name)
        out.push_back({key + ".name", "'" + sources[i].name + "' names " + source_key(config, j) +
                                          " too; give each source a name of its own"});
    // The sampler's rules with this source's L_e, named by its keys where it has its own.
    const DataSource& given = config.mixture[i];
    for (auto problem : sampler_problems(sources[i].data)) {
      if (std::find(inherited.begin(), inherited.end(), problem.key + problem.message) != inherited.end()) continue;
      const bool own = problem.key == "data.extended_length"         ? given.extended_length.has_value()
                       : problem.key.rfind("data.sampler", 0) == 0 ? given.sampler.has_value()
                                                                     : false;
      if (own) problem.key = key + problem.key.substr(4);  // "data.sampler.alpha" -> "data.mixture[1].sampler.alpha"
      else problem.message += " (with " + key + ")";
      out.push_back(std::move(problem));
    }
    // data.extended_length is the run's target: what evaluation, the extension factor and an export read.
    if (given.extended_length && *given.extended_length > config.extended_length)
      out.push_back({key + ".extended_length", std::to_string(*given.extended_length) + " is past data.extended_length = " +
                                                   std::to_string(config.extended_length) +
                                                   ", the run's target context; a source's L_e is at most it"});
    const int64_t first = length_of(sources[0].data), length = length_of(sources[i].data);
    if (i > 0 && first > 0 && length > 0 && length != first)
      out.push_back({key + ".sampler", "its samples are " + std::to_string(length) + " tokens long and " +
                                           source_key(config, 0) + "'s " + std::to_string(first) +
                                           "; every source of a batch must give samples of one length (a "
                                           "whole-window sampler gives L_e tokens, the others L_t)"});
  }
  if (!(sum > 0) || !std::isfinite(sum))
    out.push_back({"data.mixture", "the weights sum to " + format_double(sum) +
                                       "; expected a finite sum > 0 (at least one source with a weight > 0)"});
  else if (!(sources[0].weight > 0))
    out.push_back({source_key(config, 0) + ".weight", "the first source sets the run's budget (its compute-equivalent "
                                                      "rule) and must be drawn: give it a weight > 0"});
  return out;
}

}  // namespace segtrain::data
