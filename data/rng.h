#pragma once
// Counter-based randomness: every draw is a pure function of (seed, stream ids),
// so a sample depends only on (seed, epoch, global index) and never on which
// thread or rank produced it, or on what was drawn before it.
#include <cstdint>

namespace segtrain::data {

__extension__ typedef unsigned __int128 uint128;  // GCC/Clang builtin; __extension__ keeps -Wpedantic quiet

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Mixes several ids into one well-spread 64-bit key.
inline uint64_t mix(uint64_t a, uint64_t b) { return splitmix64(splitmix64(a) ^ (b * 0xd1342543de82ef95ULL + 1)); }
inline uint64_t mix(uint64_t a, uint64_t b, uint64_t c) { return mix(mix(a, b), c); }

// xoshiro256**: small state, ~1 ns per draw, good enough statistics for sampling.
class Rng {
 public:
  explicit Rng(uint64_t key) {
    for (auto& s : s_) s = key = splitmix64(key);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, n), n > 0, without modulo bias (Lemire's multiply-and-reject).
  uint64_t below(uint64_t n) {
    uint128 m = static_cast<uint128>(next()) * n;
    auto low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<uint128>(next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }
  // Uniform in [lo, hi], lo <= hi.
  int64_t between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace segtrain::data
