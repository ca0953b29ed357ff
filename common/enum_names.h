#pragma once
// Enums that appear in configs and files carry a name table next to their
// definition; these helpers turn names into values and back.
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace segtrain {

template <class E>
using EnumName = std::pair<const char*, E>;

template <class E, std::size_t N>
const char* enum_name(const EnumName<E> (&table)[N], E value) {
  for (const auto& [name, v] : table)
    if (v == value) return name;
  return "?";
}

template <class E, std::size_t N>
std::optional<E> enum_from_name(const EnumName<E> (&table)[N], const std::string& name) {
  for (const auto& [n, v] : table)
    if (name == n) return v;
  return std::nullopt;
}

// "a|b|c", for messages and docs.
template <class E, std::size_t N>
std::string enum_choices(const EnumName<E> (&table)[N]) {
  std::string out;
  for (const auto& entry : table) {
    if (!out.empty()) out += "|";
    out += entry.first;
  }
  return out;
}

}  // namespace segtrain
