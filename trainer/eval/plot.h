#pragma once
// Dependency-free SVG line plots of per-position loss curves, readable at a
// glance: axis ticks and gridlines, labelled axes, one colour per series with a
// legend, each series' raw curve faint under its smoothed curve, and marked
// x values (L_t) as dashed vertical lines. Not a plotting library.
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace segtrain::trainer {

struct PlotSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn solid; non-finite y values are skipped
  std::vector<std::pair<double, double>> raw;     // optional, drawn faint underneath in the same colour
  // Optional (x, lo, hi): a translucent band in the same colour (the spread over windows, an interval).
  std::vector<std::tuple<double, double, double>> band;
};

struct PlotMarker {
  double x = 0;
  std::string label;  // e.g. "L_t = 128"
};

struct PlotOptions {
  std::string title, x_label = "position", y_label = "mean loss (nats)";
  std::vector<PlotMarker> markers;  // dashed vertical lines
  std::string solid_note = "solid: bucket means";  // under the legend when a series has a raw curve
  std::string band_note;  // under the legend when a series has a band: what the band is
};

std::string line_plot_svg(const PlotOptions& options, const std::vector<PlotSeries>& series);

// Means of consecutive runs of about values.size() / buckets values, at their
// mean position: a readable curve from thousands of noisy per-position losses.
PlotSeries bucketed(const std::string& label, const std::vector<double>& values, int buckets);

// A per-position loss curve (values[p - 1] is the loss at position p): every
// position as the faint raw curve, the means of consecutive runs of `bucket`
// positions on top.
PlotSeries position_curve(const std::string& label, const std::vector<double>& values, int64_t bucket);

// Positions per bucket for curves up to `longest` positions: 32 buckets over the
// longest curve, so every curve of one plot is smoothed alike.
int64_t position_bucket(int64_t longest);

// Tick values for [lo, hi]: about `target` round steps (1, 2 or 5 times a power of ten).
std::vector<double> nice_ticks(double lo, double hi, int target);

}  // namespace segtrain::trainer
