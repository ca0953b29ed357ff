// BpeTokenizer::decode against `tokenizers`' decode(ids, skip_special_tokens=False):
// bpe_decode_reference.py trains byte-level BPEs on linux-doc (GPT-2-, Llama-3-,
// Qwen2-like, byte fallback, added tokens that are not special) and writes ids with
// tokenizers' text for each; every one must decode to the same bytes here.
#include <cstdint>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/bpe_decoder.h"
#include "data/bpe_tokenizer.h"
#include "test_util.h"

namespace segtrain::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(BpeDecode, Utf8LossyReplacesEachMaximalInvalidSubsequence) {
  // Python's bytes.decode("utf-8", "replace") on the same bytes (and Rust's from_utf8_lossy).
  const std::string r = "\xEF\xBF\xBD";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plain", "plain"},
      {"caf\xC3\xA9", "caf\xC3\xA9"},
      {"\xE2\x82", r},
      {"\xE2\x82" "A", r + "A"},
      {"\xF0\x9F\x98", r},
      {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},
      {"\xED\xA0\x80", r + r + r},  // a surrogate
      {"\xC0\xAF", r + r},          // overlong
      {"\xF4\x90\x80\x80", r + r + r + r},
      {"\xE0\x80" "A", r + r + "A"},
      {"\xFF", r},
      {"a\x80" "b", "a" + r + "b"},
  };
  for (const auto& [in, out] : cases) EXPECT_EQ(utf8_lossy(in), out) << json(in).dump(-1, ' ', false, json::error_handler_t::replace);
}

TEST(BpeDecode, EqualsTokenizersDecodeOnLinuxDocAndRandomIds) {
  test::TempDir dir;
  const std::string command = std::string(SEGTRAIN_PYTHON) + " " + test::shell_quote(std::string(SEGTRAIN_SOURCE_DIR) + "/tests/data/bpe_decode_reference.py") +
                              " --out " + test::shell_quote(dir.path().string());
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const json all = json::parse(test::read_file(dir.path() / "cases.json"));
  ASSERT_EQ(all.size(), 5u);
  for (const auto& tokenizer : all) {
    const std::string name = tokenizer["name"];
    const BpeTokenizer bpe = BpeTokenizer::load(tokenizer["tokenizer_json"].get<std::string>());
    int64_t mismatched = 0, cases = 0, bytes = 0;
    for (const auto& c : tokenizer["cases"]) {
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      const std::string expected = c["text"], got = bpe.decode(ids);
      ++cases;
      bytes += static_cast<int64_t>(expected.size());
      if (got != expected && ++mismatched <= 3) {
        size_t at = 0;
        while (at < got.size() && at < expected.size() && got[at] == expected[at]) ++at;
        ADD_FAILURE() << name << ": case " << cases - 1 << " differs at byte " << at << ": segtrain "
                      << json(got.substr(at, 40)).dump(-1, ' ', false, json::error_handler_t::replace) << " tokenizers "
                      << json(expected.substr(at, 40)).dump(-1, ' ', false, json::error_handler_t::replace);
      }
    }
    EXPECT_EQ(mismatched, 0) << name << ": " << mismatched << " of " << cases << " decodes differ";
    EXPECT_GT(bytes, 300000) << name << ": the reference decoded too little text to mean much";
  }
}

TEST(BpeDecode, AnUnsupportedDecoderIsAnInputErrorNamingTheField) {
  test::TempDir dir;
  json j = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}}}, {"merges", json::array()}}},
            {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
            {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "ByteLevel"}}, {{"type", "WordPiece"}}}}}}};
  test::write_file(dir.path() / "tokenizer.json", j.dump());
  const BpeTokenizer bpe = BpeTokenizer::load((dir.path() / "tokenizer.json").string());  // encoding still works
  try {
    bpe.decode({0, 1});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json: decoder.decoders[1].type: 'WordPiece' is not supported"),
              std::string::npos)
        << e.what();
  }
  j.erase("decoder");  // none: decoded as ByteLevel
  test::write_file(dir.path() / "tokenizer.json", j.dump());
  EXPECT_EQ(BpeTokenizer::load((dir.path() / "tokenizer.json").string()).decode({0, 1, 0}), "aba");
}

// A file's ids may leave gaps up to 2^31 - 1: the decoder keeps the tokens it has, not a table
// as long as the largest id (64 GiB of empty strings for this one; fuzz_hf_tokenizer found it).
TEST(BpeDecode, SparseIdsUpTo2To31AreDecodedWithoutATableThatLong) {
  test::TempDir dir;
  const json j = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", INT32_MAX}}}, {"merges", json::array()}}},
                  {"added_tokens", {{{"id", 1000000000}, {"content", "<x>"}, {"special", true}}}},
                  {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}};
  test::write_file(dir.path() / "tokenizer.json", j.dump());
  const BpeTokenizer bpe = BpeTokenizer::load((dir.path() / "tokenizer.json").string());
  EXPECT_EQ(bpe.decode({0, INT32_MAX, 7, 1000000000, 0}), "ab<x>a") << "id 7 has no token and decodes to nothing";
}

}  // namespace
}  // namespace segtrain::data
