// open_prompt_tokenizer: a store's own tokenizer, of each kind `prepare` writes, encodes
// a text exactly as the store's documents hold it (between their BOS and EOS), decodes
// it back, knows the documents' BOS; a store without its tokenizer is a one-line
// InputError naming the store and the file.
#include <gtest/gtest.h>

#include "common/error.h"
#include "data/prepare.h"
#include "data/prompt_tokenizer.h"
#include "data/token_store.h"
#include "test_util.h"
#include "tokenizer_folders.h"

namespace segtrain::data {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTexts = {
    "There is an important info hidden inside a lot of irrelevant text. The pass key is 43127. Remember it.",
    "The grass is green. The sky is blue. What is the pass key? The pass key is 43127",
    "recall : the password of bakodi is mesupona . the quiet river meets the old bridge near the market .",
    "Here we go. There and back again. I will quiz you about the important information there."};

test::StoresOfEveryTokenizer& stores() {
  static test::StoresOfEveryTokenizer s(kTexts);
  return s;
}

TEST(PromptTokenizer, EncodesAsTheStoresDocumentsAndDecodesBack) {
  const std::map<std::string, std::pair<std::string, bool>> expected = {
      {"sp.model", {"sentencepiece", false}}, {"hf-sp", {"hf-sentencepiece", true}},
      {"bpe-bos", {"hf-bpe", true}}, {"bpe", {"hf-bpe", false}}};
  for (const auto& [name, store_dir] : stores().by_name) {
    SCOPED_TRACE(name);
    const PromptTokenizer tok = open_prompt_tokenizer(store_dir);
    const TokenStore store = TokenStore::open(store_dir);
    EXPECT_EQ(tok.kind(), expected.at(name).first);
    EXPECT_EQ(tok.vocab_size(), store.vocab_size());
    const bool bos = expected.at(name).second;
    EXPECT_EQ(store.meta().add_bos, bos);
    EXPECT_EQ(tok.bos_id(), bos ? store.meta().bos_id : -1);
    if (bos) {
      EXPECT_GE(tok.bos_id(), 0);
    }
    const auto& train = store.split(Split::train);
    ASSERT_EQ(train.documents(), static_cast<int64_t>(kTexts.size()));
    for (size_t d = 0; d < kTexts.size(); ++d) {
      std::vector<int32_t> document = train.document(static_cast<int64_t>(d));
      // [BOS] ids EOS
      if (bos) {
        ASSERT_EQ(document.front(), tok.bos_id());
        document.erase(document.begin());
      }
      ASSERT_EQ(document.back(), store.eos_id());
      document.pop_back();
      const auto ids = tok.encode(kTexts[d]);
      EXPECT_EQ(ids, document) << kTexts[d];
      EXPECT_EQ(tok.decode(ids), kTexts[d]);
    }
    EXPECT_TRUE(tok.encode("").empty());
    if (name.starts_with("bpe")) {
      EXPECT_GT(tok.encode(" The pass key is").size(), 1u);
    }
  }
}

// Each error: one line, InputError, naming the store's file.
void expect_refused(const std::string& store_dir, const std::vector<std::string>& needles) {
  try {
    open_prompt_tokenizer(store_dir);
    ADD_FAILURE() << store_dir << ": opened";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    for (const auto& n : needles) EXPECT_NE(what.find(n), std::string::npos) << "'" << n << "' not in: " << what;
  }
}

TEST(PromptTokenizer, AStoreWithoutItsTokenizerIsRefusedNamingTheStoreAndTheFile) {
  test::TempDir dir;
  // A Megatron store made elsewhere: re-split by `prepare` without a tokenizer.
  const std::string source = stores().by_name.at("bpe") + "/train";
  PrepareOptions o;
  o.inputs = {source + ".bin"};
  o.out = dir / "megatron";
  o.vocab_size = TokenStore::open(stores().by_name.at("bpe")).vocab_size();
  o.valid_fraction = 0;
  prepare_store(o);
  expect_refused(o.out, {o.out + "/meta.json", "records no tokenizer", "megatron"});

  for (const auto& [name, file] : std::vector<std::pair<std::string, std::string>>{
           {"bpe", "tokenizer.json"}, {"sp.model", "tokenizer.model"}, {"hf-sp", "tokenizer.model"}}) {
    const fs::path copy = dir.path() / ("no-" + file + "-" + name);
    fs::copy(stores().by_name.at(name), copy, fs::copy_options::recursive);
    fs::remove(copy / file);
    expect_refused(copy.string(), {(copy / file).string(), "missing", copy.string()});
  }
  expect_refused((dir.path() / "nothing").string(), {"meta.json"});
}

}  // namespace
}  // namespace segtrain::data
