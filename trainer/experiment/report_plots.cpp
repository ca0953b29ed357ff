// An experiment's plots (experiment/report_plots.h): a row's mean loss by position with
// the spread over its windows, and perplexity by training budget with its intervals.
#include "trainer/experiment/report_plots.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <tuple>
#include <vector>

#include "common/atomic_write.h"
#include "trainer/eval/plot.h"
#include "trainer/experiment/report_rows.h"
#include "trainer/experiment/report_tables.h"

namespace segtrain::trainer {
namespace {

namespace fs = std::filesystem;

// The spread over windows of a per-position curve in buckets of `bucket` predictions
// (a multiple of kLossBlock): each window's mean loss in the bucket, lowest and highest,
// at the bucket's mean position (as bucketed() places its means). Empty without windows.
std::vector<std::tuple<double, double, double>> window_band(const LengthResult& r, int64_t bucket) {
  std::vector<std::tuple<double, double, double>> band;
  if (r.windows.size() < 2 || bucket % kLossBlock != 0) return band;
  const int64_t predictions = r.length - 1, per_bucket = bucket / kLossBlock;
  for (int64_t first = 0; first < predictions; first += bucket) {
    const int64_t last = std::min(predictions, first + bucket);
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& w : r.windows) {
      double sum = 0;
      for (int64_t b = first / kLossBlock; b < first / kLossBlock + per_bucket && b < static_cast<int64_t>(w.block_nll.size()); ++b)
        sum += w.block_nll[b];
      const double mean = sum / static_cast<double>(last - first);
      lo = std::min(lo, mean), hi = std::max(hi, mean);
    }
    band.emplace_back(static_cast<double>(first + last + 1) / 2.0, lo, hi);
  }
  return band;
}

// The mean curve of a row whose per-position losses were not kept (imported): its
// blocks' means (position_losses), without the faint per-position line. The same as
// the kept curve's where a bucket holds whole blocks (L_e a multiple of 4,096).
PlotSeries block_curve(const std::string& label, const LengthResult& r, int64_t bucket) {
  const std::vector<double> curve = position_losses(r);
  const auto size = static_cast<size_t>(std::max<int64_t>(1, bucket));
  return bucketed(label, curve, static_cast<int>((curve.size() + size - 1) / size));
}

// A row's mean curve at its longest length: the kept per-position curve, or its blocks'.
PlotSeries row_curve(const std::string& label, const LengthResult& r, int64_t bucket) {
  return r.position_loss.empty() ? block_curve(label, r, bucket) : position_curve(label, r.position_loss, bucket);
}

// Perplexity by training budget: one line per method and length, its 95% interval as a
// band; x is log2 of the budget over the smallest (equal steps for 4x budgets), marked.
std::string budget_plot(const ExperimentConfig& x, const CorpusResults& c, int64_t factor) {
  const auto curves = budget_curves(c, factor);
  int64_t smallest = INT64_MAX;
  for (const auto& [method, rows] : curves)
    for (const RowResult* row : rows) smallest = std::min(smallest, row->train_tokens);
  auto at = [&](int64_t tokens) { return 1.0 + std::log2(static_cast<double>(tokens) / static_cast<double>(smallest)); };
  PlotOptions options;
  options.title = x.name + " / " + c.name + ": perplexity by training budget";
  options.x_label = "training tokens (log scale)";
  options.y_label = "perplexity";
  options.band_note = "band: 95% interval";
  std::vector<PlotSeries> series;
  std::vector<int64_t> budgets;
  for (const auto& [method, rows] : curves)
    for (int64_t l : curve_lengths(c, factor)) {
      PlotSeries s{method + " at " + std::to_string(l), {}, {}, {}};
      for (const RowResult* row : rows) {
        const LossUnits units = units_at(*row, l);
        if (units.nll.empty()) continue;
        const Interval i = perplexity_interval(units);
        s.points.emplace_back(at(row->train_tokens), i.estimate);
        s.band.emplace_back(at(row->train_tokens), i.lo, i.hi);
        if (std::find(budgets.begin(), budgets.end(), row->train_tokens) == budgets.end())
          budgets.push_back(row->train_tokens);
      }
      series.push_back(std::move(s));
    }
  for (int64_t b : budgets) options.markers.push_back({at(b), thousands(b)});
  return line_plot_svg(options, series);
}

}  // namespace

std::string budget_plot_name(const CorpusResults& c, int64_t factor) {
  return c.name + "-x" + std::to_string(factor) + "-budget.svg";
}

std::string plot_name(const CorpusResults& c, int64_t factor) {
  return c.name + "-x" + std::to_string(factor) + ".svg";
}

std::string ring_plot_name(const CorpusResults& c, int64_t factor) {
  return c.name + "-x" + std::to_string(factor) + "-ring.svg";
}

void write_plots(const ExperimentConfig& x, const CorpusResults& c, const fs::path& dir) {
  fs::create_directories(dir);
  for (int64_t f : c.factors) {
    PlotOptions options;
    options.title = x.name + " / " + c.name + ": mean loss by position at L_e = " + std::to_string(f * c.train_length);
    options.x_label = "position (tokens of context before the predicted token)";
    options.markers.push_back({static_cast<double>(c.train_length), "L_t = " + std::to_string(c.train_length)});
    const int64_t bucket = position_bucket(f * c.train_length);
    options.solid_note = "solid: mean of " + std::to_string(bucket) + " positions";
    options.band_note = "band: lowest to highest window";
    std::vector<PlotSeries> series;
    for (const auto& row : c.rows)
      if (row.factor == f && compared_row(row) && !row.results.empty()) {
        series.push_back(row_curve(row.label, row.results.back(), bucket));
        series.back().band = window_band(row.results.back(), bucket);
      }
    write_file_atomic(dir / plot_name(c, f), line_plot_svg(options, series));
    if (!budget_curves(c, f).empty())
      write_file_atomic(dir / budget_plot_name(c, f), budget_plot(x, c, f));
    const auto pairs = ring_pairs(c, f);
    if (pairs.empty()) continue;
    series.clear();
    for (const auto& [uniform, ring] : pairs)
      for (const auto& label : {uniform, ring})
        series.push_back(row_curve(label, row_at(c, label, f)->results.back(), bucket));
    options.title = x.name + " / " + c.name + ": chunk vs chunk-ring, loss by position at L_e = " +
                    std::to_string(f * c.train_length);
    write_file_atomic(dir / ring_plot_name(c, f), line_plot_svg(options, series));
  }
}

}  // namespace segtrain::trainer
