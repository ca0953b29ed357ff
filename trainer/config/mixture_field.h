#pragma once
// data.mixture: the run config's one key whose value is a list of mappings, each source's
// keys read through a table of their own (the same builders as every key: field.h), so a
// source's unknown key, wrong type or range is refused at its line like any other key.
#include <string>
#include <vector>

#include "data/config.h"
#include "trainer/config/field.h"

namespace segtrain::trainer::schema {

// The keys of one source, as `prefix`.name, .store, .weight, .extended_length and
// .sampler.* (data/config.h, DataSource); `sampler` holds the sampler keys read.
std::vector<Field> source_fields(const std::string& prefix, data::DataSource& source, data::SamplerConfig& sampler);

// data.mixture: a non-empty list of source mappings, or [] (a single store).
Field mixture_list(std::vector<data::DataSource>& mixture);

}  // namespace segtrain::trainer::schema
