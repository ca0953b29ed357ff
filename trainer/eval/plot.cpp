#include "trainer/eval/plot.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

namespace segtrain::trainer {

namespace {

std::string escape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else if (ch == '&') out += "&amp;";
    else if (ch == '\'') out += "&apos;";
    else out += ch;
  }
  return out;
}

}  // namespace

std::string line_plot_svg(const std::string& title, const std::string& x_label, const std::vector<PlotSeries>& series) {
  const double width = 760, height = 400, left = 60, right = 170, top = 30, bottom = 40;
  double x_max = 1, lo = std::numeric_limits<double>::max(), hi = std::numeric_limits<double>::lowest();
  for (const auto& s : series)
    for (const auto& [x, y] : s.points)
      if (std::isfinite(y)) x_max = std::max(x_max, x), lo = std::min(lo, y), hi = std::max(hi, y);
  if (hi < lo) lo = 0, hi = 1;
  if (hi <= lo) hi = lo + 1;
  auto px = [&](double x) { return left + (width - left - right) * x / x_max; };
  auto py = [&](double y) { return top + (height - top - bottom) * (1 - (y - lo) / (hi - lo)); };
  const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                           "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aec7e8"};
  std::ostringstream svg;
  svg << std::fixed << std::setprecision(1);
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
      << "' font-family='sans-serif' font-size='12'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n"
      << "<text x='" << left << "' y='18'>" << escape(title) << "</text>\n"
      << "<line x1='" << left << "' y1='" << height - bottom << "' x2='" << width - right << "' y2='"
      << height - bottom << "' stroke='black'/>\n"
      << "<line x1='" << left << "' y1='" << top << "' x2='" << left << "' y2='" << height - bottom
      << "' stroke='black'/>\n"
      << "<text x='" << (left + width - right) / 2 << "' y='" << height - 8 << "'>" << escape(x_label) << "</text>\n"
      << std::setprecision(2) << "<text x='4' y='" << top + 10 << "'>" << hi << "</text>\n"
      << "<text x='4' y='" << height - bottom << "'>" << lo << "</text>\n"
      << std::setprecision(0) << "<text x='" << width - right - 30 << "' y='" << height - bottom + 16 << "'>"
      << x_max << "</text>\n"
      << std::setprecision(1);
  for (size_t i = 0; i < series.size(); ++i) {
    const char* colour = colours[i % (sizeof(colours) / sizeof(colours[0]))];
    svg << "<polyline fill='none' stroke-width='1.5' stroke='" << colour << "' points='";
    for (const auto& [x, y] : series[i].points)
      if (std::isfinite(y)) svg << px(x) << "," << py(y) << " ";
    svg << "'/>\n<text x='" << width - right + 10 << "' y='" << top + 14 * (i + 1) << "' fill='" << colour << "'>"
        << escape(series[i].label) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

PlotSeries bucketed(const std::string& label, const std::vector<double>& values, int buckets) {
  PlotSeries s{label, {}};
  const size_t n = values.size();
  const size_t size = std::max<size_t>(1, (n + static_cast<size_t>(buckets) - 1) / static_cast<size_t>(buckets));
  for (size_t begin = 0; begin < n; begin += size) {
    double sum = 0, positions = 0;
    size_t count = 0;
    for (size_t p = begin; p < std::min(n, begin + size); ++p)
      if (std::isfinite(values[p])) sum += values[p], positions += static_cast<double>(p + 1), ++count;
    if (count > 0) s.points.emplace_back(positions / static_cast<double>(count), sum / static_cast<double>(count));
  }
  return s;
}

}  // namespace segtrain::trainer
