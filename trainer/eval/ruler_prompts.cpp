#include "trainer/eval/ruler_prompts.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <random>
#include <set>

#include "common/error.h"

namespace segtrain::trainer {
namespace {

using Rng = std::mt19937_64;

// RULER's noise haystack: one line a unit.
constexpr const char* kNoise = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

// Keys of the needle tasks are "<adjective>-<noun>" (RULER draws wonderwords' lists; these are our own).
const std::vector<std::string>& adjectives() {
  static const std::vector<std::string> words = {
      "ancient", "bitter", "brave",  "bright",  "calm",   "clever", "crimson", "curious", "damp",    "eager",
      "early",   "empty",  "fancy",  "fierce",  "fragile", "gentle", "giant",  "golden",  "hollow",  "humble",
      "hungry",  "icy",    "jolly",  "lively",  "lonely", "loud",   "lucky",   "marble",  "mellow",  "misty",
      "narrow",  "noble",  "odd",    "pale",    "plain",  "proud",  "quick",   "quiet",   "rapid",   "rare",
      "restless", "rusty", "silent", "silver",  "sleepy", "smooth", "sour",    "steep",   "swift",   "tender"};
  return words;
}
const std::vector<std::string>& nouns() {
  static const std::vector<std::string> words = {
      "anchor",  "apple",   "badger",  "basket",  "beacon", "bridge", "candle",  "canyon", "castle",  "cedar",
      "comet",   "compass", "cottage", "crystal", "desert", "dragon", "eagle",   "elephant", "falcon", "feather",
      "forest",  "garden",  "glacier", "harbor",  "helmet", "island", "jacket",  "kettle", "lantern", "lemon",
      "meadow",  "mirror",  "mountain", "needle", "orchard", "otter", "palace",  "pebble", "piano",   "pigeon",
      "planet",  "river",   "saddle",  "shadow",  "spider", "statue", "thunder", "tunnel", "violin",  "walnut"};
  return words;
}

std::string pick(const std::vector<std::string>& list, Rng& rng) { return list[rng() % list.size()]; }
std::string word_key(Rng& rng) { return pick(adjectives(), rng) + "-" + pick(nouns(), rng); }
std::string number(Rng& rng, int64_t lo, int64_t hi) { return std::to_string(lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1))); }
std::string seven_digits(Rng& rng) { return number(rng, 1000000, 9999999); }  // RULER's randint(10**6, 10**7 - 1)

std::string upper_name(Rng& rng, int letters) {
  std::string name;
  for (int i = 0; i < letters; ++i) name += static_cast<char>('A' + rng() % 26);
  return name;
}

// `count` distinct names of `letters` uppercase letters.
std::vector<std::string> distinct_names(Rng& rng, int letters, size_t count) {
  std::vector<std::string> names;
  while (names.size() < count)
    if (std::string n = upper_name(rng, letters); std::find(names.begin(), names.end(), n) == names.end())
      names.push_back(n);
  return names;
}

// A made-up word of three consonant-vowel syllables (cwe's words): all of one length, so
// no word is found inside another by RULER's substring match.
constexpr int64_t kMadeUpWords = 70 * 70 * 70;
std::string made_up_word(Rng& rng) {
  static const char* consonants = "bdfgklmnprstvz";
  static const char* vowels = "aeiou";
  std::string word;
  for (int i = 0; i < 3; ++i) {
    word += consonants[rng() % 14];
    word += vowels[rng() % 5];
  }
  return word;
}

// k distinct indices of [0, n), in draw order (Python's random.sample).
std::vector<int64_t> sample(Rng& rng, int64_t n, int64_t k) {
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  for (int64_t i = 0; i < k; ++i) std::swap(all[static_cast<size_t>(i)], all[static_cast<size_t>(i + static_cast<int64_t>(rng() % static_cast<uint64_t>(n - i)))]);
  all.resize(static_cast<size_t>(k));
  return all;
}

template <class T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng() % i]);
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? separator : "") + parts[i];
  return out;
}

// Python's ", ".join(q[:-1]) + ", and " + q[-1], or the one query.
std::string query_list(const std::vector<std::string>& queries) {
  if (queries.size() == 1) return queries.front();
  std::vector<std::string> head(queries.begin(), queries.end() - 1);
  return join(head, ", ") + ", and " + queries.back();
}

// A prompt's text and answers for a number of haystack units.
struct Draft {
  std::string text;
  std::vector<std::string> answers;
};
using Writer = std::function<Draft(int64_t units)>;

// The most units (at least `fewest`) whose prompt fits `budget` tokens: an estimate
// from a small draft, then doubling and bisection, as RULER's search.
RulerPrompt fit(const Writer& write, const data::PromptTokenizer& tokenizer, int64_t length, int64_t max_new,
                int64_t fewest, const std::string& task) {
  const int64_t budget = length - max_new;
  auto size = [&](int64_t units) { return static_cast<int64_t>(tokenizer.encode_prompt(write(units).text).size()); };
  const int64_t smallest = budget > 0 ? size(fewest) : 0;
  if (budget <= 0 || smallest > budget)
    throw InputError("length " + std::to_string(length) + " is too short for a " + task + " prompt: with " +
                     std::to_string(fewest) + " haystack unit(s) it takes " + std::to_string(smallest) +
                     " tokens, and the model may write " + std::to_string(max_new) + " more");
  const int64_t probe = fewest + 16;
  const double per_unit = std::max(1.0, static_cast<double>(size(probe) - smallest) / 16.0);
  int64_t lo = fewest, hi = std::max(fewest + 1, fewest + static_cast<int64_t>((budget - smallest) / per_unit));
  // Every unit adds at least a separator; a bound keeps a unit that adds no token from doubling forever.
  const int64_t most = fewest + 4 * budget;
  while (hi < most && size(hi) <= budget) lo = hi, hi = std::min(most, hi * 2);
  if (hi >= most && size(hi) <= budget) lo = hi;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (size(mid) <= budget ? lo : hi) = mid;
  }
  const Draft draft = write(lo);
  return {tokenizer.encode_prompt(draft.text), draft.answers, max_new, lo};
}

// --- needle in a haystack (RULER's niah.py) -------------------------------------

struct NeedleShape {
  int keys = 1, values = 1, queries = 1;
};

NeedleShape needle_shape(RulerTask task, Haystack haystack) {
  switch (task) {
    case RulerTask::niah_multikey: return haystack == Haystack::needles ? NeedleShape{1, 1, 1} : NeedleShape{4, 1, 1};
    case RulerTask::niah_multivalue: return {1, 4, 1};
    case RulerTask::niah_multiquery: return {4, 1, 4};
    default: return {1, 1, 1};
  }
}

std::string needle(const std::string& key, const std::string& value) {
  return "One of the special magic numbers for " + key + " is: " + value + ".";
}

Writer needle_writer(RulerTask task, Haystack haystack, const std::vector<std::string>& text_lines, uint64_t seed) {
  return [=, &text_lines](int64_t units) {
    Rng rng(seed);
    const NeedleShape shape = needle_shape(task, haystack);
    std::vector<std::string> keys, needles;
    std::vector<std::vector<std::string>> values(static_cast<size_t>(shape.keys));
    while (keys.size() < static_cast<size_t>(shape.keys))
      if (std::string k = word_key(rng); std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    for (size_t k = 0; k < keys.size(); ++k)
      for (int v = 0; v < shape.values; ++v) {
        values[k].push_back(seven_digits(rng));
        needles.push_back(needle(keys[k], values[k].back()));
      }
    shuffle(needles, rng);
    std::vector<std::string> queries, answers;
    for (int64_t i : sample(rng, shape.keys, shape.queries)) {
      queries.push_back(keys[static_cast<size_t>(i)]);
      for (const auto& v : values[static_cast<size_t>(i)]) answers.push_back(v);
    }
    std::vector<std::string> lines;
    const auto n = static_cast<int64_t>(needles.size());
    if (haystack == Haystack::text) {
      // RULER's essay placement: depths drawn from round(linspace(0, 100, 40)), needle i after the
      // first units * depth_i / 100 lines.
      const size_t start = rng() % text_lines.size();
      std::vector<int64_t> at;
      for (int64_t d : sample(rng, 40, n)) at.push_back(units * std::lround(100.0 * static_cast<double>(d) / 39.0) / 100);
      std::sort(at.begin(), at.end());
      size_t next = 0;
      for (int64_t u = 0; u <= units; ++u) {
        while (next < at.size() && at[next] == u) lines.push_back(needles[next++]);
        if (u < units) lines.push_back(text_lines[(start + static_cast<size_t>(u)) % text_lines.size()]);
      }
    } else {
      for (int64_t u = 0; u < units; ++u) {
        if (haystack == Haystack::noise) {
          lines.emplace_back(kNoise);
          continue;
        }
        std::string key = word_key(rng);  // a distractor never carries a key that is asked for
        while (std::find(keys.begin(), keys.end(), key) != keys.end()) key = word_key(rng);
        lines.push_back(needle(key, seven_digits(rng)));
      }
      // RULER's noise placement: random lines (indices of the haystack), inserted from the last.
      std::vector<int64_t> at = sample(rng, units, n);
      std::sort(at.rbegin(), at.rend());
      for (int64_t i = 0; i < n; ++i) lines.insert(lines.begin() + at[static_cast<size_t>(i)], needles[static_cast<size_t>(i)]);
    }
    const std::string query = query_list(queries);
    const bool one = shape.queries * shape.values == 1;  // RULER's singular template
    const std::string text =
        one ? "A special magic number is hidden within the following text. Make sure to memorize it. I will quiz "
              "you about the number afterwards.\n" + join(lines, "\n") + "\nWhat is the special magic number for " +
                  query + " mentioned in the provided text? The special magic number for " + query +
                  " mentioned in the provided text is"
            : "Some special magic numbers are hidden within the following text. Make sure to memorize it. I will "
              "quiz you about the numbers afterwards.\n" + join(lines, "\n") + "\nWhat are all the special magic "
              "numbers for " + query + " mentioned in the provided text? The special magic numbers for " + query +
                  " mentioned in the provided text are";
    return Draft{text, answers};
  };
}

// --- variable tracking (RULER's variable_tracking.py: one chain of 4 hops) ------------

constexpr int kHops = 4;

// The chain's task text with `units` noise lines, and the chain's names.
Draft chain_text(Rng& rng, int64_t units, int letters, const std::string& value) {
  const std::vector<std::string> names = distinct_names(rng, letters, kHops + 1);
  std::vector<std::string> chain = {"VAR " + names[0] + " = " + value};
  for (int j = 0; j < kHops; ++j) chain.push_back("VAR " + names[static_cast<size_t>(j + 1)] + " = VAR " + names[static_cast<size_t>(j)] + " ");
  std::vector<std::string> lines(static_cast<size_t>(units), kNoise);
  std::vector<int64_t> at = sample(rng, units, std::min<int64_t>(units, kHops + 1));
  std::sort(at.begin(), at.end());
  for (size_t j = 0; j < chain.size(); ++j)
    lines.insert(lines.begin() + (j < at.size() ? at[j] + static_cast<int64_t>(j) : static_cast<int64_t>(lines.size())), chain[j]);
  const std::string text = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n" +
                           join(lines, "\n") + "\nQuestion: Find all variables that are assigned the value " + value +
                           " in the text above. Answer: According to the chain(s) of variable assignment in the text "
                           "above, " + std::to_string(kHops + 1) + " variables are assigned the value " + value +
                           ", they are: ";
  return {text, names};
}

Writer vt_writer(const data::PromptTokenizer& tokenizer, uint64_t seed) {
  // RULER's worked example before the task: 3-letter names, its own noise, at most 500 tokens, answered.
  Rng icl_rng(seed ^ 0x9e3779b97f4a7c15ULL);
  const std::string icl_value = number(icl_rng, 10000, 99999);
  const uint64_t icl_seed = icl_rng();
  int64_t icl_units = 1;
  for (int64_t units = 1; units < 500; ++units) {
    Rng r(icl_seed);
    if (static_cast<int64_t>(tokenizer.encode(chain_text(r, units, 3, icl_value).text).size()) + 10 > 500) break;
    icl_units = units;
  }
  Rng r(icl_seed);
  const Draft icl = chain_text(r, icl_units, 3, icl_value);
  const std::string example = icl.text + join(icl.answers, " ") + "\n";
  return [=](int64_t units) {
    Rng rng(seed);
    const Draft task = chain_text(rng, units, 5, number(rng, 10000, 99999));
    return Draft{example + "\n" + task.text, task.answers};
  };
}

// --- common words extraction (RULER's common_words_extraction.py) ---------------------

const char* const kCweQuestion =
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones "
    "that appear most often.\n";
const char* const kCweAnswer = "\nQuestion: What are the 10 most common words in the above list? Answer: The top 10 "
                               "words that appear most often in the list are:";

// `distinct` words, the first 10 `common` times each and the rest `uncommon` times,
// shuffled and numbered; returns the list's text and the 10 common words.
Draft word_list(Rng& rng, int64_t distinct, int common, int uncommon) {
  if (distinct > kMadeUpWords / 2)
    throw InputError("cwe: " + std::to_string(distinct) + " distinct words do not fit its made-up vocabulary of " +
                     std::to_string(kMadeUpWords) + "; evaluate it at a shorter length");
  std::vector<std::string> words;
  std::set<std::string> seen;
  while (static_cast<int64_t>(words.size()) < distinct)
    if (std::string w = made_up_word(rng); seen.insert(w).second) words.push_back(w);
  std::vector<std::string> items;
  for (size_t i = 0; i < words.size(); ++i)
    for (int r = 0; r < (i < 10 ? common : uncommon); ++r) items.push_back(words[i]);
  shuffle(items, rng);
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) text += (i ? " " : "") + std::to_string(i + 1) + ". " + items[i];
  return {text, std::vector<std::string>(words.begin(), words.begin() + 10)};
}

Writer cwe_writer(int64_t length, uint64_t seed) {
  const bool long_prompt = length >= 4096;  // RULER's two settings
  return [=](int64_t units) {
    Rng rng(seed);
    const Draft example = long_prompt ? word_list(rng, 40, 10, 3) : word_list(rng, 20, 3, 1);
    std::string shot = kCweQuestion + example.text + kCweAnswer;
    for (size_t i = 0; i < example.answers.size(); ++i) shot += " " + std::to_string(i + 1) + ". " + example.answers[i];
    const Draft task = long_prompt ? word_list(rng, units, 30, 3) : word_list(rng, units, 6, 1);
    return Draft{shot + "\n" + kCweQuestion + task.text + kCweAnswer, task.answers};
  };
}

std::string task_name(RulerTask task) {
  switch (task) {
    case RulerTask::niah_single: return "niah_single";
    case RulerTask::niah_multikey: return "niah_multikey";
    case RulerTask::niah_multivalue: return "niah_multivalue";
    case RulerTask::niah_multiquery: return "niah_multiquery";
    case RulerTask::vt: return "vt";
    case RulerTask::cwe: return "cwe";
  }
  return "";
}

}  // namespace

int64_t ruler_tokens_to_generate(RulerTask task) {
  return task == RulerTask::vt ? 30 : task == RulerTask::cwe ? 120 : 128;
}

RulerPrompt make_ruler_prompt(RulerTask task, Haystack haystack, const data::PromptTokenizer& tokenizer,
                              const std::vector<std::string>& text_lines, int64_t length, uint64_t seed,
                              int64_t trial) {
  if (haystack == Haystack::text && text_lines.empty())
    throw InputError(task_name(task) + ": the text haystack needs held-out text, and the store's split has none");
  const uint64_t draw = seed * 1000003ULL + static_cast<uint64_t>(length) * 7919ULL +
                        static_cast<uint64_t>(trial) * 104729ULL + static_cast<uint64_t>(task) * 15485863ULL;
  const int64_t max_new = ruler_tokens_to_generate(task);
  if (task == RulerTask::vt) return fit(vt_writer(tokenizer, draw), tokenizer, length, max_new, kHops + 1, "vt");
  if (task == RulerTask::cwe) return fit(cwe_writer(length, draw), tokenizer, length, max_new, 11, "cwe");
  const NeedleShape shape = needle_shape(task, haystack);
  return fit(needle_writer(task, haystack, text_lines, draw), tokenizer, length, max_new, shape.keys * shape.values,
             task_name(task));
}

double ruler_score(const std::string& output, const std::vector<std::string>& answers) {
  std::string text = output;
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20) c = '\n';
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  text = lower(text);
  if (answers.empty()) return 0;
  int64_t found = 0;
  for (const auto& a : answers) found += text.find(lower(a)) != std::string::npos;
  return static_cast<double>(found) / static_cast<double>(answers.size());
}

}  // namespace segtrain::trainer
