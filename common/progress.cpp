#include "common/progress.h"

#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <utility>

#include "common/log.h"

namespace segtrain {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds);
  std::ostringstream out;
  if (s >= 3600) out << s / 3600 << "h";
  out << (s % 3600) / 60 << "m" << std::setw(2) << std::setfill('0') << s % 60 << "s";
  return out.str();
}

namespace {

// SEGTRAIN_PROGRESS_SECONDS, else 10; a value that is no number >= 0 is ignored.
double progress_interval() {
  static const double seconds = [] {
    const char* text = std::getenv("SEGTRAIN_PROGRESS_SECONDS");
    char* end = nullptr;
    const double value = text && *text ? std::strtod(text, &end) : -1.0;
    return end && *end == '\0' && value >= 0 && std::isfinite(value) ? value : 10.0;
  }();
  return seconds;
}

}  // namespace

Progress::Progress(std::string what, int64_t total, std::string unit)
    : what_(std::move(what)), unit_(std::move(unit)), total_(total), every_(progress_interval()),
      start_(Clock::now()), last_(start_) {}

void Progress::update(int64_t done, const std::string& detail) {
  const Clock::time_point now = Clock::now();
  if (std::chrono::duration<double>(now - last_).count() < every_ || done <= 0) return;
  last_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double left = elapsed / static_cast<double>(done) * static_cast<double>(total_ - done);
  std::ostringstream line;
  if (done >= total_) {
    line << what_ << ": " << total_ << " " << unit_ << " in " << format_duration(elapsed);
  } else {
    line << what_ << ": " << done << "/" << total_ << " " << unit_ << " (" << std::fixed << std::setprecision(0)
         << 100.0 * static_cast<double>(done) / static_cast<double>(std::max<int64_t>(total_, 1)) << "%) in "
         << format_duration(elapsed) << ", about " << format_duration(left) << " left";
  }
  if (!detail.empty()) line << ", " << detail;
  log::info(line.str());
}

}  // namespace segtrain
