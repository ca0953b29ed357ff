#pragma once
// A run's data sources: the one store of data.store, or the stores of data.mixture, each
// with its weight and how its samples are cut (its own L_e and sampler, else the data
// section's). The rules a mixture must keep live here, beside the sampler's
// (data/sampler_rules.h): the validator reports them at the file's line and the loader
// refuses them as a last guard. Plain C++, so the config library calls it without LibTorch.
#include <cstddef>
#include <string>
#include <vector>

#include "common/config_problem.h"
#include "data/config.h"

namespace segtrain::data {

// One source resolved: its name, weight, and a data section of its own (its store, L_t, its
// L_e and sampler) that windows, samplers and their rules take as they are.
struct SourceSetting {
  std::string name;
  double weight = 1;
  DataConfig data;
};

// The sources in their order; one source named after data.store's folder (weight 1) when
// data.mixture is empty.
std::vector<SourceSetting> data_sources(const DataConfig& config);

// "data.mixture[1]" for source 1 of a mixture, "data" for the single store: the prefix its
// keys are named by in messages.
std::string source_key(const DataConfig& config, std::size_t source);

// Weights finite and >= 0 with a finite positive sum, the first one > 0 (it sets the budget);
// names unique; every source's sampler rules with L_t and its L_e (data/sampler_rules.h),
// named by its own keys, and its L_e at most data.extended_length (the run's target); every
// source's samples as long as the first's (a batch holds one length). Empty when they hold together.
std::vector<ConfigProblem> mixture_problems(const DataConfig& config);

}  // namespace segtrain::data
