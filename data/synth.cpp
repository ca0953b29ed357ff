#include "data/synth.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/error.h"
#include "common/atomic_write.h"
#include "common/output_path.h"
#include "data/rng.h"

namespace segtrain::data {

namespace {

constexpr const char* kDeterminers[] = {"the", "this", "every", "one", "that", "each"};
constexpr const char* kAdjectives[] = {"old", "quiet", "bright", "small", "distant", "heavy", "green", "cold",
                                       "slow", "hidden", "broken", "warm", "narrow", "silver", "empty", "tall"};
constexpr const char* kNouns[] = {"river", "tower", "garden", "machine", "letter", "window", "forest", "bridge",
                                  "market", "engine", "island", "valley", "lamp", "road", "station", "harbor",
                                  "mountain", "library", "village", "signal", "clock", "field", "door", "ship"};
constexpr const char* kVerbs[] = {"watches", "follows", "crosses", "builds", "finds", "holds", "opens", "carries",
                                  "leaves", "guards", "moves", "reaches", "covers", "shows", "meets", "turns"};
constexpr const char* kPrepositions[] = {"near", "under", "behind", "beyond", "inside", "across", "beside", "over"};
constexpr const char* kRelations[] = {"key", "code", "color", "home", "friend", "number", "password", "owner"};
constexpr const char* kConsonants[] = {"b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z"};
constexpr const char* kVowels[] = {"a", "e", "i", "o", "u"};

template <class T, size_t N>
const char* pick(Rng& rng, const T (&words)[N]) {
  return words[rng.below(N)];
}

std::string pseudo_word(Rng& rng, int syllables) {
  std::string w;
  for (int s = 0; s < syllables; ++s) {
    w += pick(rng, kConsonants);
    w += pick(rng, kVowels);
  }
  return w;
}

struct Fact {
  std::string relation, name, value;
};

class Writer {
 public:
  void sentence(const std::string& s, int64_t words) {
    text_ += s;
    words_ += words;
    if (++in_paragraph_ >= 6) {
      text_ += "\n";
      in_paragraph_ = 0;
    } else {
      text_ += " ";
    }
  }
  int64_t words() const { return words_; }
  std::string take() {
    while (!text_.empty() && (text_.back() == ' ' || text_.back() == '\n')) text_.pop_back();
    return std::move(text_);
  }

 private:
  std::string text_;
  int64_t words_ = 0;
  int in_paragraph_ = 0;
};

void filler(Rng& rng, Writer& out) {
  std::string s = std::string(pick(rng, kDeterminers)) + " " + pick(rng, kAdjectives) + " " + pick(rng, kNouns) + " " +
                  pick(rng, kVerbs) + " " + pick(rng, kDeterminers) + " " + pick(rng, kNouns);
  int64_t words = 6;
  if (rng.below(2)) {
    s += std::string(" ") + pick(rng, kPrepositions) + " the " + pick(rng, kNouns);
    words += 3;
  }
  out.sentence(s + " .", words + 1);
}

void statement(const Fact& f, bool recall, Writer& out) {
  std::string s = (recall ? "recall : the " : "the ") + f.relation + " of " + f.name + " is " + f.value + " .";
  out.sentence(s, recall ? 9 : 7);
}

}  // namespace

std::string synth_document(const SynthOptions& o, SynthSplit split, int64_t index) {
  Rng rng(mix(o.seed, split == SynthSplit::train ? 1 : 2, static_cast<uint64_t>(index)));
  const int64_t target = rng.between(o.min_words, std::max(o.min_words, o.max_words));
  Writer out;
  // Roughly one fact per 200 words, all defined in the first tenth, so that
  // recalls spread over the rest reach back across most of the document.
  const int64_t facts_wanted = std::max<int64_t>(2, target / 200);
  std::vector<Fact> facts;
  const int64_t definitions_end = std::max<int64_t>(target / 10, facts_wanted * 8);
  while (out.words() < definitions_end || static_cast<int64_t>(facts.size()) < facts_wanted) {
    if (static_cast<int64_t>(facts.size()) < facts_wanted && rng.below(2) == 0) {
      facts.push_back({pick(rng, kRelations), pseudo_word(rng, 3), pseudo_word(rng, 4)});
      statement(facts.back(), false, out);
    } else {
      filler(rng, out);
    }
  }
  while (out.words() < target) {
    if (rng.below(5) == 0) statement(facts[rng.below(facts.size())], true, out);
    else filler(rng, out);
  }
  // The last sentence always recalls the first fact: the longest dependency.
  statement(facts.front(), true, out);
  return out.take();
}

SynthResult write_synth_corpus(const std::string& dir, const SynthOptions& o) {
  if (o.documents < 1) throw InputError("--docs must be >= 1");
  if (o.min_words < 1 || o.max_words < o.min_words)
    throw InputError("--min-tokens " + std::to_string(o.min_words) + " and --max-tokens " + std::to_string(o.max_words) +
                     ": need 1 <= min <= max");
  check_output_folder(dir, "--out", "a synthetic corpus", [](const std::filesystem::path& entry) {
    return entry.filename() == "train.jsonl" || entry.filename() == "valid.jsonl";
  });
  std::filesystem::create_directories(dir);
  SynthResult r;
  r.valid_documents = o.documents >= 2 ? std::max<int64_t>(1, o.documents / 20) : 0;
  r.train_documents = o.documents - r.valid_documents;
  for (auto [split, count, name] : {std::tuple{SynthSplit::train, r.train_documents, "train.jsonl"},
                                    std::tuple{SynthSplit::valid, r.valid_documents, "valid.jsonl"}}) {
    AtomicFile file((std::filesystem::path(dir) / name).string());
    for (int64_t i = 0; i < count; ++i) {
      const std::string text = synth_document(o, split, i);
      const std::string line = nlohmann::json{{"text", text}}.dump() + "\n";
      file.write(line.data(), line.size());
      r.bytes += static_cast<int64_t>(text.size());
      for (char c : text) r.words += c == ' ' || c == '\n';
      ++r.words;
    }
    file.commit();
  }
  return r;
}

}  // namespace segtrain::data
