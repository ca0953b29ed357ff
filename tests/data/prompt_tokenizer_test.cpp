// open_prompt_tokenizer: a store's own tokenizer, of each kind `prepare` writes, encodes
// a text exactly as the store's documents hold it (between their BOS and EOS), decodes
// it back, knows the documents' BOS; a store without its tokenizer is a one-line
// InputError naming the store and the file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "data/prepare.h"
#include "data/prompt_tokenizer.h"
#include "data/token_store.h"
#include "data/tokenizer_identity.h"
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

  // meta.json may name only a file inside the store: not one beside it, even a real tokenizer.
  const fs::path leaky = dir.path() / "leaky";
  fs::copy(stores().by_name.at("bpe"), leaky, fs::copy_options::recursive);
  fs::create_directories(dir.path() / "outside");
  fs::copy_file(leaky / "tokenizer.json", dir.path() / "outside/tokenizer.json");
  for (const std::string& name :
       {std::string("hf:../outside/tokenizer.json"), "hf:" + (dir.path() / "outside/tokenizer.json").string()}) {
    auto meta = nlohmann::json::parse(test::read_file(leaky / "meta.json"));
    meta["tokenizer"] = name;
    test::write_file(leaky / "meta.json", meta.dump());
    expect_refused(leaky.string(), {(leaky / "meta.json").string() + ": \"tokenizer\" is '" + name.substr(3) +
                                    "': expected the name of a file inside '" + leaky.string() + "'"});
  }
}

// The identity train and eval compare (data/tokenizer_identity.h): one sentencepiece
// model is the same tokenizer as a .model file, as an HF folder and in either store;
// BOS or not, a BPE is itself; another tokenizer differs by its vocabulary or, of the
// same size, by its ids; a checkpoint's record reads back as it was written.
TEST(TokenizerIdentity, TheSameTokenizerInEveryFormMatchesAndAnotherDoesNot) {
  auto& s = stores();
  const auto sp_store = store_tokenizer_identity(s.by_name.at("sp.model"));
  const auto hf_sp_store = store_tokenizer_identity(s.by_name.at("hf-sp"));
  const auto hf_sp_folder = folder_tokenizer_identity(s.dir / "hf-sp");
  ASSERT_TRUE(sp_store && hf_sp_store && hf_sp_folder);
  EXPECT_FALSE(sp_store->probe_ids.empty());
  EXPECT_EQ(identity_difference(*sp_store, *hf_sp_folder), "");
  EXPECT_EQ(identity_difference(*hf_sp_store, *hf_sp_folder), "");
  const auto bpe_store = store_tokenizer_identity(s.by_name.at("bpe"));
  const auto bpe_bos_folder = folder_tokenizer_identity(s.dir / "bpe-bos");
  ASSERT_TRUE(bpe_store && bpe_bos_folder);
  EXPECT_EQ(identity_difference(*bpe_store, *bpe_bos_folder), "");
  EXPECT_EQ(identity_difference(*sp_store, *bpe_store).rfind("vocabulary " + std::to_string(sp_store->vocab_size) +
                                                                 " (sentencepiece) vs " +
                                                                 std::to_string(bpe_store->vocab_size) + " (hf-bpe)",
                                                             0),
            0u)
      << identity_difference(*sp_store, *bpe_store);

  // Two BPEs of the same size: words of the same lengths, other letters.
  test::write_byte_bpe_folder(s.dir / "bpe-one", false, "abc def ghi");
  test::write_byte_bpe_folder(s.dir / "bpe-two", false, "jkl mno pqr");
  const auto one = folder_tokenizer_identity(s.dir / "bpe-one");
  const auto two = folder_tokenizer_identity(s.dir / "bpe-two");
  ASSERT_TRUE(one && two);
  ASSERT_EQ(one->vocab_size, two->vocab_size);
  EXPECT_EQ(identity_difference(*one, *two),
            "the same vocabulary size (" + std::to_string(one->vocab_size) + ") but other ids for the same text");

  std::string store;
  const TokenizerIdentity back = identity_from_json(identity_to_json(*bpe_store, "some/store"), "record", &store);
  EXPECT_EQ(store, "some/store");
  EXPECT_EQ(identity_difference(back, *bpe_store), "");
  EXPECT_EQ(back.probe, kTokenizerProbe);
  EXPECT_THROW(identity_from_json("{\"kind\": 3}", "record"), InputError);
  EXPECT_FALSE(folder_tokenizer_identity(s.dir / "nowhere"));
}

}  // namespace
}  // namespace segtrain::data
