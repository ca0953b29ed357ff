// Windows and samplers, checked over thousands of random draws against the
// definitions in Karypis et al. 2024 (3.3, 4.1, 5.5) and docs/architecture.md. Token ids encode their
// document and offset (data_test_util.h), so every check is a formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <numeric>

#include "common/error.h"
#include "data/loader.h"
#include "data/rng.h"
#include "data/sample_dump.h"
#include "data/sampler.h"
#include "data/windows.h"
#include "data_test_util.h"
#include "test_util.h"

namespace segtrain::data {
namespace {

using test::coded_token;
using test::TempDir;

const std::vector<int64_t> kLengths = {1000, 2500, 130, 4096, 777, 0, 64, 128, 3000};

// A coded store of documents of `lengths` (data_test_util.h), in a directory of its own.
struct CodedStore {
  explicit CodedStore(const std::vector<int64_t>& lengths) : store(write_and_open(dir, lengths)) {}
  const IndexedDataset& train() const { return store.split(Split::train); }
  TempDir dir;
  TokenStore store;

 private:
  static TokenStore write_and_open(const TempDir& dir, const std::vector<int64_t>& lengths) {
    test::write_coded_store(dir / "s", lengths);
    return TokenStore::open(dir / "s");
  }
};

// The data section of a sampler of L_t = lt from windows of L_e = le.
DataConfig sampler_config(int64_t lt, int64_t le, const SamplerConfig& sampler) {
  DataConfig config;
  config.train_length = lt;
  config.extended_length = le;
  config.sampler = sampler;
  return config;
}

TEST(Windows, NonOverlappingFullWindowsRemaindersAndShortDocumentsDiscarded) {
  const CodedStore coded(kLengths);
  for (int64_t le : {1, 64, 128, 1000, 5000}) {
    auto w = make_windows(coded.train(), le);
    int64_t expected = 0, short_docs = 0, discarded = 0, used = 0;
    for (auto n : kLengths) {
      expected += n / le;
      short_docs += n < le;
      used += n >= le;
      discarded += n % le;
    }
    ASSERT_EQ(w.size(), expected) << "L_e " << le;
    EXPECT_EQ(w.stats.windows, expected);
    EXPECT_EQ(w.stats.short_documents, short_docs);
    EXPECT_EQ(w.stats.used_documents, used);
    EXPECT_EQ(w.stats.discarded_tokens, discarded);
    EXPECT_EQ(w.stats.window_tokens, expected * le);
    for (int64_t i = 0; i < w.size(); ++i) {
      const auto& x = w[i];
      EXPECT_EQ(x.start % le, 0);
      EXPECT_LE(x.start + le, kLengths[static_cast<size_t>(x.doc)]);
      if (i > 0 && w[i - 1].doc == x.doc) {
        EXPECT_EQ(w[i - 1].start + le, x.start);
      }
    }
  }
}

// The samplers this suite's invariants know, for its switch.
enum class Kind { truncate, full, chunk, prefix, randompos, pose };
Kind kind_of(const std::string& method) {
  for (auto [name, kind] : {std::pair{"truncate", Kind::truncate}, {"full", Kind::full}, {"chunk", Kind::chunk},
                            {"prefix", Kind::prefix}, {"randompos", Kind::randompos}, {"pose", Kind::pose}})
    if (method == name) return kind;
  throw std::invalid_argument("no invariants for sampler " + method);
}

struct Case {
  std::string method;
  TargetMode targets;
  int64_t lt, le;
  double alpha;
  ChunkPlacement placement = ChunkPlacement::uniform;
};

std::string name_of(const Case& c) {
  return c.method +
         (c.placement == ChunkPlacement::ring ? "_ring_" : "_") + enum_name(kTargetModes, c.targets) + "_" +
         std::to_string(c.lt) + "_" + std::to_string(c.le) + "_a" + std::to_string(static_cast<int>(c.alpha * 1000));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (std::string method : {"truncate", "full", "chunk", "prefix",
                      "randompos", "pose"})
    for (auto targets : {TargetMode::sequence, TargetMode::document})
      for (auto [lt, le, alpha] : {std::tuple{32, 128, 0.25}, std::tuple{16, 64, 0.5}, std::tuple{64, 256, 0.125},
                                   std::tuple{8, 10, 0.25}, std::tuple{40, 40, 0.5}}) {
        if (method == "prefix" && le < lt + 2) continue;  // no valid suffix start
        out.push_back({method, targets, lt, le, alpha});
        if (method == "chunk") out.push_back({method, targets, lt, le, alpha, ChunkPlacement::ring});
      }
  return out;
}

class SamplerInvariants : public ::testing::TestWithParam<Case> {};

TEST_P(SamplerInvariants, HoldOverThousandsOfDraws) {
  const Case c = GetParam();
  const CodedStore coded(kLengths);
  const auto windows = make_windows(coded.train(), c.le);
  const Sampler sampler(coded.train(), windows,
                        sampler_config(c.lt, c.le, {c.method, c.alpha, c.targets, c.placement}));
  const int64_t T = c.method == "full" ? c.le : c.lt;
  int64_t crossings = 0;  // ring: samples whose structure is only explained by a run split at the end
  ASSERT_EQ(sampler.length(), T);
  const int64_t s = std::llround(c.alpha * static_cast<double>(c.lt)), k = std::llround(1 / c.alpha), p = c.lt - s;

  Rng rng(42);
  std::map<int64_t, int64_t> suffix_starts;
  for (int draw = 0; draw < 3000; ++draw) {
    const auto x = sampler.draw(static_cast<int64_t>(rng.below(static_cast<uint64_t>(windows.size()))), rng.next());
    SCOPED_TRACE("draw " + std::to_string(draw));
    ASSERT_EQ(static_cast<int64_t>(x.tokens.size()), T);
    ASSERT_EQ(x.window_start % c.le, 0);
    ASSERT_LE(x.window_start + c.le, kLengths[static_cast<size_t>(x.doc)]);
    for (int64_t j = 0; j < T; ++j) {
      const auto J = static_cast<size_t>(j);
      ASSERT_GE(x.offsets[J], 0);
      ASSERT_LT(x.offsets[J], c.le);
      ASSERT_GE(x.positions[J], 0);
      ASSERT_LT(x.positions[J], c.le);
      if (j > 0) {
        ASSERT_GT(x.offsets[J], x.offsets[J - 1]) << "offsets strictly increase";
        ASSERT_GT(x.positions[J], x.positions[J - 1]) << "positions strictly increase";
      }
      ASSERT_EQ(x.tokens[J], coded_token(x.doc, x.window_start + x.offsets[J])) << "token is the document's";
      // Targets: never from beyond the window; inside it, as the mode says.
      const bool has_next = x.offsets[J] + 1 < c.le;
      if (j == T - 1 || c.targets == TargetMode::document) {
        if (has_next) {
          ASSERT_EQ(x.targets[J], x.tokens[J] + 1) << "the document's next token";
        } else {
          ASSERT_EQ(x.targets[J], kNoTarget);
        }
      } else {
        ASSERT_EQ(x.targets[J], x.tokens[J + 1]) << "the sequence's next token";
      }
      const bool in_prefix = c.method == "prefix" && j < p;
      ASSERT_EQ(x.loss_mask[J], (in_prefix || x.targets[J] == kNoTarget) ? 0 : 1);
    }
    const auto& o = x.offsets;
    switch (kind_of(c.method)) {
      case Kind::truncate:
      case Kind::full:
        for (int64_t j = 0; j < T; ++j) ASSERT_EQ(o[static_cast<size_t>(j)], j);
        ASSERT_EQ(x.positions, x.offsets);
        break;
      case Kind::chunk: {
        ASSERT_EQ(x.positions, x.offsets);
        ASSERT_EQ(k * s, c.lt);
        // k runs of s contiguous tokens; ring may instead start with the head
        // [0, h) of a run split at the window's end and close with its tail,
        // which ends at L_e - 1, the other k - 1 runs whole in between.
        auto runs_after = [&](int64_t h) {
          if (h > 0) {
            for (int64_t j = 0; j < h; ++j)
              if (o[static_cast<size_t>(j)] != j) return false;
            for (int64_t j = 0; j < s - h; ++j)
              if (o[static_cast<size_t>(T - (s - h) + j)] != c.le - (s - h) + j) return false;
          }
          const int64_t whole = h > 0 ? k - 1 : k;
          for (int64_t m = 0; m < whole; ++m)
            for (int64_t j = 1; j < s; ++j)
              if (o[static_cast<size_t>(h + m * s + j)] != o[static_cast<size_t>(h + m * s)] + j) return false;
          return true;
        };
        if (runs_after(0)) break;
        ASSERT_EQ(c.placement, ChunkPlacement::ring) << "uniform placement keeps k whole runs";
        bool split = false;
        for (int64_t h = 1; h < s && !split; ++h) split = runs_after(h);
        ASSERT_TRUE(split) << "ring: k runs, or one split at the end into a head at 0 and a tail at L_e - 1";
        ++crossings;
        break;
      }
      case Kind::prefix: {
        ASSERT_EQ(x.positions, x.offsets);
        const int64_t i = o[static_cast<size_t>(p)];
        ASSERT_GT(i, p) << "(1-a)L_t < i";
        ASSERT_LT(i, c.le - s) << "i < L_e - a L_t";
        for (int64_t j = 0; j < s; ++j) ASSERT_EQ(o[static_cast<size_t>(p + j)], i + j);
        if (p > 0) {
          ASSERT_LT(o[static_cast<size_t>(p - 1)], i) << "the prefix precedes i";
        }
        ++suffix_starts[i];
        break;
      }
      case Kind::randompos:
      case Kind::pose: {
        ASSERT_LE(o[0], c.le - c.lt);
        for (int64_t j = 0; j < T; ++j) ASSERT_EQ(o[static_cast<size_t>(j)], o[0] + j) << "contiguous tokens";
        if (c.method == "pose") {
          ASSERT_EQ(x.positions[0], 0);
          int jumps = 0;
          for (int64_t j = 1; j < T; ++j) jumps += x.positions[static_cast<size_t>(j)] != x.positions[static_cast<size_t>(j - 1)] + 1;
          ASSERT_LE(jumps, 1) << "two chunks: one skip at most";
        }
        break;
      }
    }
  }
  if (c.placement == ChunkPlacement::ring && s > 1 && c.le > c.lt) {
    EXPECT_GT(crossings, 0) << "a run crosses the end in about k(s-1)/L_e of ring samples";
  }
  if (c.method == "prefix") {
    // i is uniform over the (L_e - aL_t - 1) - ((1-a)L_t + 1) + 1 admissible values.
    const int64_t values = (c.le - s - 1) - (p + 1) + 1;
    EXPECT_EQ(static_cast<int64_t>(suffix_starts.size()), std::min<int64_t>(values, 3000));
    EXPECT_EQ(suffix_starts.begin()->first, p + 1);
    EXPECT_EQ(suffix_starts.rbegin()->first, c.le - s - 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, SamplerInvariants, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name_of(info.param); });

// Pearson's chi-square of observed counts against equal expectations.
double chi_square(const std::map<std::vector<int32_t>, int64_t>& counts, int64_t cells, int64_t draws) {
  const double expected = static_cast<double>(draws) / static_cast<double>(cells);
  double chi = 0;
  for (const auto& [_, n] : counts) chi += (static_cast<double>(n) - expected) * (static_cast<double>(n) - expected) / expected;
  chi += expected * static_cast<double>(cells - static_cast<int64_t>(counts.size()));  // cells never seen
  return chi;
}

TEST(SortedDistinct, EveryKSubsetIsEquallyLikely) {
  // C(7, 3) = 35 subsets; 70000 draws. The seed is fixed, so this is exact and
  // repeatable; a biased sampler lands far above the bound (df = 34, p ~ 1e-6 at 80).
  Rng rng(3);
  std::map<std::vector<int32_t>, int64_t> counts;
  std::vector<int32_t> out(3);
  for (int i = 0; i < 70000; ++i) {
    sample_sorted_distinct(rng, 7, 3, out.data());
    ASSERT_TRUE(out[0] < out[1] && out[1] < out[2] && out[2] < 7 && out[0] >= 0);
    ++counts[out];
  }
  EXPECT_EQ(counts.size(), 35u);
  EXPECT_LT(chi_square(counts, 35, 70000), 80.0);
  // Degenerate sizes: all of [0, n), and nothing.
  std::vector<int32_t> all(130);
  sample_sorted_distinct(rng, 130, 130, all.data());
  for (int32_t j = 0; j < 130; ++j) EXPECT_EQ(all[static_cast<size_t>(j)], j);
}

TEST(Chunk, EveryPlacementOfTheSegmentsIsEquallyLikely) {
  // L_e = 8, two segments of 2 (L_t = 4, a = 0.5): C(8 - 4 + 2, 2) = 15 placements.
  const CodedStore coded({8});
  const auto windows = make_windows(coded.train(), 8);
  const Sampler sampler(coded.train(), windows,
                        sampler_config(4, 8, {"chunk", 0.5, TargetMode::sequence}));
  std::map<std::vector<int32_t>, int64_t> counts;
  for (uint64_t key = 0; key < 30000; ++key) ++counts[sampler.draw(0, mix(9, key)).offsets];
  EXPECT_EQ(counts.size(), 15u);
  EXPECT_LT(chi_square(counts, 15, 30000), 50.0);  // df = 14, p ~ 1e-5 at 50
}

TEST(ChunkRing, EveryRingPlacementIsEquallyLikely) {
  // L_e = 8 as a ring, two runs of 2: 8 rotations x C(8 - 4 + 1, 1) gaps / 2
  // runs = 20 placements, each a distinct set of offsets (listed increasing).
  const CodedStore coded({8});
  const auto windows = make_windows(coded.train(), 8);
  const Sampler sampler(coded.train(), windows,
                        sampler_config(4, 8, {"chunk", 0.5, TargetMode::sequence, ChunkPlacement::ring}));
  std::map<std::vector<int32_t>, int64_t> counts;
  for (uint64_t key = 0; key < 30000; ++key) ++counts[sampler.draw(0, mix(9, key)).offsets];
  // Independently: every 2-subset {a, b} of ring starts with ring distance >= 2.
  int64_t placements = 0;
  for (int a = 0; a < 8; ++a)
    for (int b = a + 1; b < 8; ++b) placements += (b - a >= 2 && 8 - (b - a) >= 2);
  ASSERT_EQ(placements, 20);
  EXPECT_EQ(static_cast<int64_t>(counts.size()), placements);
  EXPECT_LT(chi_square(counts, placements, 30000), 60.0);  // df = 19, p ~ 4e-6 at 60
}

TEST(ChunkRing, DrawsArePureFunctionsOfWindowAndKey) {
  const CodedStore coded(kLengths);
  const DataConfig config =
      sampler_config(64, 256, {"chunk", 0.25, TargetMode::sequence, ChunkPlacement::ring});
  const auto windows = make_windows(coded.train(), 256);
  const Sampler a(coded.train(), windows, config), b(coded.train(), windows, config);
  std::set<std::vector<int32_t>> distinct;
  for (uint64_t key = 0; key < 200; ++key) {
    const int64_t w = static_cast<int64_t>(key % static_cast<uint64_t>(windows.size()));
    const auto x = a.draw(w, mix(1, key)), y = b.draw(w, mix(1, key)), again = a.draw(w, mix(1, key));
    ASSERT_EQ(x.offsets, y.offsets);
    ASSERT_EQ(x.tokens, again.tokens);
    ASSERT_EQ(x.targets, y.targets);
    distinct.insert(x.offsets);
  }
  EXPECT_GT(distinct.size(), 190u) << "different keys give different placements";
}

// P(offset x is covered) under uniform placement of k runs of s in n slots,
// counted independently of the sampler: 1 - (placements avoiding x) / (all),
// where a placement avoids x by putting j runs in [0, x) and k - j in (x, n).
std::vector<double> exact_uniform_coverage(int64_t n, int64_t k, int64_t s) {
  auto placements = [&](int64_t slots, int64_t runs) -> double {  // C(slots - runs*s + runs, runs)
    const int64_t top = slots - runs * s + runs;
    if (runs == 0) return 1;
    if (top < runs) return 0;
    double c = 1;
    for (int64_t i = 1; i <= runs; ++i) c = c * static_cast<double>(top - runs + i) / static_cast<double>(i);
    return c;
  };
  std::vector<double> out(static_cast<size_t>(n));
  const double all = placements(n, k);
  for (int64_t x = 0; x < n; ++x) {
    double avoid = 0;
    for (int64_t j = 0; j <= k; ++j) avoid += placements(x, j) * placements(n - 1 - x, k - j);
    out[static_cast<size_t>(x)] = 1 - avoid / all;
  }
  return out;
}

// The measurement (L_t 128, L_e 512, alpha 0.25, 20,000+ samples of a
// store's stream, as `segtrain sample --coverage` takes them).
Coverage coverage_of(ChunkPlacement placement, int64_t samples) {
  const CodedStore coded({4096, 3000, 2048, 1500, 600, 5000});
  const DataConfig config = sampler_config(128, 512, {"chunk", 0.25, TargetMode::sequence, placement});
  LoaderOptions lo;
  lo.micro_batch_size = 1;
  lo.threads = 0;
  const Loader loader(coded.store, config, lo);
  return measure_coverage(loader, 512, samples);
}

TEST(ChunkRing, EveryOffsetIsCoveredWithinTenPercentOfTheMean) {
  const int64_t samples = 40000;
  const Coverage c = coverage_of(ChunkPlacement::ring, samples);
  ASSERT_EQ(c.offsets.size(), 512u);
  EXPECT_EQ(c.positions, c.offsets);
  const int64_t fed = std::accumulate(c.offsets.begin(), c.offsets.end(), int64_t{0});
  EXPECT_EQ(fed, samples * 128) << "every sample feeds L_t distinct offsets";
  const double mean = 128.0 / 512.0;  // L_t / L_e: what rotation makes every offset's probability
  double worst = 0;
  for (size_t x = 0; x < 512; ++x) {
    const double f = static_cast<double>(c.offsets[x]) / samples;
    worst = std::max(worst, std::abs(f / mean - 1));
    EXPECT_NEAR(f, mean, 0.1 * mean) << "offset " << x;
  }
  // Binomial noise alone: sd = sqrt(.25 * .75 / 40000) = 0.87% of the mean per offset.
  EXPECT_LT(worst, 0.05);
}

TEST(ChunkUniform, CoverageFollowsTheExactProfileWithItsEdgeEffect) {
  const int64_t samples = 40000;
  const Coverage c = coverage_of(ChunkPlacement::uniform, samples);
  const auto exact = exact_uniform_coverage(512, 4, 32);
  double mean = 0;
  for (double p : exact) mean += p / 512;
  EXPECT_NEAR(mean, 0.25, 1e-9) << "the exact profile itself averages L_t / L_e";
  for (size_t x = 0; x < 512; ++x) {
    const double f = static_cast<double>(c.offsets[x]) / samples;
    const double sd = std::sqrt(exact[x] * (1 - exact[x]) / samples);
    EXPECT_NEAR(f, exact[x], 5 * sd + 1e-4) << "offset " << x;
  }
  // The figures: the ends about 1% (k / (n - ks + k) = 4/388), offset 480 the maximum.
  EXPECT_NEAR(exact[0], 4.0 / 388.0, 1e-12);
  EXPECT_NEAR(exact[511], 4.0 / 388.0, 1e-12);
  EXPECT_EQ(std::max_element(exact.begin(), exact.begin() + 256) - exact.begin(), 511 - 480);
  EXPECT_LT(static_cast<double>(c.offsets[0]) / samples, 0.1 * 0.25);
  EXPECT_LT(static_cast<double>(c.offsets[511]) / samples, 0.1 * 0.25);
}

TEST(RandomPos, PositionsSpreadOverTheWholeExtendedRange) {
  const CodedStore coded({512});
  const auto windows = make_windows(coded.train(), 512);
  const Sampler sampler(coded.train(), windows,
                        sampler_config(16, 512, {"randompos", 0.25, TargetMode::sequence}));
  // Order statistics of 16 uniform draws from [0, 512): E[max] = 17 * 512/17 - 1 ~ 481.
  double max_sum = 0, min_sum = 0;
  for (uint64_t key = 0; key < 4000; ++key) {
    auto x = sampler.draw(0, mix(5, key));
    max_sum += x.positions.back();
    min_sum += x.positions.front();
  }
  EXPECT_NEAR(max_sum / 4000, 512.0 * 16 / 17 - 1, 4.0);
  EXPECT_NEAR(min_sum / 4000, 512.0 / 17 - 1, 4.0);
}

TEST(Sampler, RejectsShapesTheMethodCannotProduce) {
  const CodedStore coded({256});
  auto make = [&](const std::string& m, int64_t lt, int64_t le, double alpha) {
    const DataConfig config = sampler_config(lt, le, {m, alpha, TargetMode::sequence});
    const auto windows = make_windows(coded.train(), le);
    Sampler sampler(coded.train(), windows, config);
  };
  EXPECT_THROW(make("chunk", 32, 128, 0.3), InputError);   // 1/alpha not an integer
  EXPECT_THROW(make("chunk", 30, 128, 0.25), InputError);  // alpha L_t not an integer
  EXPECT_THROW(make("prefix", 32, 33, 0.25), InputError);  // no i with 24 < i < 25
  EXPECT_THROW(make("truncate", 64, 32, 0.25), InputError);
  EXPECT_NO_THROW(make("prefix", 32, 34, 0.25));
  // alpha = 1 would make chunk one run of L_t (a crop, not a segmentation): refused,
  // in the words the validator and the experiment grid use (data/sampler_rules.h).
  for (std::string m : {"chunk", "prefix"}) {
    try {
      make(m, 32, 128, 1.0);
      ADD_FAILURE() << "alpha 1 accepted for " << m;
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), "data.sampler.alpha: 1 is not in (0, 1): chunk cuts L_t into 1/alpha "
                                       "segments, prefix trains on a suffix of alpha * L_t tokens");
    }
  }
  for (std::string m : {"truncate", "full", "prefix", "randompos",
                 "pose"}) {
    const DataConfig config = sampler_config(32, 128, {m, 0.25, TargetMode::sequence, ChunkPlacement::ring});
    const auto windows = make_windows(coded.train(), 128);
    try {
      Sampler sampler(coded.train(), windows, config);
      ADD_FAILURE() << "ring accepted for " << m;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("data.sampler.placement"), std::string::npos) << e.what();
    }
  }
}

TEST(Sampler, ComputeEquivalentEpochsFollowEquationTwo) {
  DataConfig c;
  c.train_length = 128;
  c.extended_length = 512;
  for (std::string m : {"truncate", "chunk", "prefix", "randompos",
                 "pose"}) {
    c.sampler.method = m;
    EXPECT_DOUBLE_EQ(compute_equivalent_epochs(c), 4.0);
  }
  c.sampler.method = "full";
  EXPECT_DOUBLE_EQ(compute_equivalent_epochs(c), 1.0);
}

}  // namespace
}  // namespace segtrain::data
