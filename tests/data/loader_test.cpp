// The loader: every sample a pure function of (seed, epoch, index); ranks read
// disjoint shards whose union is the one-rank stream; background threads and
// prefetch change nothing; a cursor resumes exactly; epochs are reshuffled.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "common/error.h"
#include "data/loader.h"
#include "data_test_util.h"
#include "test_util.h"

namespace segtrain::data {
namespace {

using test::TempDir;

// One sample of a batch, as a comparable value.
using Row = std::tuple<int64_t, int64_t, std::vector<int32_t>, std::vector<int32_t>, std::vector<int32_t>,
                       std::vector<uint8_t>>;

std::vector<Row> rows(const Batch& b) {
  std::vector<Row> out;
  const auto T = static_cast<size_t>(b.length);
  for (size_t i = 0; i < static_cast<size_t>(b.batch_size); ++i) {
    auto slice = [&](const auto& v) { return std::vector<typename std::decay_t<decltype(v)>::value_type>(v.begin() + static_cast<long>(i * T), v.begin() + static_cast<long>((i + 1) * T)); };
    out.emplace_back(b.docs[i], b.window_starts[i], slice(b.tokens), slice(b.positions), slice(b.targets), slice(b.loss_mask));
  }
  return out;
}

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<int64_t> lengths;
    for (int d = 0; d < 23; ++d) lengths.push_back(64 * (1 + d % 5) + d);  // 69 windows of 64
    test::write_coded_store(dir_ / "s", lengths);
    store_ = std::make_unique<TokenStore>(TokenStore::open(dir_ / "s"));
    config_.train_length = 16;
    config_.extended_length = 64;
    config_.sampler = {"chunk", 0.25, TargetMode::sequence};
    config_.prefetch = 3;
  }
  LoaderOptions options(int64_t rank, int64_t world, int64_t batch, int64_t threads, StreamCursor start = {}) {
    LoaderOptions o;
    o.seed = 77;
    o.rank = rank;
    o.world_size = world;
    o.micro_batch_size = batch;
    o.threads = threads;
    o.start = start;
    return o;
  }
  std::vector<Row> stream(const LoaderOptions& o, int steps, StreamCursor* end = nullptr) {
    Loader loader(*store_, config_, o);
    std::vector<Row> out;
    for (int s = 0; s < steps; ++s) {
      auto b = loader.next();
      EXPECT_EQ(b.batch_size, o.micro_batch_size);
      EXPECT_EQ(b.length, 16);
      EXPECT_EQ(b.tokens.size(), static_cast<size_t>(o.micro_batch_size * 16));
      for (auto& r : rows(b)) out.push_back(std::move(r));
      if (end) *end = b.cursor;
    }
    return out;
  }
  TempDir dir_;
  std::unique_ptr<TokenStore> store_;
  DataConfig config_;
};

TEST_F(LoaderTest, WindowsAndEpochSizeComeFromTheStore) {
  Loader loader(*store_, config_, options(0, 1, 4, 0));
  int64_t expected = 0;
  for (int d = 0; d < 23; ++d) expected += (64 * (1 + d % 5) + d) / 64;
  EXPECT_EQ(loader.samples_per_epoch(), expected);
  EXPECT_EQ(loader.sample_length(), 16);
}

TEST_F(LoaderTest, SameStreamWhateverTheThreadCountAndPrefetch) {
  const auto reference = stream(options(0, 1, 5, 0), 40);  // 200 samples: about three epochs
  for (int64_t threads : {1, 2, 3}) EXPECT_EQ(stream(options(0, 1, 5, threads), 40), reference) << threads << " threads";
  config_.prefetch = 1;
  EXPECT_EQ(stream(options(0, 1, 5, 2), 40), reference);
}

TEST_F(LoaderTest, RankShardsAreDisjointAndTheirUnionIsTheOneRankStream) {
  // One rank with batch 6 reads, per step, exactly what ranks 0..W-1 with batch
  // 6/W read together at that step.
  const auto single = stream(options(0, 1, 6, 0), 30);
  for (int64_t world : {2, 3}) {
    std::vector<std::vector<Row>> per_rank;
    for (int64_t r = 0; r < world; ++r) per_rank.push_back(stream(options(r, world, 6 / world, 2), 30));
    for (size_t step = 0; step < 30; ++step) {
      std::vector<Row> combined;
      for (const auto& rank_rows : per_rank) {
        const size_t b = static_cast<size_t>(6 / world);
        combined.insert(combined.end(), rank_rows.begin() + static_cast<long>(step * b),
                        rank_rows.begin() + static_cast<long>((step + 1) * b));
      }
      std::vector<Row> expected(single.begin() + static_cast<long>(step * 6), single.begin() + static_cast<long>((step + 1) * 6));
      ASSERT_EQ(combined, expected) << "world " << world << ", step " << step;
    }
    // Within an epoch the ranks never read the same window twice between them.
    Loader probe(*store_, config_, options(0, 1, 1, 0));
    const int64_t n = probe.samples_per_epoch();
    std::set<std::pair<int64_t, int64_t>> seen;
    size_t first_epoch_rows = 0;
    for (size_t step = 0; step * 6 + 6 <= static_cast<size_t>(n); ++step)
      for (const auto& rank_rows : per_rank)
        for (size_t b = 0; b < static_cast<size_t>(6 / world); ++b) {
          const auto& row = rank_rows[step * static_cast<size_t>(6 / world) + b];
          seen.insert({std::get<0>(row), std::get<1>(row)});
          ++first_epoch_rows;
        }
    EXPECT_EQ(seen.size(), first_epoch_rows) << "a window was read twice in one epoch";
  }
}

TEST_F(LoaderTest, EachEpochVisitsEveryWindowOnceInANewOrder) {
  Loader loader(*store_, config_, options(0, 1, 1, 0));
  const int64_t n = loader.samples_per_epoch();
  std::vector<std::vector<int64_t>> orders(3);
  for (int64_t e = 0; e < 3; ++e) {
    std::set<int64_t> windows;
    for (int64_t i = 0; i < n; ++i) {
      windows.insert(loader.window_of(e, i));
      orders[static_cast<size_t>(e)].push_back(loader.window_of(e, i));
    }
    EXPECT_EQ(static_cast<int64_t>(windows.size()), n) << "epoch " << e;
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  // Samples are redrawn each epoch too: same window, different segments.
  const auto a = loader.sample(0, 0), b = loader.sample(1, 0);
  EXPECT_TRUE(a.doc != b.doc || a.window_start != b.window_start || a.offsets != b.offsets);
}

TEST_F(LoaderTest, ResumingFromACursorContinuesTheStreamExactly) {
  StreamCursor middle;
  const auto full = stream(options(1, 2, 4, 1), 25);
  const auto head = stream(options(1, 2, 4, 1), 11, &middle);
  const int64_t n = Loader(*store_, config_, options(0, 1, 1, 0)).samples_per_epoch();
  ASSERT_EQ(middle.sources.size(), 1u);
  EXPECT_EQ(middle.sources[0].epoch * n + middle.sources[0].index, 11 * 2 * 4) << "the cursor counts global samples";
  EXPECT_LT(middle.sources[0].index, n);
  const auto tail = stream(options(1, 2, 4, 2, middle), 14);
  std::vector<Row> joined = head;
  joined.insert(joined.end(), tail.begin(), tail.end());
  EXPECT_EQ(joined, full);
}

TEST_F(LoaderTest, BatchesMatchThePureSampleFunction) {
  Loader loader(*store_, config_, options(1, 3, 2, 2));
  for (int step = 0; step < 20; ++step) {
    const auto b = loader.next();
    const auto got = rows(b);
    for (int64_t i = 0; i < 2; ++i) {
      const int64_t n = step * 6 + 1 * 2 + i, N = loader.samples_per_epoch();
      const auto s = loader.sample(n / N, n % N);
      const auto& r = got[static_cast<size_t>(i)];
      EXPECT_EQ(std::get<0>(r), s.doc);
      EXPECT_EQ(std::get<1>(r), s.window_start);
      EXPECT_EQ(std::get<2>(r), s.tokens);
      EXPECT_EQ(std::get<3>(r), s.positions);
      EXPECT_EQ(std::get<4>(r), s.targets);
      EXPECT_EQ(std::get<5>(r), s.loss_mask);
    }
  }
}

TEST_F(LoaderTest, BadArgumentsAndEmptySplitsAreInputErrors) {
  EXPECT_THROW(Loader(*store_, config_, options(2, 2, 4, 0)), InputError);
  EXPECT_THROW(Loader(*store_, config_, options(0, 1, 0, 0)), InputError);
  config_.extended_length = 1 << 20;
  config_.train_length = 1 << 18;
  try {
    Loader(*store_, config_, options(0, 1, 4, 0));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no document of at least L_e"), std::string::npos) << e.what();
  }
}

TEST_F(LoaderTest, StoppingWithBatchesInFlightDoesNotHang) {
  for (int i = 0; i < 20; ++i) {
    Loader loader(*store_, config_, options(0, 1, 3, 3));
    if (i % 2) loader.next();
  }
}

}  // namespace
}  // namespace segtrain::data
