#include "data/sample_dump.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/log.h"
#include "common/numbers.h"
#include "data/loader.h"
#include "data/sampler_kind.h"

namespace segtrain::data {

namespace {

namespace fs = std::filesystem;

// Samples one at a time on this thread: what `segtrain sample` shows is what the
// trainer's loader would draw for (seed, epoch, index).
LoaderOptions sample_options(const SampleDumpOptions& options) {
  LoaderOptions lo;
  lo.seed = options.seed;
  lo.split = options.split;
  lo.micro_batch_size = 1;
  lo.threads = 0;
  return lo;
}

}  // namespace

void write_sample_dump(const std::vector<LoaderSource>& sources, const DataConfig& config,
                       const SampleDumpOptions& options) {
  Loader loader(sources, config, sample_options(options));
  const char* split = options.split == Split::train ? "train" : "valid";
  for (const auto& stream : loader.streams())
    log::info("sample: ", config.mixture.empty() ? "" : stream->setting().name + ": ", split, " split: ",
              describe(stream->windows().stats, stream->setting().data.extended_length));
  // Lines in the stream's order: each the step plan's next draw (data/loader.h).
  auto line_of = [&](int64_t i) {
    const auto [s, source] = loader.stream_sample(i);
    nlohmann::ordered_json line = {{"doc", s.doc},         {"window_start", s.window_start},
                                   {"tokens", s.tokens},   {"offsets", s.offsets},
                                   {"positions", s.positions}, {"targets", s.targets},
                                   {"loss_mask", s.loss_mask}};
    if (!config.mixture.empty()) line["source"] = loader.streams()[source]->setting().name;
    return line.dump() + "\n";
  };
  // Streamed to the file: memory stays one line whatever --count is; the disk is asked first,
  // from the first line's size, so a count that cannot fit is refused before anything is written.
  const std::string first = line_of(0);
  const double expected = static_cast<double>(first.size()) * static_cast<double>(options.count);
  std::error_code ec;
  const fs::path folder = fs::absolute(options.out).parent_path();
  const auto space = fs::space(folder, ec);
  if (!ec && expected > 0.9 * static_cast<double>(space.available))
    throw InputError("--count " + std::to_string(options.count) + ": the samples would take about " +
                     format_double(std::round(expected / 1e7) / 100.0) + " GB (" + std::to_string(first.size()) +
                     " bytes a sample), and " + folder.string() + " has " +
                     format_double(std::round(static_cast<double>(space.available) / 1e7) / 100.0) +
                     " GB free; ask for fewer samples");
  AtomicFile file(options.out);
  file.write(first.data(), first.size());
  for (int64_t i = 1; i < options.count; ++i) {
    const std::string line = line_of(i);
    file.write(line.data(), line.size());
  }
  file.commit();
  log::info("sample: wrote ", options.count, " samples of ", loader.sample_length(), " tokens to ", options.out);
}

Coverage measure_coverage(const Loader& loader, int64_t extended_length, int64_t samples) {
  Coverage c;
  c.samples = samples;
  const auto le = static_cast<size_t>(extended_length);
  c.offsets.assign(le, 0);
  c.positions.assign(le, 0);
  const int64_t n = loader.samples_per_epoch();
  for (int64_t i = 0; i < samples; ++i) {
    const Sample s = loader.sample(i / n, i % n);
    // Offsets and positions never repeat within a sample (data/sampler.h), so
    // counting inputs counts samples.
    for (int32_t x : s.offsets) ++c.offsets[static_cast<size_t>(x)];
    for (int32_t x : s.positions) ++c.positions[static_cast<size_t>(x)];
  }
  return c;
}

namespace {

std::string percent(double fraction) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(fraction < 0.1 ? 2 : 1) << 100 * fraction << "%";
  return o.str();
}

std::string ratio(double r) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << r;
  return o.str();
}

void describe_counts(std::ostringstream& out, const std::string& what, const std::vector<int64_t>& counts,
                     int64_t samples) {
  const auto n = static_cast<int64_t>(counts.size());
  std::vector<double> f(counts.size());
  double sum = 0;
  for (size_t x = 0; x < counts.size(); ++x) sum += f[x] = static_cast<double>(counts[x]) / static_cast<double>(samples);
  const double mean = sum / static_cast<double>(n);
  const auto lo = std::min_element(f.begin(), f.end()) - f.begin();
  const auto hi = std::max_element(f.begin(), f.end()) - f.begin();
  out << what << "s covered (share of samples that feed each " << what << " 0.." << n - 1 << "):\n"
      << "  min " << percent(f[static_cast<size_t>(lo)]) << " (" << what << " " << lo << "), mean " << percent(mean)
      << ", max " << percent(f[static_cast<size_t>(hi)]) << " (" << what << " " << hi << "); min/mean "
      << ratio(mean > 0 ? f[static_cast<size_t>(lo)] / mean : 1) << ", max/mean "
      << ratio(mean > 0 ? f[static_cast<size_t>(hi)] / mean : 1) << "\n";
  std::vector<int64_t> order(counts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return f[static_cast<size_t>(a)] < f[static_cast<size_t>(b)]; });
  const int64_t shown = std::min<int64_t>(6, n);
  out << "  lowest: ";
  for (int64_t i = 0; i < shown; ++i)
    out << (i ? ", " : "") << order[static_cast<size_t>(i)] << " " << percent(f[static_cast<size_t>(order[static_cast<size_t>(i)])]);
  out << "\n  highest: ";
  for (int64_t i = 0; i < shown; ++i) {
    const int64_t x = order[static_cast<size_t>(n - 1 - i)];
    out << (i ? ", " : "") << x << " " << percent(f[static_cast<size_t>(x)]);
  }
  const int64_t buckets = std::min<int64_t>(16, n), size = (n + buckets - 1) / buckets;
  out << "\n  by " << what << " (mean of each bucket):";
  for (int64_t b = 0; b * size < n; ++b) {
    const int64_t first = b * size, last = std::min(n, first + size) - 1;
    double s = 0;
    for (int64_t x = first; x <= last; ++x) s += f[static_cast<size_t>(x)];
    out << (b % 4 == 0 ? "\n    " : "  ") << first << "-" << last << ": " << percent(s / static_cast<double>(last - first + 1));
  }
  out << "\n";
}

}  // namespace

std::string describe_coverage(const Coverage& c, const DataConfig& config) {
  std::ostringstream out;
  const auto& s = config.sampler;
  const SamplerKind& kind = sampler_kind(s);
  out << "coverage of " << c.samples << " samples: " << s.method << (kind.settings ? kind.settings(s) : "");
  out << ", L_t " << config.train_length << ", L_e " << config.extended_length << "\n";
  if (c.samples == 0) return out.str();
  describe_counts(out, "offset", c.offsets, c.samples);
  if (c.positions != c.offsets) describe_counts(out, "position", c.positions, c.samples);
  return out.str();
}

std::string sample_coverage(const std::vector<LoaderSource>& sources, const DataConfig& config,
                            const SampleDumpOptions& options) {
  const Loader mixed(sources, config, sample_options(options));  // refuses a source by its key
  std::string out;
  // Each source's sampler alone, with its stream's seed (a mixture's draws only share the samples out).
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const DataConfig& own = sources[i].setting.data;
    LoaderOptions lo = sample_options(options);
    lo.seed = source_seed(options.seed, i);
    Loader loader(*sources[i].store, own, lo);
    if (!config.mixture.empty()) out += source_key(config, i) + " (" + sources[i].setting.name + "): ";
    out += describe_coverage(measure_coverage(loader, own.extended_length, options.count), own);
  }
  return out;
}

}  // namespace segtrain::data
