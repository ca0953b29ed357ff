// A mixture of sources (data.mixture, data/loader.h): each sample's source drawn by the
// weights from the seed alone, each source reading its own stream in order, the same stream
// whatever the ranks, threads or a resume, and a mixture of one source the single store's.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "common/error.h"
#include "data/loader.h"
#include "data/mixture.h"
#include "data_test_util.h"
#include "test_util.h"

namespace segtrain::data {
namespace {

using test::TempDir;

// One sample of a batch: its source, document, window start, tokens and positions.
struct Row {
  int32_t source;
  int64_t doc, window_start;
  std::vector<int32_t> tokens, positions;
  bool operator==(const Row&) const = default;
};

std::vector<Row> rows(const Batch& b) {
  std::vector<Row> out;
  const auto T = static_cast<long>(b.length);
  for (long i = 0; i < b.batch_size; ++i) {
    const auto u = static_cast<size_t>(i);
    out.push_back({b.sources[u], b.docs[u], b.window_starts[u],
                   {b.tokens.begin() + i * T, b.tokens.begin() + (i + 1) * T},
                   {b.positions.begin() + i * T, b.positions.begin() + (i + 1) * T}});
  }
  return out;
}

class MixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<int64_t> long_docs, short_docs;
    for (int d = 0; d < 12; ++d) long_docs.push_back(256 * (1 + d % 3) + d);  // 24 windows of 256
    for (int d = 0; d < 40; ++d) short_docs.push_back(16 * (1 + d % 4) + d % 7);  // 100 windows of 16
    test::write_coded_store(dir_ / "long", long_docs);
    test::write_coded_store(dir_ / "short", short_docs);
    config_.store = dir_ / "long";
    config_.train_length = 16;
    config_.extended_length = 256;
    config_.sampler = {"chunk", 0.25, TargetMode::sequence};
    config_.prefetch = 3;
    SamplerConfig truncate;
    truncate.method = "truncate";
    config_.mixture = {{"long", "", 3.0, std::nullopt, std::nullopt},
                       {"short", dir_ / "short", 1.0, int64_t{16}, truncate}};
  }
  LoaderOptions options(int64_t rank, int64_t world, int64_t batch, int64_t threads, StreamCursor start = {}) {
    LoaderOptions o;
    o.seed = 99;
    o.rank = rank;
    o.world_size = world;
    o.micro_batch_size = batch;
    o.threads = threads;
    o.start = std::move(start);
    return o;
  }
  // `steps` micro-batches of a loader over the config's sources.
  std::vector<Row> stream(const LoaderOptions& o, int steps, StreamCursor* end = nullptr,
                          std::vector<int64_t>* step_samples = nullptr) {
    SourceStores stores(config_);
    Loader loader(stores.sources(), config_, o);
    std::vector<Row> out;
    for (int s = 0; s < steps; ++s) {
      const Batch b = loader.next();
      for (auto& r : rows(b)) out.push_back(std::move(r));
      if (end) *end = b.cursor;
      if (step_samples)
        for (size_t i = 0; i < b.step_samples.size(); ++i) (*step_samples)[i] += b.step_samples[i];
    }
    return out;
  }
  TempDir dir_;
  DataConfig config_;
};

TEST_F(MixtureTest, AMixtureOfOneSourceIsTheSingleStore) {
  auto one = config_;
  one.mixture = {{"", "", 1.0, std::nullopt, std::nullopt}};
  auto single = config_;
  single.mixture.clear();
  const auto store = TokenStore::open(dir_ / "long");
  Loader plain(store, single, options(0, 1, 4, 0));
  SourceStores stores(one);
  Loader mixed(stores.sources(), one, options(0, 1, 4, 2));
  for (int step = 0; step < 30; ++step) {
    const Batch a = plain.next(), b = mixed.next();
    EXPECT_EQ(a.tokens, b.tokens) << "step " << step;
    EXPECT_EQ(a.positions, b.positions);
    EXPECT_EQ(a.targets, b.targets);
    EXPECT_EQ(a.cursor, b.cursor);
  }
}

TEST_F(MixtureTest, SharesFollowTheWeights) {
  std::vector<int64_t> counted(2, 0);
  const auto all = stream(options(0, 1, 8, 1), 500, nullptr, &counted);
  int64_t from_long = 0;
  for (const auto& r : all) from_long += r.source == 0;
  EXPECT_EQ(from_long, counted[0]) << "step_samples counts what the batches hold";
  EXPECT_EQ(static_cast<int64_t>(all.size()) - from_long, counted[1]);
  // 4,000 draws at p = 3/4: the share lies within 4 standard deviations (0.027).
  const double n = static_cast<double>(all.size()), share = static_cast<double>(from_long) / n;
  EXPECT_NEAR(share, 0.75, 4 * std::sqrt(0.75 * 0.25 / n));
}

TEST_F(MixtureTest, EachSourceReadsItsOwnStreamInOrder) {
  SourceStores stores(config_);
  Loader loader(stores.sources(), config_, options(0, 1, 5, 0));
  std::vector<int64_t> drawn(2, 0);
  for (int step = 0; step < 120; ++step)  // 600 samples: about 150 of the short source's 100 windows
    for (const auto& r : rows(loader.next())) {
      const auto source = static_cast<size_t>(r.source);
      const int64_t N = loader.streams()[source]->samples_per_epoch(), k = drawn[source]++;
      const Sample s = loader.sample(k / N, k % N, source);
      EXPECT_EQ(r.tokens, s.tokens);
      EXPECT_EQ(r.positions, s.positions);
      if (source == 1)  // truncate over 16-token windows: the window itself at positions 0..15
        for (int j = 0; j < 16; ++j) {
          EXPECT_EQ(r.tokens[static_cast<size_t>(j)], test::coded_token(r.doc, r.window_start + j));
          EXPECT_EQ(r.positions[static_cast<size_t>(j)], j);
        }
    }
  EXPECT_GT(drawn[1], 0);
  EXPECT_GT(drawn[1], loader.streams()[1]->samples_per_epoch()) << "the short source wrapped into its next epoch";
}

TEST_F(MixtureTest, RanksThreadsAndAResumeChangeNothing) {
  const auto one_rank = stream(options(0, 1, 6, 0), 40);
  // Two ranks of 3 read the two halves of each global batch of 6.
  const auto rank0 = stream(options(0, 2, 3, 2), 40), rank1 = stream(options(1, 2, 3, 1), 40);
  std::vector<Row> joined;
  for (size_t s = 0; s < 40; ++s) {
    joined.insert(joined.end(), rank0.begin() + static_cast<long>(s * 3), rank0.begin() + static_cast<long>(s * 3 + 3));
    joined.insert(joined.end(), rank1.begin() + static_cast<long>(s * 3), rank1.begin() + static_cast<long>(s * 3 + 3));
  }
  EXPECT_EQ(joined, one_rank);
  StreamCursor middle;
  const auto head = stream(options(0, 1, 6, 2), 17, &middle);
  ASSERT_EQ(middle.sources.size(), 2u);
  const auto tail = stream(options(0, 1, 6, 1, middle), 23);
  std::vector<Row> resumed = head;
  resumed.insert(resumed.end(), tail.begin(), tail.end());
  EXPECT_EQ(resumed, one_rank);
}

TEST_F(MixtureTest, ASourceOfWeightZeroIsNeverDrawn) {
  config_.mixture[1].weight = 0;
  for (const auto& r : stream(options(0, 1, 8, 0), 50)) EXPECT_EQ(r.source, 0);
}

TEST_F(MixtureTest, ProblemsAreNamedByTheSourcesKeys) {
  auto problems = [&](const DataConfig& c) {
    std::map<std::string, std::string> out;
    for (const auto& p : mixture_problems(c)) out[p.key] = p.message;
    return out;
  };
  EXPECT_TRUE(problems(config_).empty());
  auto c = config_;
  c.mixture[0].weight = -1;
  c.mixture[1].weight = 0;
  auto found = problems(c);
  EXPECT_TRUE(found.count("data.mixture[0].weight")) << "a negative weight";
  EXPECT_TRUE(found.count("data.mixture")) << "weights that sum to no positive number";
  c = config_;
  c.mixture[1].name = "long";
  EXPECT_TRUE(problems(c).count("data.mixture[1].name")) << "two sources of one name";
  c = config_;
  c.mixture[1].sampler->method = "full";  // 16 tokens against the first source's L_t samples: the same here
  c.mixture[1].extended_length = 64;
  found = problems(c);
  ASSERT_TRUE(found.count("data.mixture[1].sampler"));
  EXPECT_NE(found["data.mixture[1].sampler"].find("64 tokens"), std::string::npos);
  c = config_;
  c.mixture[1].sampler->method = "chunk";
  c.mixture[1].sampler->alpha = 0.3;  // 1 / 0.3 is no whole number of segments
  c.mixture[1].extended_length = 64;
  found = problems(c);
  EXPECT_TRUE(found.count("data.mixture[1].sampler.alpha")) << found.size();
  c = config_;
  c.mixture[1].extended_length = 8;  // shorter than L_t
  EXPECT_TRUE(problems(c).count("data.mixture[1].extended_length"));
  c = config_;
  c.mixture[1].extended_length = 512;  // past the run's target, data.extended_length = 256
  found = problems(c);
  ASSERT_TRUE(found.count("data.mixture[1].extended_length"));
  EXPECT_NE(found["data.mixture[1].extended_length"].find("past data.extended_length = 256"), std::string::npos);
  c = config_;
  c.mixture[0].weight = 0;  // the first source sets the budget: it must be drawn
  EXPECT_TRUE(problems(c).count("data.mixture[0].weight"));
  c = config_;
  c.mixture[0].weight = c.mixture[1].weight = 1e308;  // a sum that overflows to inf
  EXPECT_TRUE(problems(c).count("data.mixture"));
}

TEST_F(MixtureTest, ASourceWithoutAWindowIsRefusedByItsKey) {
  config_.mixture[1].extended_length = 128;  // no short document is that long
  config_.mixture[1].sampler->method = "chunk";
  try {
    SourceStores stores(config_);
    Loader loader(stores.sources(), config_, options(0, 1, 2, 0));
    FAIL() << "a source with no window was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("data.mixture[1]: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no document of at least L_e = 128"), std::string::npos) << e.what();
  }
}

TEST_F(MixtureTest, ACursorOfAnotherSourceCountIsRefused) {
  StreamCursor one;
  one.sources.push_back({0, 3});
  SourceStores stores(config_);
  EXPECT_THROW(Loader(stores.sources(), config_, options(0, 1, 2, 0, one)), InputError);
}

}  // namespace
}  // namespace segtrain::data
