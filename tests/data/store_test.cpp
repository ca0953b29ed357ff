// The token store: Megatron v1 bytes on disk, round trips, the document split,
// Megatron's own multi-sequence documents, and every corruption gets a clear
// InputError naming the file.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "common/error.h"
#include "data/rng.h"
#include "data_test_util.h"
#include "test_util.h"

namespace segtrain::data {
namespace {

using test::TempDir;
namespace fs = std::filesystem;

std::vector<std::vector<int32_t>> random_docs(int n, int64_t vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<int32_t>> docs(static_cast<size_t>(n));
  for (auto& d : docs) {
    d.resize(rng.below(300));
    for (auto& t : d) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  }
  return docs;
}

StoreMeta write_docs(const std::string& dir, const std::vector<std::vector<int32_t>>& docs, int64_t vocab,
                     double valid_fraction) {
  StoreMeta meta;
  meta.vocab_size = vocab;
  meta.eos_id = 1;
  meta.tokenizer = "test";
  return write_store(dir, static_cast<int64_t>(docs.size()),
                     [&](int64_t d) { return std::span<const int32_t>(docs[static_cast<size_t>(d)]); }, meta,
                     valid_fraction, 99);
}

class RoundTrip : public ::testing::TestWithParam<int64_t> {};

TEST_P(RoundTrip, EveryDocumentComesBackInOrderWithinItsSplit) {
  const int64_t vocab = GetParam();
  TempDir dir;
  const auto docs = random_docs(57, vocab, 5);
  const auto meta = write_docs(dir / "s", docs, vocab, 0.2);
  auto store = TokenStore::open(dir / "s");
  EXPECT_EQ(store.vocab_size(), vocab);
  EXPECT_EQ(store.eos_id(), 1);
  EXPECT_EQ(store.split(Split::train).dtype(), vocab < 65500 ? TokenDtype::uint16 : TokenDtype::int32);
  const auto valid = choose_valid_documents(57, 0.2, 99);
  int64_t t = 0, v = 0, tokens = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    const auto& split = store.split(valid[d] ? Split::valid : Split::train);
    const int64_t k = valid[d] ? v++ : t++;
    EXPECT_EQ(split.document(k), docs[d]) << "document " << d;
    tokens += static_cast<int64_t>(docs[d].size());
  }
  EXPECT_EQ(t, store.split(Split::train).documents());
  EXPECT_EQ(v, store.split(Split::valid).documents());
  EXPECT_EQ(v, 11);  // round(0.2 * 57)
  EXPECT_EQ(store.meta().tokens, tokens);
  EXPECT_EQ(meta.tokens, tokens);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RoundTrip, ::testing::Values(int64_t{1000}, int64_t{65499}, int64_t{70000}));

TEST(Store, IdxBytesFollowMegatronV1) {
  TempDir dir;
  test::write_coded_store(dir / "s", {5, 0, 3});
  const std::string idx = test::read_file(fs::path(dir / "s") / "train.idx");
  ASSERT_EQ(idx.size(), 34u + 3 * 4 + 3 * 8 + 4 * 8);
  EXPECT_EQ(idx.substr(0, 9), std::string("MMIDIDX\0\0", 9));
  auto u64 = [&](size_t at) { uint64_t v; std::memcpy(&v, idx.data() + at, 8); return v; };
  auto i32 = [&](size_t at) { int32_t v; std::memcpy(&v, idx.data() + at, 4); return v; };
  EXPECT_EQ(u64(9), 1u);
  EXPECT_EQ(static_cast<uint8_t>(idx[17]), 4);  // int32: the coded vocabulary is 2^24
  EXPECT_EQ(u64(18), 3u);
  EXPECT_EQ(u64(26), 4u);
  EXPECT_EQ(i32(34), 5);
  EXPECT_EQ(i32(38), 0);
  EXPECT_EQ(i32(42), 3);
  EXPECT_EQ(u64(46), 0u);
  EXPECT_EQ(u64(54), 20u);  // byte pointers
  EXPECT_EQ(u64(62), 20u);
  for (uint64_t d = 0; d < 4; ++d) EXPECT_EQ(u64(70 + 8 * d), d);
  EXPECT_EQ(fs::file_size(fs::path(dir / "s") / "train.bin"), 8u * 4);
  EXPECT_FALSE(fs::exists(fs::path(dir / "s") / "train.bin.tmp")) << "temporary files are renamed away";
  for (const auto& e : fs::directory_iterator(dir / "s"))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST(Store, SplitIsByDocumentDeterministicAndDependsOnTheSeed) {
  const auto a = choose_valid_documents(1000, 0.1, 1), b = choose_valid_documents(1000, 0.1, 1);
  const auto c = choose_valid_documents(1000, 0.1, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(std::accumulate(a.begin(), a.end(), 0), 100);
  EXPECT_EQ(std::accumulate(c.begin(), c.end(), 0), 100);
  // Edge cases: at least one held out when asked, never all, none when not asked.
  auto count = [](const std::vector<uint8_t>& v) { return std::accumulate(v.begin(), v.end(), 0); };
  EXPECT_EQ(count(choose_valid_documents(3, 0.01, 1)), 1);
  EXPECT_EQ(count(choose_valid_documents(3, 0.9, 1)), 2);
  EXPECT_EQ(count(choose_valid_documents(1, 0.5, 1)), 0);
  EXPECT_EQ(count(choose_valid_documents(50, 0.0, 1)), 0);

  TempDir dir;
  std::vector<int64_t> lengths(40, 3);
  test::write_coded_store(dir / "s", lengths, 0.25, 11);
  auto store = TokenStore::open(dir / "s");
  std::set<int64_t> train, valid;
  for (auto [split, out] : {std::pair{Split::train, &train}, std::pair{Split::valid, &valid}})
    for (int64_t d = 0; d < store.split(split).documents(); ++d)
      out->insert(store.split(split).token(d, 0) / test::kStride);
  EXPECT_EQ(valid.size(), 10u);
  EXPECT_EQ(train.size() + valid.size(), 40u);
  for (auto d : valid) EXPECT_EQ(train.count(d), 0u) << "document " << d << " is in both splits";
}

// Megatron's preprocess_data.py --split-sentences writes several sequences per
// document; the document index groups them.
TEST(Store, MegatronSentenceSplitDocumentsAreReadWhole) {
  TempDir dir;
  const fs::path prefix = fs::path(dir.path()) / "corpus_text_document";
  std::vector<uint16_t> tokens = {10, 11, 12, 20, 21, 30, 31, 32, 33};
  std::string bin(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  test::write_file(prefix.string() + ".bin", bin);
  std::string idx("MMIDIDX\0\0", 9);
  auto put = [&](auto v) { idx.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(uint64_t{1});
  idx += static_cast<char>(8);
  put(uint64_t{3});  // sequences: [10 11 12] [20 21] | [30 31 32 33]
  put(uint64_t{3});  // document index 0, 2, 3
  for (int32_t s : {3, 2, 4}) put(s);
  for (int64_t p : {0, 6, 10}) put(p);
  for (int64_t d : {0, 2, 3}) put(d);
  test::write_file(prefix.string() + ".idx", idx);
  auto ds = IndexedDataset::open(prefix.string(), 50000);
  ASSERT_EQ(ds.documents(), 2);
  EXPECT_EQ(ds.document(0), (std::vector<int32_t>{10, 11, 12, 20, 21}));
  EXPECT_EQ(ds.document(1), (std::vector<int32_t>{30, 31, 32, 33}));
  EXPECT_EQ(ds.tokens(), 9);
}

// Newer Megatron-Core appends one sequence-mode byte per sequence to the .idx.
TEST(Store, MegatronCoreSequenceModesAreTolerated) {
  TempDir dir;
  test::write_coded_store(dir / "s", {4, 6});
  const fs::path idx = fs::path(dir / "s") / "train.idx";
  test::write_file(idx, test::read_file(idx) + std::string(2, '\0'));
  auto store = TokenStore::open(dir / "s");
  EXPECT_EQ(store.split(Split::train).documents(), 2);
  EXPECT_EQ(store.split(Split::train).token(1, 5), test::coded_token(1, 5));
}

class Corrupt : public ::testing::TestWithParam<test::Corruption> {};

TEST_P(Corrupt, OpeningNamesTheFileAndTheFault) {
  const auto& c = GetParam();
  TempDir dir;
  test::write_coded_store(dir / "s", {300, 200, 100});
  ASSERT_NO_THROW(TokenStore::open(dir / "s"));
  c.damage(dir / "s");
  try {
    TokenStore::open(dir / "s");
    FAIL() << c.name << ": opened a damaged store";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(c.file), std::string::npos) << message;
    EXPECT_NE(message.find(c.fault), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Corrupt, ::testing::ValuesIn(test::corruptions()),
                         [](const auto& info) { return info.param.name; });

TEST(Store, WriterRejectsIdsOutsideTheVocabulary) {
  TempDir dir;
  std::vector<std::vector<int32_t>> docs = {{1, 2, 3}, {4, 1000}};
  EXPECT_THROW(write_docs(dir / "s", docs, 1000, 0), InputError);
  EXPECT_FALSE(fs::exists(fs::path(dir / "s") / "meta.json")) << "an unfinished store must not look complete";
}

}  // namespace
}  // namespace segtrain::data
