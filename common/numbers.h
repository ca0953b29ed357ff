#pragma once
// Small numeric predicates shared by the config validator and the samplers, so
// "is alpha * L_t a whole number of tokens" has one answer everywhere.
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

namespace segtrain {

// True when x is a whole number up to floating-point noise (0.25 * 128 = 32).
inline bool is_integer(double x) { return std::fabs(x - std::round(x)) < 1e-9; }

// The shortest text that reads back as `value` ("0.25", "1e-05"), as messages quote config values.
inline std::string format_double(double value) {
  char buffer[64];
  auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return ec == std::errc() ? std::string(buffer, ptr) : std::to_string(value);
}

// A size as transformers' max_shard_size spells it: "5GB" (10^9), "500MB", "40KB",
// "2GiB" (2^30), "512MiB", "64KiB", or plain bytes. nullopt when it is none of these
// or not positive.
inline std::optional<int64_t> parse_byte_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 15) return std::nullopt;
  const int64_t number = std::stoll(text.substr(0, digits));
  std::string unit;
  for (char ch : text.substr(digits)) unit += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  int64_t scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KB") scale = 1'000;
  else if (unit == "MB") scale = 1'000'000;
  else if (unit == "GB") scale = 1'000'000'000;
  else if (unit == "KIB") scale = int64_t{1} << 10;
  else if (unit == "MIB") scale = int64_t{1} << 20;
  else if (unit == "GIB") scale = int64_t{1} << 30;
  if (scale == 0 || number <= 0 || number > INT64_MAX / scale) return std::nullopt;
  return number * scale;
}

}  // namespace segtrain
