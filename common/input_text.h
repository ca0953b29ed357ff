#pragma once
// A value read from outside input as a message shows it: on one line (control bytes escaped as
// \xNN), at most about 80 bytes, not cut inside a UTF-8 character. A file's value may be anything;
// the one line naming it must stay one readable line.
#include <cstdio>
#include <string>

namespace segtrain {

inline std::string shown_input(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (out.size() >= 80 && (static_cast<unsigned char>(c) & 0xc0) != 0x80) return out + "...";
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace segtrain
