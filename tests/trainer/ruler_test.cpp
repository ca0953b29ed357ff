// RULER's tasks (trainer/eval/ruler_prompts.h) with the tokenizer of every store
// `prepare` writes: prompts that leave the model RULER's tokens_to_generate within
// L and are nearly full, hold RULER's template and needles with the answers in
// them, are deterministic in (seed, length, trial); and RULER's string_match_all
// scoring, from its definition (NVIDIA/RULER scripts/eval/synthetic/constants.py).
#include <gtest/gtest.h>

#include <map>
#include <regex>

#include <csignal>
#include <cstdlib>

#include "common/error.h"
#include "common/signals.h"
#include "data/prompt_tokenizer.h"
#include "data/token_store.h"
#include "test_util.h"
#include "tiny_models.h"
#include "tokenizer_folders.h"
#include "trainer/eval/ruler_prompts.h"
#include "trainer/eval/suite.h"

namespace segtrain::trainer {
namespace {

test::StoresOfEveryTokenizer& stores() { return test::prompt_stores(); }
std::string body_text(const data::PromptTokenizer& tok, const std::vector<int32_t>& ids) {
  return test::prompt_body_text(tok, ids);
}

int64_t occurrences(const std::string& text, const std::string& what) {
  int64_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

const std::vector<std::string> kText = {"static int probe(struct device *dev)", "{", "\treturn dev->id;", "}",
                                        "/* the held-out text of the store */"};

struct Case {
  RulerTask task;
  Haystack haystack;
  const char* name;
};

const std::vector<Case> kCases = {
    {RulerTask::niah_single, Haystack::noise, "niah_single noise"},
    {RulerTask::niah_single, Haystack::text, "niah_single text"},
    {RulerTask::niah_multikey, Haystack::text, "niah_multikey text"},
    {RulerTask::niah_multikey, Haystack::needles, "niah_multikey needles"},
    {RulerTask::niah_multivalue, Haystack::noise, "niah_multivalue noise"},
    {RulerTask::niah_multiquery, Haystack::text, "niah_multiquery text"},
    {RulerTask::vt, Haystack::noise, "vt"},
    {RulerTask::cwe, Haystack::noise, "cwe"},
};

TEST(Ruler, PromptsFitTheLengthWithRulersTemplateAndAnswersInside) {
  for (const auto& [store, store_dir] : stores().by_name) {
    const data::PromptTokenizer tok = data::open_prompt_tokenizer(store_dir);
    for (const auto& c : kCases)
      for (int64_t length : {2048, 8192}) {
        SCOPED_TRACE(store + " " + c.name + " " + std::to_string(length));
        const RulerPrompt p = make_ruler_prompt(c.task, c.haystack, tok, kText, length, 7, 0);
        const auto size = static_cast<int64_t>(p.tokens.size());
        // RULER's tokens_to_generate (scripts/data/synthetic/constants.py).
        EXPECT_EQ(p.max_new_tokens, c.task == RulerTask::vt ? 30 : c.task == RulerTask::cwe ? 120 : 128);
        EXPECT_LE(size + p.max_new_tokens, length);
        EXPECT_GT(size + p.max_new_tokens, length * 9 / 10) << "as much haystack as fits";
        EXPECT_EQ(p.tokens.front() == tok.bos_id(), tok.bos_id() >= 0);
        const std::string text = body_text(tok, p.tokens);
        EXPECT_EQ(make_ruler_prompt(c.task, c.haystack, tok, kText, length, 7, 0).tokens, p.tokens) << "deterministic";
        EXPECT_NE(make_ruler_prompt(c.task, c.haystack, tok, kText, length, 7, 1).answers, p.answers)
            << "each trial draws again";
        // The test's sentencepiece models know only the letters of their tiny corpus: the text is
        // read back only where the tokenizer writes every character (the byte-level ones).
        const std::string probe = "A special-magic VAR QXZ = 12345, they are: 1. kasobe";
        if (tok.decode(tok.encode(probe)) != probe) continue;
        for (const auto& a : p.answers) EXPECT_NE(text.find(a), std::string::npos) << a;
        if (c.task == RulerTask::vt) {
          ASSERT_EQ(p.answers.size(), 5u);
          // The chain in order: VAR A = value, VAR B = VAR A , ... after a worked example with 3-letter names.
          const std::smatch m = [&] {
            std::smatch out;
            std::regex_search(text, out, std::regex("\nVAR " + p.answers[0] + " = ([0-9]{5})\n"));
            return out;
          }();
          ASSERT_EQ(m.size(), 2u) << text.substr(text.size() - 600);
          size_t at = 0;
          for (int j = 1; j < 5; ++j) {
            at = text.find("VAR " + p.answers[j] + " = VAR " + p.answers[j - 1] + " \n", at);
            EXPECT_NE(at, std::string::npos) << j;
          }
          EXPECT_TRUE(text.ends_with("Question: Find all variables that are assigned the value " + m[1].str() +
                                     " in the text above. Answer: According to the chain(s) of variable assignment "
                                     "in the text above, 5 variables are assigned the value " + m[1].str() + ", they are: "));
          EXPECT_EQ(occurrences(text, "Memorize and track the chain(s) of variable assignment"), 2) << "worked example";
          continue;
        }
        if (c.task == RulerTask::cwe) {
          ASSERT_EQ(p.answers.size(), 10u);
          const std::string question = "Below is a numbered list of words.";
          ASSERT_EQ(occurrences(text, question), 2) << "a worked example, then the task";
          const std::string task = text.substr(text.rfind(question));
          // RULER's frequencies: 30 (6 below 4,096 tokens) for the common words.
          for (const auto& w : p.answers)
            EXPECT_EQ(occurrences(task, ". " + w + " ") + occurrences(task, ". " + w + "\n"), length >= 4096 ? 30 : 6) << w;
          EXPECT_TRUE(text.ends_with("\nQuestion: What are the 10 most common words in the above list? Answer: The "
                                     "top 10 words that appear most often in the list are:"));
          continue;
        }
        // Needle tasks: RULER's needle sentence for every answer, and its question.
        const bool plural = c.task == RulerTask::niah_multivalue || c.task == RulerTask::niah_multiquery;
        EXPECT_TRUE(text.starts_with(plural ? "Some special magic numbers are hidden within the following text."
                                            : "A special magic number is hidden within the following text."));
        EXPECT_EQ(p.answers.size(), plural ? 4u : 1u);
        std::smatch q;
        ASSERT_TRUE(std::regex_search(text, q, std::regex(plural ? "What are all the special magic numbers for (.*) "
                                                                   "mentioned in the provided text\\? The special magic "
                                                                   "numbers for (.*) mentioned in the provided text are$"
                                                                 : "What is the special magic number for (.*) mentioned "
                                                                   "in the provided text\\? The special magic number for "
                                                                   "(.*) mentioned in the provided text is$")));
        EXPECT_EQ(q[1].str(), q[2].str());
        const std::string query = q[1].str();
        std::vector<std::string> keys;
        if (c.task == RulerTask::niah_multiquery) {
          std::smatch k;
          ASSERT_TRUE(std::regex_match(query, k, std::regex("([a-z]+-[a-z]+), ([a-z]+-[a-z]+), ([a-z]+-[a-z]+), and ([a-z]+-[a-z]+)")));
          keys = {k[1], k[2], k[3], k[4]};
        } else {
          ASSERT_TRUE(std::regex_match(query, std::regex("[a-z]+-[a-z]+"))) << query;
          keys.assign(p.answers.size(), query);
        }
        for (size_t i = 0; i < p.answers.size(); ++i)
          EXPECT_EQ(occurrences(text, "One of the special magic numbers for " + keys[i] + " is: " + p.answers[i] + "."), 1);
        const int64_t needles = occurrences(text, "One of the special magic numbers for ");
        if (c.task == RulerTask::niah_multikey && c.haystack == Haystack::text) {
          EXPECT_EQ(needles, 4) << "3 distractors";
        }
        if (c.haystack == Haystack::needles) {
          EXPECT_GT(needles, 10) << "a haystack of distractor needles";
        }
        if (c.haystack == Haystack::noise) {
          EXPECT_GT(occurrences(text, "The grass is green. The sky is blue."), 5);
        }
        if (c.haystack == Haystack::text) {
          EXPECT_GT(occurrences(text, "\treturn dev->id;\n"), 2);
        }
        for (const auto& a : p.answers) EXPECT_TRUE(std::regex_match(a, std::regex("[1-9][0-9]{6}"))) << a;
      }
    // Too short for even one unit: refused, naming the task and the length.
    try {
      make_ruler_prompt(RulerTask::niah_single, Haystack::noise, tok, kText, 150, 7, 0);
      ADD_FAILURE() << "150 tokens cannot hold a prompt and 128 new tokens";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("length 150 is too short for a niah_single prompt"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(make_ruler_prompt(RulerTask::niah_single, Haystack::text, tok, {}, 1024, 7, 0), InputError);
  }
}

// RULER's string_match_all, per output: sum(r.lower() in pred.lower() for r in refs) / len(refs),
// after its postprocessing (control characters become newlines, ends stripped).
// A stop requested (SIGTERM under stop_at_checkpoint, as `train` and `experiment`
// install it) ends a prompt task before its next prompt: minutes of 16k prompts
// on a CPU do not stand between a signal and the exit. In a child process, as
// the stop cannot be taken back.
TEST(Ruler, AStopEndsAPromptTaskBeforeItsNextPrompt) {
  const std::string store_path = stores().by_name.at("bpe");
  auto stopped_task = [&] {
    const data::TokenStore store = data::TokenStore::open(store_path);
    EvalConfig eval;
    eval.tasks = {"niah_single"};
    eval.task["niah_single"] = {{1024}, 3, "noise"};
    const EvalSuite suite(eval, {1024}, {}, "train", 1);
    const data::IndexedDataset& split = store.split(data::Split::train);
    const auto prompts = suite.open_prompts(store_path, split, "test");
    models::TransformerLM model(test::tiny_model_config(models::Arch::llama, store.vocab_size(), 2048));
    install_signal_handlers(OnSignal::stop_at_checkpoint);
    std::raise(SIGTERM);
    try {
      (void)suite.tasks().front()->run(model, {&split, &*prompts});
    } catch (const Interrupted&) {
      std::_Exit(43);
    }
    std::_Exit(0);
  };
  EXPECT_EXIT(stopped_task(), ::testing::ExitedWithCode(43), "");
}

TEST(Ruler, ScoringIsRulersStringMatchAll) {
  EXPECT_EQ(ruler_score(" 1234567.", {"1234567"}), 1.0);
  EXPECT_EQ(ruler_score("The number is 91234567", {"1234567"}), 1.0) << "a substring, as RULER's `in`";
  EXPECT_EQ(ruler_score("nothing here", {"1234567"}), 0.0);
  EXPECT_EQ(ruler_score("QWERT, ASDFG and zxcvb", {"qwert", "asdfg", "ZXCVB", "POIUY"}), 0.75);
  EXPECT_EQ(ruler_score("1. apple\t2. pear", {"apple 2"}), 0.0) << "a tab becomes a newline";
  EXPECT_EQ(ruler_score("1. apple\t2. pear", {"pear"}), 1.0);
  EXPECT_EQ(ruler_score("anything", {}), 0.0);
}

}  // namespace
}  // namespace segtrain::trainer
