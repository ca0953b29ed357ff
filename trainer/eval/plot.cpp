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

double tick_step(double lo, double hi, int target) {
  const double raw = (hi - lo) / std::max(1, target);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

// A tick label with as many decimals as the step needs (0.25 -> 2, 0.2 -> 1, 5 -> 0).
std::string tick_text(double v, double step) {
  int decimals = 0;
  for (double scaled = step; decimals < 6 && std::abs(scaled - std::round(scaled)) > 1e-6 * std::max(1.0, scaled);
       scaled *= 10)
    ++decimals;
  std::ostringstream o;
  o << std::fixed << std::setprecision(decimals) << (std::abs(v) < step * 1e-9 ? 0.0 : v);
  return o.str();
}

// The q-quantile of the finite values.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

// A raw curve of many more points than the plot has pixel columns (a 32k-position
// loss curve on 558 columns) drawn as each column's lowest and highest point, in
// position order: the same picture in a few thousand points, not a file of megabytes.
std::vector<std::pair<double, double>> column_envelope(const std::vector<std::pair<double, double>>& points,
                                                       double x_lo, double x_hi, int columns) {
  if (static_cast<int64_t>(points.size()) <= 4 * int64_t{columns} || !(x_hi > x_lo)) return points;
  std::vector<std::pair<double, double>> out;
  size_t i = 0;
  while (i < points.size()) {
    const auto column = [&](double x) {
      return std::clamp(static_cast<int>((x - x_lo) / (x_hi - x_lo) * columns), 0, columns - 1);
    };
    const int c = column(points[i].first);
    size_t lo = points.size(), hi = points.size();
    for (; i < points.size() && column(points[i].first) == c; ++i) {
      if (!std::isfinite(points[i].second)) continue;
      if (lo == points.size() || points[i].second < points[lo].second) lo = i;
      if (hi == points.size() || points[i].second > points[hi].second) hi = i;
    }
    if (lo == points.size()) continue;
    out.push_back(points[std::min(lo, hi)]);
    if (lo != hi) out.push_back(points[std::max(lo, hi)]);
  }
  return out;
}

// One colour per series, in order (a cycle of 12).
const char* colour(size_t i) {
  static const char* const colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                        "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aec7e8"};
  return colours[i % (sizeof(colours) / sizeof(colours[0]))];
}

// The legend at (lx, top): a line and label per series, then notes on what faint curves and bands are.
void legend(std::ostringstream& svg, const PlotOptions& options, const std::vector<PlotSeries>& series, double lx,
            double top) {
  for (size_t i = 0; i < series.size(); ++i) {
    const double ly = top + 8 + 20 * static_cast<double>(i);
    svg << "<line x1='" << lx << "' y1='" << ly << "' x2='" << lx + 22 << "' y2='" << ly << "' stroke-width='3' stroke='"
        << colour(i) << "'/>\n<text x='" << lx + 28 << "' y='" << ly + 4 << "'>" << escape(series[i].label)
        << "</text>\n";
  }
  const bool any_raw = std::any_of(series.begin(), series.end(), [](const auto& s) { return !s.raw.empty(); });
  const bool any_band = std::any_of(series.begin(), series.end(), [](const auto& s) { return !s.band.empty(); });
  double note_y = top + 8 + 20 * static_cast<double>(series.size()) + 10;
  auto note = [&](const std::string& text) {
    svg << "<text x='" << lx << "' y='" << note_y << "' fill='#666' font-size='11'>" << escape(text) << "</text>\n";
    note_y += 14;
  };
  if (any_raw) note("faint: every position"), note(options.solid_note);
  if (any_band && !options.band_note.empty()) note(options.band_note);
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double step = tick_step(lo, hi, target);
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) ticks.push_back(t);
  return ticks;
}

std::string line_plot_svg(const PlotOptions& options, const std::vector<PlotSeries>& series) {
  const double width = 820, height = 440, left = 72, right = 190, top = 40, bottom = 56;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  // Ranges: x from 0 to the largest x; y over the solid curves and the bulk of
  // the raw ones (2nd to 98th percentile), so one outlying raw position (the
  // first tokens' loss) does not flatten every curve; raw curves are clipped.
  double x_max = 1, lo = std::numeric_limits<double>::max(), hi = std::numeric_limits<double>::lowest();
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points)
      if (std::isfinite(y)) x_max = std::max(x_max, x), lo = std::min(lo, y), hi = std::max(hi, y);
    std::vector<double> raw;
    for (const auto& [x, y] : s.raw)
      if (std::isfinite(y)) x_max = std::max(x_max, x), raw.push_back(y);
    if (!raw.empty()) lo = std::min(lo, quantile(raw, 0.02)), hi = std::max(hi, quantile(raw, 0.98));
    for (const auto& [x, b_lo, b_hi] : s.band)
      if (std::isfinite(b_lo) && std::isfinite(b_hi)) x_max = std::max(x_max, x), lo = std::min(lo, b_lo), hi = std::max(hi, b_hi);
  }
  if (hi < lo) lo = 0, hi = 1;
  if (hi - lo < 1e-9) lo -= 0.5, hi += 0.5;
  const double y_step = tick_step(lo, hi, 6);
  lo = std::floor(lo / y_step) * y_step;
  hi = std::ceil(hi / y_step) * y_step;
  const double x_step = tick_step(0, x_max, 8);
  const double x_hi = x_max;  // the data's end, not the next round tick: the last positions matter
  auto px = [&](double x) { return left + plot_w * x / x_hi; };
  auto py = [&](double y) { return top + plot_h * (1 - (y - lo) / (hi - lo)); };

  std::ostringstream svg;
  svg << std::fixed << std::setprecision(1);
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
      << "' font-family='sans-serif' font-size='12'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n"
      << "<defs><clipPath id='plot-area'><rect x='" << left << "' y='" << top << "' width='" << plot_w
      << "' height='" << plot_h << "'/></clipPath></defs>\n"
      << "<text x='" << left << "' y='22' font-size='14' font-weight='bold'>" << escape(options.title) << "</text>\n";
  // Gridlines and ticks.
  for (double t : nice_ticks(0, x_hi, 8)) {
    svg << "<line x1='" << px(t) << "' y1='" << top << "' x2='" << px(t) << "' y2='" << top + plot_h
        << "' stroke='#e3e3e3'/>\n<line x1='" << px(t) << "' y1='" << top + plot_h << "' x2='" << px(t) << "' y2='"
        << top + plot_h + 5 << "' stroke='black'/>\n<text x='" << px(t) << "' y='" << top + plot_h + 18
        << "' text-anchor='middle'>" << tick_text(t, x_step) << "</text>\n";
  }
  for (double t : nice_ticks(lo, hi, 6)) {
    svg << "<line x1='" << left << "' y1='" << py(t) << "' x2='" << left + plot_w << "' y2='" << py(t)
        << "' stroke='#e3e3e3'/>\n<line x1='" << left - 5 << "' y1='" << py(t) << "' x2='" << left << "' y2='" << py(t)
        << "' stroke='black'/>\n<text x='" << left - 8 << "' y='" << py(t) + 4 << "' text-anchor='end'>"
        << tick_text(t, y_step) << "</text>\n";
  }
  svg << "<rect x='" << left << "' y='" << top << "' width='" << plot_w << "' height='" << plot_h
      << "' fill='none' stroke='black'/>\n"
      << "<text x='" << left + plot_w / 2 << "' y='" << height - 12 << "' text-anchor='middle'>"
      << escape(options.x_label) << "</text>\n"
      << "<text transform='translate(18," << top + plot_h / 2 << ") rotate(-90)' text-anchor='middle'>"
      << escape(options.y_label) << "</text>\n";
  // Raw curves first (faint, fainter when there are many), then the solid ones on top.
  const double raw_opacity = series.size() <= 4 ? 0.3 : 0.15;
  for (size_t i = 0; i < series.size(); ++i) {
    if (series[i].raw.empty()) continue;
    svg << "<polyline clip-path='url(#plot-area)' fill='none' stroke-width='0.8' stroke-opacity='"
        << std::setprecision(2) << raw_opacity << std::setprecision(1) << "' stroke='" << colour(i)
        << "' points='";
    for (const auto& [x, y] : column_envelope(series[i].raw, 0, x_hi, static_cast<int>(plot_w)))
      if (std::isfinite(y)) svg << px(x) << "," << py(y) << " ";
    svg << "'/>\n";
  }
  for (size_t i = 0; i < series.size(); ++i) {
    if (series[i].band.empty()) continue;
    svg << "<polygon clip-path='url(#plot-area)' stroke='none' fill-opacity='0.18' fill='" << colour(i)
        << "' points='";
    for (const auto& [x, b_lo, b_hi] : series[i].band)
      if (std::isfinite(b_lo)) svg << px(x) << "," << py(b_lo) << " ";
    for (auto it = series[i].band.rbegin(); it != series[i].band.rend(); ++it)
      if (std::isfinite(std::get<2>(*it))) svg << px(std::get<0>(*it)) << "," << py(std::get<2>(*it)) << " ";
    svg << "'/>\n";
  }
  for (size_t i = 0; i < series.size(); ++i) {
    svg << "<polyline clip-path='url(#plot-area)' fill='none' stroke-width='2' stroke='" << colour(i)
        << "' points='";
    for (const auto& [x, y] : series[i].points)
      if (std::isfinite(y)) svg << px(x) << "," << py(y) << " ";
    svg << "'/>\n";
  }
  for (const auto& m : options.markers) {
    if (!(m.x >= 0 && m.x <= x_hi)) continue;
    svg << "<line x1='" << px(m.x) << "' y1='" << top << "' x2='" << px(m.x) << "' y2='" << top + plot_h
        << "' stroke='#444' stroke-width='1.2' stroke-dasharray='6,4'/>\n<text x='" << px(m.x) + 4 << "' y='"
        << top + 14 << "' fill='#444'>" << escape(m.label) << "</text>\n";
  }
  legend(svg, options, series, left + plot_w + 16, top);
  svg << "</svg>\n";
  return svg.str();
}

PlotSeries bucketed(const std::string& label, const std::vector<double>& values, int buckets) {
  PlotSeries s{label, {}, {}, {}};
  if (buckets <= 0 || values.empty()) return s;  // a row recorded without its curve: nothing to draw
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

PlotSeries position_curve(const std::string& label, const std::vector<double>& values, int64_t bucket) {
  const auto size = static_cast<size_t>(std::max<int64_t>(1, bucket));
  PlotSeries s = bucketed(label, values, static_cast<int>((values.size() + size - 1) / size));
  for (size_t p = 0; p < values.size(); ++p) s.raw.emplace_back(static_cast<double>(p + 1), values[p]);
  return s;
}

int64_t position_bucket(int64_t longest) { return std::max<int64_t>(1, (longest + 31) / 32); }

}  // namespace segtrain::trainer
