// The cream sampler (data/samplers/cream.cpp) against CREAM's own rule: for the same draws its
// positions equal those of tests/data/cream_reference.py, the reference code's CREAM()
// (bigai-nlco/CREAM, src/train.py:188-237) rewritten in Python with its draws explicit; and
// through the Sampler, every sample's invariants, both segment modes, the middle's reach and
// the refusals of shapes it cannot draw.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include "common/error.h"
#include "data/rng.h"
#include "data/sampler.h"
#include "data/sampler_rules.h"
#include "data/samplers/cream.h"
#include "data/windows.h"
#include "data_test_util.h"
#include "test_paths.h"
#include "test_util.h"

namespace segtrain::data {
namespace {

using nlohmann::json;

struct Shape {
  int64_t lt, le;
  double sigma;
};

// Random cases over shapes the sampler takes (L_e a multiple >= 2 of an even L_t > 8 L_e/L_t),
// the uniform draw at its ends as well as inside.
json cases_for(const std::vector<Shape>& shapes, int per_shape, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  json cases = json::array();
  for (const Shape& s : shapes)
    for (int i = 0; i < per_shape; ++i) {
      double u = unit(rng);
      if (i == 0) u = 0.0;
      if (i == 1) u = 1e-9;
      if (i == 2) u = 1.0 - 1e-12;
      cases.push_back({{"L_t", s.lt}, {"L_e", s.le}, {"sigma", s.sigma}, {"rand_num", i % 2},
                       {"uniform_random", u}, {"end_id_u", unit(rng)}});
    }
  return cases;
}

TEST(Cream, PositionsEqualTheReferenceCodesForTheSameDraws) {
  std::mt19937_64 rng(2024);
  const json cases = cases_for({{64, 128, 3.0}, {64, 256, 3.0}, {128, 1024, 3.0}, {2048, 32768, 3.0},
                                {4096, 32768, 3.0}, {2048, 8192, 1.0}, {256, 2048, 5.0}, {4096, 65536, 3.0}},
                               40, rng);
  test::TempDir dir;
  std::ofstream(dir / "cases.json") << cases.dump();
  const auto reference = test::run(SEGTRAIN_PYTHON, {std::string(SEGTRAIN_SOURCE_DIR) + "/tests/data/cream_reference.py",
                                                     "--json-cases", dir / "cases.json"});
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const json want = json::parse(reference.out);
  ASSERT_EQ(want.size(), cases.size());
  std::map<int64_t, int> rand_factors;
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    const json& w = want[i];
    ASSERT_FALSE(w.contains("error")) << c.dump() << ": " << w.dump();
    const int64_t lt = c["L_t"], le = c["L_e"];
    CreamDraws draws{c["rand_num"].get<int64_t>(), c["uniform_random"].get<double>(), 0};
    CreamLayout l = cream_layout(lt, le, c["sigma"].get<double>(), draws);
    ASSERT_EQ(l.rand_factor, w["rand_factor"].get<int64_t>()) << c.dump();
    ASSERT_EQ(l.end_id_lo, w["end_id_lo"].get<int64_t>()) << c.dump();
    ASSERT_EQ(l.end_id_hi, w["end_id_hi"].get<int64_t>()) << c.dump();
    // The reference's own mapping of the test's uniform to the range (cream_reference.py, end_id_u).
    draws.end_id_offset =
        static_cast<int64_t>(c["end_id_u"].get<double>() * static_cast<double>(l.end_id_hi - l.end_id_lo + 1));
    l = cream_layout(lt, le, c["sigma"].get<double>(), draws);
    ASSERT_EQ(l.end_id, w["end_id"].get<int64_t>()) << c.dump();
    std::vector<int32_t> positions(static_cast<size_t>(lt));
    cream_positions(l, lt, positions.data());
    const auto want_positions = w["position_ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(positions, want_positions) << c.dump();
    // A window of L_e tokens: the tokens are those at the positions (the reference's token
    // indices for a document of factor * L_t tokens), and every one is a label.
    ASSERT_EQ(w["token_offsets"].get<std::vector<int32_t>>(), want_positions) << c.dump();
    for (const int m : w["loss_mask"].get<std::vector<int>>()) ASSERT_EQ(m, 1);
    ++rand_factors[l.rand_factor];
  }
  // The cases reach both ends of the clamped table and its inside.
  EXPECT_TRUE(rand_factors.count(2));
  EXPECT_GT(rand_factors.size(), 5u);
}

TEST(Cream, SamplesHoldTheirInvariantsAndTheMiddleReachesAsTheGaussianSays) {
  const int64_t lt = 128, le = 1024, factor = le / lt;  // 8, the CREAM scripts' factor
  test::TempDir dir;
  test::write_coded_store(dir / "s", {4096, 1024, 3000});
  const auto store = TokenStore::open(dir / "s");
  const auto& split = store.split(Split::train);
  DataConfig config;
  config.train_length = lt;
  config.extended_length = le;
  config.sampler.method = "cream";
  const auto windows = make_windows(split, le);
  const Sampler sampler(split, windows, config);
  ASSERT_EQ(sampler.length(), lt);
  int64_t continuity = 0, n = 8000;
  std::vector<double> quarters(4, 0.0);  // where the middle segment is centred, by quarter of the window
  for (int64_t k = 0; k < n; ++k) {
    const Sample s = sampler.draw(k % static_cast<int64_t>(windows.size()), mix(uint64_t{11}, static_cast<uint64_t>(k)));
    ASSERT_EQ(s.positions, s.offsets) << "every token keeps its own position";
    for (int64_t j = 0; j < lt; ++j) {
      ASSERT_GE(s.positions[j], 0);
      ASSERT_LT(s.positions[j], le);
      if (j > 0) {
        ASSERT_GT(s.positions[j], s.positions[j - 1]);
      }
      ASSERT_EQ(s.tokens[j], test::coded_token(s.doc, s.window_start + s.offsets[j]));
      ASSERT_EQ(s.loss_mask[j], j + 1 < lt ? 1 : 0) << "every prediction but the one past the window";
    }
    ASSERT_EQ(s.positions.front(), 0);
    ASSERT_EQ(s.positions.back(), le - 1) << "the tail ends at factor * L_t = L_e";
    // Continuity keeps 4 * factor head tokens, relativity L_t / 3: the middle starts after them.
    const bool short_head = s.positions[4 * factor] != 4 * factor;
    continuity += short_head;
    const int64_t head = short_head ? 4 * factor : lt / 3, len_chunk = lt - 2 * head;
    const double centre = (s.positions[head] + s.positions[head + len_chunk - 1]) / 2.0;
    quarters[std::min<size_t>(3, static_cast<size_t>(centre * 4 / static_cast<double>(le)))] += 1.0 / n;
  }
  // Half the samples each way (the reference's randint(0, 1)), within 4 standard deviations (a
  // sample of the reference's rarest draw, rand_factor 2, reads as relativity: within the bound).
  EXPECT_NEAR(static_cast<double>(continuity) / static_cast<double>(n), 0.5, 4 * 0.5 / std::sqrt(n));
  // Where the middle lands, by quarter of the window, as the reference's rule with its own random
  // draws puts it (tests/data/cream_reference.py --middle-quarters), within 4 standard deviations.
  const auto reference = test::run(SEGTRAIN_PYTHON, {std::string(SEGTRAIN_SOURCE_DIR) + "/tests/data/cream_reference.py",
                                                     "--middle-quarters", std::to_string(lt), std::to_string(le), "3.0",
                                                     "20000", "7"});
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const auto want = json::parse(reference.out).get<std::vector<double>>();
  for (size_t q = 0; q < 4; ++q) {
    const double sd = std::sqrt(want[q] * (1 - want[q]) * (1.0 / n + 1.0 / 20000));
    EXPECT_NEAR(quarters[q], want[q], 4 * sd + 1e-3) << "quarter " << q;
  }
  EXPECT_GT(quarters[1] + quarters[2], 0.6) << "the middle trains the window's middle most";
}

TEST(Cream, ShapesItCannotDrawAreRefusedNamingTheKey) {
  auto problems = [](int64_t lt, int64_t le, double sigma, const std::string& method = "cream") {
    DataConfig c;
    c.train_length = lt;
    c.extended_length = le;
    c.sampler.method = method;
    c.sampler.sigma = sigma;
    return sampler_problems(c);
  };
  EXPECT_TRUE(problems(64, 256, 3.0).empty());
  auto first_key = [](const std::vector<ConfigProblem>& p) { return p.empty() ? std::string() : p.front().key; };
  EXPECT_EQ(first_key(problems(64, 200, 3.0)), "data.extended_length");  // not a multiple of L_t
  EXPECT_EQ(first_key(problems(64, 64, 3.0)), "data.extended_length");   // factor 1: nothing to extend
  EXPECT_EQ(first_key(problems(63, 252, 3.0)), "data.train_length");  // odd L_t: the reference raises too
  EXPECT_EQ(first_key(problems(32, 128, 3.0)), "data.train_length");  // 32 <= 8 * 4: no middle
  EXPECT_EQ(first_key(problems(64, 256, 0.0)), "data.sampler.sigma");
  EXPECT_EQ(first_key(problems(64, 256, 2.0, "chunk")), "data.sampler.sigma");  // cream's key, not chunk's
}

}  // namespace
}  // namespace segtrain::data
