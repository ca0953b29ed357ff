#pragma once
// RULER's synthetic tasks (Hsieh et al. 2024, "RULER: What's the Real Context Size
// of Your Long-Context Language Models?"): needle in a haystack with its variants,
// variable tracking and common-words extraction. The templates, needle sentences,
// answer prefixes, the tokens the model may write and the scoring are RULER's
// (NVIDIA/RULER at c3f5e3b, scripts/data/synthetic/ and scripts/eval/synthetic/);
// each prompt is written with the store's own tokenizer and holds as many haystack
// units as fit with the tokens the model may write in L tokens (RULER's binary
// search). Where segtrain differs from RULER (docs/training.md, "RULER tasks"):
// the real-text haystack is lines of the store's held-out documents (RULER: Paul
// Graham's essays cut into sentences); keys are adjective-noun pairs of a list of
// our own (RULER: wonderwords' lists); common-words extraction draws made-up words
// of two or three syllables (RULER: English words); the length counts BOS where the
// store's documents start with one; every draw is deterministic in (seed, task,
// length, trial).
#include <cstdint>
#include <string>
#include <vector>

#include "data/prompt_tokenizer.h"

namespace segtrain::trainer {

enum class RulerTask { niah_single, niah_multikey, niah_multivalue, niah_multiquery, vt, cwe };

// What fills a needle task's context: RULER's repeated noise sentence, lines of
// the store's held-out text, or distractor needles (RULER's niah_multikey_2).
enum class Haystack { noise, text, needles };

struct RulerPrompt {
  std::vector<int32_t> tokens;       // [BOS] the task's text, ending with its answer prefix
  std::vector<std::string> answers;  // each found in the output scores 1 / answers.size()
  int64_t max_new_tokens = 0;        // RULER's tokens_to_generate
  int64_t units = 0;                 // haystack units (lines, or distinct words for cwe) that fit
};

// RULER's tokens_to_generate: 128 for the needle tasks, 30 for vt, 120 for cwe.
int64_t ruler_tokens_to_generate(RulerTask task);

// The prompt of `trial` at `length`: tokens.size() + max_new_tokens <= length, with
// as many haystack units as fit. text_lines: the lines of the real-text haystack
// (Haystack::text only). InputError when even one unit does not fit.
RulerPrompt make_ruler_prompt(RulerTask task, Haystack haystack, const data::PromptTokenizer& tokenizer,
                              const std::vector<std::string>& text_lines, int64_t length, uint64_t seed,
                              int64_t trial);

// RULER's string_match_all for one output: the share of `answers` it contains,
// case-insensitively, after RULER's postprocessing (control characters become
// newlines, then the ends are stripped).
double ruler_score(const std::string& output, const std::vector<std::string>& answers);

}  // namespace segtrain::trainer
