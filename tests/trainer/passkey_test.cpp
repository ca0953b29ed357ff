// Passkey retrieval with the tokenizer of any store `prepare` writes (sentencepiece,
// an HF folder's sentencepiece model, byte-level BPE with and without BOS): prompts
// that fit the length, hold the key, start with BOS where the store's documents do
// and end with the answer's ids in context; one-forward scoring against a real
// greedy decoding loop.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "common/error.h"
#include "data/prepare.h"
#include "data/prompt_tokenizer.h"
#include "data/token_store.h"
#include "models/modules/transformer.h"
#include "test_util.h"
#include "tiny_models.h"
#include "tokenizer_folders.h"
#include "trainer/eval/passkey.h"

namespace segtrain::trainer {
namespace {

namespace fs = std::filesystem;

test::StoresOfEveryTokenizer& stores() { return test::prompt_stores(); }
std::string body_text(const data::PromptTokenizer& tok, const std::vector<int32_t>& ids) {
  return test::prompt_body_text(tok, ids);
}

TEST(Passkey, PromptsWithEveryStoreTokenizerFitHideTheKeyAndEndWithTheAnswer) {
  for (const auto& [name, store_dir] : stores().by_name) {
    const data::PromptTokenizer tok = data::open_prompt_tokenizer(store_dir);
    const bool bos = data::read_meta(store_dir).add_bos;
    EXPECT_EQ(bos, name == "hf-sp" || name == "bpe-bos") << name;
    for (auto style : {PasskeyStyle::digits, PasskeyStyle::recall})
      for (int64_t length : {384, 1024}) {
        SCOPED_TRACE(name + " " + enum_name(kPasskeyStyles, style) + " " + std::to_string(length));
        const int64_t filler = static_cast<int64_t>(
            tok.encode(style == PasskeyStyle::digits ? " The grass is green. The sky is blue. The sun is yellow. Here "
                                                       "we go. There and back again."
                                                     : " the quiet river meets the old bridge near the market .")
                .size());
        std::set<std::string> answers;
        for (int64_t trial = 0; trial < 6; ++trial) {
          const PasskeyPrompt p = make_passkey_prompt(tok, style, length, 7, trial);
          const auto total = static_cast<int64_t>(p.tokens.size() + p.answer_ids.size());
          EXPECT_LE(total, length) << "the prompt and its answer must fit";
          EXPECT_GT(total, length - 2 * filler) << "filler should fill the length";
          EXPECT_GE(p.depth, 0.0);
          EXPECT_LE(p.depth, 1.0);
          ASSERT_FALSE(p.answer_ids.empty());
          // BOS first exactly where the store's documents start with it, and nowhere else.
          EXPECT_EQ(p.tokens.front() == tok.bos_id(), bos);
          if (bos) {
            EXPECT_EQ(std::count(p.tokens.begin(), p.tokens.end(), tok.bos_id()), 1);
          }
          const std::string text = body_text(tok, p.tokens);
          const auto first = text.find(p.answer);
          ASSERT_NE(first, std::string::npos) << text;
          if (style == PasskeyStyle::digits) {
            EXPECT_NE(text.find(p.answer, first + 1), std::string::npos);
          }
          const std::string question = style == PasskeyStyle::digits ? "The pass key is" : "recall : the password of";
          ASSERT_NE(text.rfind(question), std::string::npos) << text;
          EXPECT_GT(text.rfind(question), first) << "the question comes after the key";
          EXPECT_TRUE(text.ends_with(style == PasskeyStyle::digits ? "The pass key is" : " is")) << text;
          // The answer's ids are what encoding the whole text adds to the prompt's ids.
          std::vector<int32_t> whole = tok.encode(text + " " + p.answer);
          if (bos) whole.insert(whole.begin(), tok.bos_id());
          std::vector<int32_t> joined = p.tokens;
          joined.insert(joined.end(), p.answer_ids.begin(), p.answer_ids.end());
          EXPECT_EQ(whole, joined);
          std::string said = tok.decode(p.answer_ids);
          said.erase(0, said.find_first_not_of(' '));
          EXPECT_EQ(said, p.answer);
          EXPECT_EQ(make_passkey_prompt(tok, style, length, 7, trial).tokens, p.tokens) << "not deterministic";
          answers.insert(p.answer);
        }
        EXPECT_GE(answers.size(), 5u) << "keys should vary between trials";
      }
    EXPECT_THROW(make_passkey_prompt(tok, PasskeyStyle::digits, 40, 7, 0), InputError) << name;
  }
}

// Greedy decoding as a generation loop: one forward over the whole sequence per new token.
std::vector<int32_t> greedy(models::TransformerLM& model, std::vector<int32_t> ids, size_t count) {
  torch::NoGradGuard no_grad;
  std::vector<int32_t> out;
  for (size_t k = 0; k < count; ++k) {
    std::vector<int64_t> x(ids.begin(), ids.end());
    const auto n = static_cast<int64_t>(x.size());
    const at::Tensor logits = model->forward(torch::tensor(x).unsqueeze(0), torch::arange(n).unsqueeze(0));
    const auto next = static_cast<int32_t>(logits[0][n - 1].argmax().item<int64_t>());
    out.push_back(next);
    ids.push_back(next);
  }
  return out;
}

TEST(Passkey, OneForwardScoringIsGreedyDecoding) {
  for (const std::string name : {"bpe-bos", "sp.model"}) {
    const data::PromptTokenizer tok = data::open_prompt_tokenizer(stores().by_name.at(name));
    torch::manual_seed(3);
    models::TransformerLM model(
        test::tiny_model_config(models::Arch::llama, tok.vocab_size(), 512, /*grouped_kv=*/true));
    model->eval();
    int64_t greedy_correct = 0;
    for (int64_t trial = 0; trial < 5; ++trial) {
      SCOPED_TRACE(name + " trial " + std::to_string(trial));
      PasskeyPrompt p = make_passkey_prompt(tok, PasskeyStyle::digits, 256, 9, trial);
      ASSERT_GE(p.answer_ids.size(), 2u) << "a key of several tokens tests every answer position";
      const auto generated = greedy(model, p.tokens, p.answer_ids.size());
      greedy_correct += generated == p.answer_ids;
      EXPECT_EQ(passkey_correct(model, p), generated == p.answer_ids);
      // What the model does say is scored correct, and any one token off is not.
      PasskeyPrompt said = p;
      said.answer_ids = generated;
      EXPECT_TRUE(passkey_correct(model, said));
      for (size_t k = 0; k < generated.size(); ++k) {
        PasskeyPrompt off = said;
        off.answer_ids[k] = (off.answer_ids[k] + 1) % static_cast<int32_t>(tok.vocab_size());
        EXPECT_FALSE(passkey_correct(model, off)) << "answer token " << k;
      }
    }
    const auto results = passkey_accuracy(model, tok, PasskeyStyle::digits, {256}, 5, 9);
    ASSERT_EQ(results.size(), 1u);
    EXPECT_EQ(results[0].length, 256);
    EXPECT_EQ(results[0].trials, 5);
    EXPECT_EQ(results[0].correct, static_cast<double>(greedy_correct));
    EXPECT_FALSE(model->is_training()) << "scoring keeps the model's mode";
  }
}

}  // namespace
}  // namespace segtrain::trainer
