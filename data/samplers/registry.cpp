// The samplers, in the order the docs list them and the report compares them. A new sampler
// is its file in data/samplers/ and its two lines here.
#include <algorithm>

#include "common/error.h"
#include "data/sampler_kind.h"

namespace segtrain::data {

extern const SamplerKind kTruncateSampler, kFullSampler, kChunkSampler, kPrefixSampler, kPoseSampler,
    kRandomPosSampler, kCreamSampler;

namespace {
const SamplerKind* const kSamplers[] = {&kTruncateSampler, &kFullSampler, &kChunkSampler,    &kPrefixSampler,
                                        &kPoseSampler,     &kRandomPosSampler, &kCreamSampler};
}  // namespace

std::span<const SamplerKind* const> samplers() { return kSamplers; }

const SamplerKind* find_sampler(std::string_view name) {
  for (const SamplerKind* kind : kSamplers)
    if (kind->name == name) return kind;
  return nullptr;
}

std::vector<std::string> sampler_names() {
  std::vector<std::string> names;
  for (const SamplerKind* kind : kSamplers) names.emplace_back(kind->name);
  return names;
}

std::string sampler_summaries() {
  std::string out;
  for (const SamplerKind* kind : kSamplers)
    out += (out.empty() ? "" : "; ") + std::string(kind->name) + ": " + std::string(kind->summary);
  return out;
}

const SamplerKind& sampler_kind(const SamplerConfig& sampler) {
  if (const SamplerKind* kind = find_sampler(sampler.method)) return *kind;
  std::string names;
  for (const auto& name : sampler_names()) names += (names.empty() ? "" : ", ") + name;
  throw InputError("data.sampler.method: '" + sampler.method + "' is no sampler; expected one of " + names);
}

}  // namespace segtrain::data
