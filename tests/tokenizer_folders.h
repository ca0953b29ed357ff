#pragma once
// Tokenizers the tests write themselves (no downloads, no Python): a byte-level BPE
// tokenizer.json in an HF folder (GPT-2's form, or Llama 3's with BOS put first by a
// TemplateProcessing post-processor), and a small sentencepiece model, each made from
// the words of the passkey prompts so prompts are a few hundred tokens.
#include <cctype>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/prepare.h"
#include "data/prompt_tokenizer.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace segtrain::test {

inline const char* kPromptWords =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you "
    "about the important information there. The grass is green. The sky is blue. The sun is yellow. Here we go. "
    "There and back again. The pass key is 12345. Remember it. What is the pass key? recall : the password of "
    "bakodi is mesupona . the quiet river meets the old bridge near the market . the key of lumo is sarefi .";

// GPT-2's printable character for a byte, as UTF-8 (tokenizers' bytes_char).
inline std::string byte_char(unsigned char byte) {
  int n = 0;
  char32_t cp = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    if (b == byte) cp = c;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// An HF folder with a byte-level BPE: the 256 byte characters, then each word of
// `text` (with and without its leading space, as GPT-2's pre-tokenizer cuts it) merged
// left to right into one token, then <|endoftext|> (EOS) and <|begin_of_text|>, which
// starts every encoding when `bos` (else tokenizer_config.json names no BOS).
inline void write_byte_bpe_folder(const std::filesystem::path& dir, bool bos, const std::string& text = kPromptWords) {
  using nlohmann::json;
  json vocab = json::object();
  std::map<std::string, int> ids;
  std::vector<std::string> chars;
  for (int b = 0; b < 256; ++b) {
    chars.push_back(byte_char(static_cast<unsigned char>(b)));
    ids[chars.back()] = b;
  }
  json merges = json::array();
  auto add_word = [&](const std::string& word) {
    std::string prefix = byte_char(static_cast<unsigned char>(word[0]));
    for (size_t i = 1; i < word.size(); ++i) {
      const std::string next = byte_char(static_cast<unsigned char>(word[i]));
      if (!ids.count(prefix + next)) {
        const int id = static_cast<int>(ids.size());
        ids[prefix + next] = id;
        merges.push_back(json::array({prefix, next}));
      }
      prefix += next;
    }
  };
  std::string word;
  for (char c : text + " ") {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      word += c;
      continue;
    }
    if (word.size() > 1) {
      add_word(word);
      add_word(" " + word);
    }
    word.clear();
  }
  for (const auto& [token, id] : ids) vocab[token] = id;
  const int eos = static_cast<int>(ids.size()), begin = eos + 1;
  auto added = [](int id, const char* content) {
    return json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json post = bos ? json{{"type", "TemplateProcessing"},
                         {"single", json::array({json{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                                 json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"pair", json::array({json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"special_tokens",
                          {{"<|begin_of_text|>",
                            {{"id", "<|begin_of_text|>"}, {"ids", {begin}}, {"tokens", {"<|begin_of_text|>"}}}}}}}
                  : byte_level;
  json tokenizer = {{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", json::array({added(eos, "<|endoftext|>"), added(begin, "<|begin_of_text|>")})},
                    {"normalizer", nullptr},
                    {"pre_tokenizer", byte_level},
                    {"post_processor", post},
                    {"decoder", byte_level},
                    {"model",
                     {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                      {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                      {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", merges}}}};
  json config = {{"eos_token", "<|endoftext|>"}};
  if (bos) config["bos_token"] = "<|begin_of_text|>";
  write_file(dir / "tokenizer.json", tokenizer.dump());
  write_file(dir / "tokenizer_config.json", config.dump());
}

// A small sentencepiece model (unigram, `vocab` pieces) trained on the prompt words, saved at `path`.
inline void write_sentencepiece_model(const std::filesystem::path& path, int64_t vocab = 150) {
  std::vector<std::string> docs;
  for (int i = 0; i < 200; ++i) docs.push_back(std::string(kPromptWords) + " " + std::to_string(10000 + 37 * i));
  data::TokenizerTrainOptions options;
  options.vocab_size = vocab;
  options.threads = 1;
  write_file(path, data::Tokenizer::train(docs, options).serialized());
}

// A JSONL corpus of `texts` (one document each).
inline void write_jsonl(const std::filesystem::path& path, const std::vector<std::string>& texts) {
  std::string out;
  for (const auto& t : texts) out += nlohmann::json{{"text", t}}.dump() + "\n";
  write_file(path, out);
}

// One store of each kind `prepare` writes, from the same `texts`: a sentencepiece
// .model ("sp.model"), an HF folder's sentencepiece model with BOS ("hf-sp"), and a
// byte-level BPE folder with and without BOS ("bpe-bos", "bpe").
struct StoresOfEveryTokenizer {
  TempDir dir;
  std::map<std::string, std::string> by_name;  // name -> store directory
  explicit StoresOfEveryTokenizer(const std::vector<std::string>& texts) {
    write_jsonl(dir.path() / "corpus.jsonl", texts);
    write_sentencepiece_model(dir.path() / "sp.model");
    write_byte_bpe_folder(dir.path() / "bpe-bos", true);
    write_byte_bpe_folder(dir.path() / "bpe", false);
    std::filesystem::create_directories(dir.path() / "hf-sp");
    std::filesystem::copy_file(dir.path() / "sp.model", dir.path() / "hf-sp/tokenizer.model");
    write_file(dir.path() / "hf-sp/tokenizer_config.json", R"({"add_bos_token": true})");
    for (const std::string name : {"sp.model", "hf-sp", "bpe-bos", "bpe"}) {
      data::PrepareOptions o;
      o.inputs = {dir / "corpus.jsonl"};
      o.out = dir / ("store-" + name);
      o.tokenizer = dir / name;
      o.valid_fraction = 0;
      o.threads = 1;
      data::prepare_store(o);
      by_name[name] = o.out;
    }
  }
};

// Stores of every tokenizer over the prompt words, built once per test binary (the
// passkey and RULER tests share them).
inline StoresOfEveryTokenizer& prompt_stores() {
  static StoresOfEveryTokenizer s({kPromptWords, "The sky is blue. The sun is yellow."});
  return s;
}

// A prompt's text without its BOS (when the store's documents start with one).
inline std::string prompt_body_text(const data::PromptTokenizer& tok, const std::vector<int32_t>& ids) {
  const bool bos = tok.bos_id() >= 0;
  return tok.decode(std::vector<int32_t>(ids.begin() + (bos ? 1 : 0), ids.end()));
}

}  // namespace segtrain::test
