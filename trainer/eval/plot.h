#pragma once
// Dependency-free SVG line plots (per-position loss curves). Good enough to read
// a trend in a browser or a README; not a plotting library.
#include <string>
#include <utility>
#include <vector>

namespace segtrain::trainer {

struct PlotSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y); non-finite y values are skipped
};

std::string line_plot_svg(const std::string& title, const std::string& x_label, const std::vector<PlotSeries>& series);

// Means of consecutive runs of about values.size() / buckets values, at their
// mean position: a readable curve from thousands of noisy per-position losses.
PlotSeries bucketed(const std::string& label, const std::vector<double>& values, int buckets);

}  // namespace segtrain::trainer
