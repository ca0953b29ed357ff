#include "data/bpe_tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/bytestream.h>
#include <unicode/uregex.h>
#include <unicode/ustring.h>
#include <unicode/utext.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <atomic>
#include <climits>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "common/error.h"
#include "common/file_io.h"
#include "data/bpe_decoder.h"

namespace segtrain::data {

namespace {

using nlohmann::json;

// GPT-2's pre-tokenizer regex (tokenizers' ByteLevel with use_regex).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// tokenizers compiles its regexes with Oniguruma, whose \s and \S are Unicode's
// White_Space (which includes U+000B and U+0085); ICU's \s does not: say it explicitly.
std::string to_icu_pattern(std::string_view p) {
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      const char c = p[i + 1];
      if (c == 's') out += "\\p{White_Space}";
      else if (c == 'S') out += "\\P{White_Space}";
      else {
        out += p[i];
        out += c;
      }
      ++i;
    } else {
      out += p[i];
    }
  }
  return out;
}

// GPT-2's byte <-> printable character table (tokenizers' bytes_char).
std::array<char32_t, 256> byte_chars() {
  std::array<char32_t, 256> table{};
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    table[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
  }
  return table;
}

// Decodes one UTF-8 code point at s[i]; returns its length (1 for a bad byte, with cp = 0xFFFD).
size_t utf8_next(std::string_view s, size_t i, char32_t& cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    cp = 0xFFFD;
    return 1;
  }
  cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return n;
}

// A token of the byte-level vocabulary ("Ġthe") as the raw bytes it stands for (" the"),
// or nullopt when a character is not one of the 256 byte characters.
std::optional<std::string> byte_level_decode(std::string_view token, const std::unordered_map<char32_t, uint8_t>& inverse) {
  std::string out;
  for (size_t i = 0; i < token.size();) {
    char32_t cp;
    i += utf8_next(token, i, cp);
    auto it = inverse.find(cp);
    if (it == inverse.end()) return std::nullopt;
    out += static_cast<char>(it->second);
  }
  return out;
}

bool is_unicode_space(char32_t c) {
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

struct Regex {
  URegularExpression* re = nullptr;
  Regex() = default;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() {
    if (re) uregex_close(re);
  }
};

enum class Behavior { isolated, removed, merged_with_previous, merged_with_next };

struct SplitStep {
  std::unique_ptr<Regex> pattern;  // compiled once; each thread matches with its own clone
  Behavior behavior = Behavior::isolated;
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool lstrip = false, rstrip = false, normalized = false;
};

// Added tokens matched leftmost-longest, as tokenizers' aho-corasick does.
struct AddedMatcher {
  std::vector<AddedToken> tokens;
  std::array<std::vector<size_t>, 256> by_first_byte;  // indices, longest first
  void build() {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (!tokens[i].content.empty())
        by_first_byte[static_cast<unsigned char>(tokens[i].content[0])].push_back(i);
    for (auto& v : by_first_byte)
      std::stable_sort(v.begin(), v.end(),
                       [&](size_t a, size_t b) { return tokens[a].content.size() > tokens[b].content.size(); });
  }
  bool empty() const { return tokens.empty(); }
};

struct Piece {
  std::string text;
  int32_t token = -1;  // an added token's id, else -1 (text still to encode)
};

struct Merge {
  int32_t rank, id;
};

}  // namespace

struct BpeTokenizer::Impl {
  std::string path;
  uint64_t serial = 0;
  std::unordered_map<std::string, int32_t> vocab;        // raw bytes -> id (byte-level decoded)
  std::unordered_map<std::string, int32_t> token_ids;    // token strings as written -> id (vocab and added)
  std::unordered_map<uint64_t, Merge> merges;            // (left id, right id) -> rank, merged id
  std::array<int32_t, 256> byte_id{};                    // id of each single byte, -1 if absent
  std::array<int32_t, 256> fallback_id{};                // <0xXX>, -1 if absent
  bool ignore_merges = false, byte_fallback = false, fuse_unk = false;
  int32_t unk_id = -1;
  int64_t vocab_size = 0;
  std::vector<const icu::Normalizer2*> normalizers;
  std::vector<SplitStep> splits;
  bool add_prefix_space = false;
  AddedMatcher raw_added, normalized_added;
  std::vector<int32_t> prefix, suffix;

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw InputError(path + ": " + field + ": " + what);
  }
  void parse_model(const json& m);
  void parse_normalizer(const json& n, const std::string& field);
  void parse_pre_tokenizer(const json& p, const std::string& field, bool& byte_level);
  void parse_post_processor(const json& p, const std::string& field);
  void parse_added(const json& a);
  std::unique_ptr<Regex> compile(const std::string& pattern, bool literal, const std::string& field) const;

  std::string normalize(std::string text) const;
  void split_added(const AddedMatcher& m, std::vector<Piece>& pieces) const;
  void pre_tokenize(const std::string& text, std::vector<URegularExpression*>& res,
                    std::vector<std::string>& words) const;
  void bpe(const std::string& word, std::vector<int32_t>& out) const;
};

namespace {

std::atomic<uint64_t> g_serial{0};

// Per-thread cache of words already encoded (tokenizers keeps one too).
struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>> words;
};
thread_local WordCache t_cache;
constexpr size_t kCacheWords = 200000;

std::string str(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}
bool flag(const json& j, const char* key) { return j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); }

}  // namespace

std::unique_ptr<Regex> BpeTokenizer::Impl::compile(const std::string& pattern, bool literal,
                                                   const std::string& field) const {
  UErrorCode status = U_ZERO_ERROR;
  UParseError where{};
  auto r = std::make_unique<Regex>();
  const std::string text = literal ? pattern : to_icu_pattern(pattern);
  std::u16string u16(text.size() + 1, u'\0');
  int32_t length = 0;
  u_strFromUTF8(reinterpret_cast<UChar*>(u16.data()), static_cast<int32_t>(u16.size()), &length, text.data(),
                static_cast<int32_t>(text.size()), &status);
  if (U_SUCCESS(status))
    r->re = uregex_open(reinterpret_cast<const UChar*>(u16.data()), length, literal ? UREGEX_LITERAL : 0, &where,
                        &status);
  if (U_FAILURE(status)) fail(field, "cannot compile the pattern '" + pattern + "' (" + u_errorName(status) + ")");
  return r;
}

void BpeTokenizer::Impl::parse_model(const json& m) {
  if (!m.is_object()) fail("model", "expected an object");
  if (str(m, "type") != "BPE" && !(m.contains("merges") && !m.contains("type")))
    fail("model.type", "'" + str(m, "type") + "' is not supported (only BPE)");
  if (m.contains("dropout") && !m["dropout"].is_null() && !(m["dropout"].is_number() && m["dropout"].get<double>() == 0))
    fail("model.dropout", "BPE dropout is not supported");
  if (!str(m, "continuing_subword_prefix").empty()) fail("model.continuing_subword_prefix", "is not supported");
  if (!str(m, "end_of_word_suffix").empty()) fail("model.end_of_word_suffix", "is not supported");
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail("model.vocab", "expected an object of token -> id");
  ignore_merges = flag(m, "ignore_merges");
  byte_fallback = flag(m, "byte_fallback");
  fuse_unk = flag(m, "fuse_unk");
  static const auto chars = byte_chars();
  std::unordered_map<char32_t, uint8_t> inverse;
  for (int b = 0; b < 256; ++b) inverse[chars[static_cast<size_t>(b)]] = static_cast<uint8_t>(b);
  byte_id.fill(-1);
  fallback_id.fill(-1);
  std::unordered_map<std::string, int32_t> by_string;
  for (const auto& [token, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 31))
      fail("model.vocab", "the id of '" + token + "' is not a non-negative integer");
    const auto i = id.get<int32_t>();
    by_string[token] = i;
    token_ids[token] = i;
    vocab_size = std::max<int64_t>(vocab_size, int64_t{i} + 1);
    if (auto bytes = byte_level_decode(token, inverse)) {
      if (bytes->size() == 1) byte_id[static_cast<unsigned char>((*bytes)[0])] = i;
      vocab.emplace(std::move(*bytes), i);
    }
    if (token.size() == 6 && token.starts_with("<0x") && token.back() == '>') {
      const auto v = std::strtol(token.substr(3, 2).c_str(), nullptr, 16);
      if (v >= 0 && v < 256) fallback_id[static_cast<size_t>(v)] = i;
    }
  }
  const std::string unk = str(m, "unk_token");
  if (!unk.empty()) {
    auto it = by_string.find(unk);
    if (it == by_string.end()) fail("model.unk_token", "'" + unk + "' is not in the vocabulary");
    unk_id = it->second;
  }
  if (!m.contains("merges") || !m["merges"].is_array()) fail("model.merges", "expected a list of merges");
  int32_t rank = 0;
  for (const auto& merge : m["merges"]) {
    std::string a, b;
    if (merge.is_string()) {
      const auto s = merge.get<std::string>();
      const auto space = s.find(' ', 1);
      if (space == std::string::npos) fail("model.merges", "'" + s + "' is not two tokens separated by a space");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      a = merge[0].get<std::string>();
      b = merge[1].get<std::string>();
    } else {
      fail("model.merges", "merge " + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto ia = by_string.find(a), ib = by_string.find(b), iab = by_string.find(a + b);
    if (ia == by_string.end() || ib == by_string.end() || iab == by_string.end())
      fail("model.merges", "merge " + std::to_string(rank) + " ('" + a + "', '" + b + "') uses tokens not in the vocabulary");
    const uint64_t key = (uint64_t{static_cast<uint32_t>(ia->second)} << 32) | static_cast<uint32_t>(ib->second);
    merges.emplace(key, Merge{rank, iab->second});  // the first (lowest-ranked) merge of a pair wins
    ++rank;
  }
}

void BpeTokenizer::Impl::parse_normalizer(const json& n, const std::string& field) {
  if (n.is_null()) return;
  const std::string type = str(n, "type");
  UErrorCode status = U_ZERO_ERROR;
  if (type == "Sequence") {
    if (!n.contains("normalizers") || !n["normalizers"].is_array()) fail(field, "a Sequence without normalizers");
    for (size_t i = 0; i < n["normalizers"].size(); ++i)
      parse_normalizer(n["normalizers"][i], field + ".normalizers[" + std::to_string(i) + "]");
    return;
  }
  const icu::Normalizer2* form = type == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                                 : type == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                                 : type == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                 : type == "NFKD" ? icu::Normalizer2::getNFKDInstance(status)
                                                  : nullptr;
  if (!form) fail(field + ".type", "'" + type + "' is not supported (NFC, NFD, NFKC, NFKD or a Sequence of them)");
  if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU normalizer: ") + u_errorName(status));
  normalizers.push_back(form);
}

void BpeTokenizer::Impl::parse_pre_tokenizer(const json& p, const std::string& field, bool& byte_level) {
  if (p.is_null()) return;
  const std::string type = str(p, "type");
  if (type == "Sequence") {
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array()) fail(field, "a Sequence without pretokenizers");
    for (size_t i = 0; i < p["pretokenizers"].size(); ++i)
      parse_pre_tokenizer(p["pretokenizers"][i], field + ".pretokenizers[" + std::to_string(i) + "]", byte_level);
  } else if (type == "ByteLevel") {
    if (byte_level) fail(field, "a second ByteLevel is not supported");
    byte_level = true;
    if (!splits.empty() && flag(p, "add_prefix_space"))
      fail(field + ".add_prefix_space", "true after a Split is not supported");
    add_prefix_space = flag(p, "add_prefix_space");
    if (!p.contains("use_regex") || flag(p, "use_regex")) splits.push_back({compile(kGpt2Pattern, false, field), Behavior::isolated});
  } else if (type == "Split") {
    if (byte_level) fail(field, "a Split after the ByteLevel is not supported");
    if (flag(p, "invert")) fail(field + ".invert", "true is not supported");
    const std::string behavior = str(p, "behavior");
    SplitStep step;
    step.behavior = behavior == "Isolated"             ? Behavior::isolated
                    : behavior == "Removed"            ? Behavior::removed
                    : behavior == "MergedWithPrevious" ? Behavior::merged_with_previous
                    : behavior == "MergedWithNext"     ? Behavior::merged_with_next
                                                       : (fail(field + ".behavior", "'" + behavior + "' is not supported"),
                                                          Behavior::isolated);
    if (!p.contains("pattern") || !p["pattern"].is_object()) fail(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    const auto& pat = p["pattern"];
    if (pat.contains("Regex") && pat["Regex"].is_string())
      step.pattern = compile(pat["Regex"].get<std::string>(), false, field + ".pattern.Regex");
    else if (pat.contains("String") && pat["String"].is_string())
      step.pattern = compile(pat["String"].get<std::string>(), true, field + ".pattern.String");
    else
      fail(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    splits.push_back(std::move(step));
  } else {
    fail(field + ".type", "'" + type + "' is not supported (ByteLevel, Split or a Sequence of them)");
  }
}

void BpeTokenizer::Impl::parse_post_processor(const json& p, const std::string& field) {
  if (p.is_null()) return;
  const std::string type = str(p, "type");
  auto pair_id = [&](const char* key) {
    if (!p.contains(key) || !p[key].is_array() || p[key].size() != 2 || !p[key][1].is_number_integer() ||
        p[key][1].get<int64_t>() < 0 || p[key][1].get<int64_t>() > INT32_MAX)
      fail(field + "." + key, "expected [token, id] with a non-negative 32-bit id");
    return p[key][1].get<int32_t>();
  };
  if (type == "Sequence") {
    if (!p.contains("processors") || !p["processors"].is_array()) fail(field, "a Sequence without processors");
    for (size_t i = 0; i < p["processors"].size(); ++i)
      parse_post_processor(p["processors"][i], field + ".processors[" + std::to_string(i) + "]");
  } else if (type == "ByteLevel") {
    // offsets only
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    prefix.push_back(pair_id("cls"));
    suffix.insert(suffix.begin(), pair_id("sep"));
  } else if (type == "TemplateProcessing") {
    if (!p.contains("single") || !p["single"].is_array()) fail(field + ".single", "expected a list");
    bool after = false;
    for (const auto& item : p["single"]) {
      if (item.contains("Sequence")) {
        after = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = str(item["SpecialToken"], "id");
        if (!p.contains("special_tokens") || !p["special_tokens"].contains(name) ||
            !p["special_tokens"][name].contains("ids") || !p["special_tokens"][name]["ids"].is_array())
          fail(field + ".special_tokens", "no ids for '" + name + "'");
        for (const auto& id : p["special_tokens"][name]["ids"]) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
            fail(field + ".special_tokens", "an id of '" + name + "' is not a non-negative 32-bit integer");
          (after ? suffix : prefix).push_back(id.get<int32_t>());
        }
      } else {
        fail(field + ".single", "an item that is neither Sequence nor SpecialToken");
      }
    }
  } else {
    fail(field + ".type", "'" + type + "' is not supported (TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing)");
  }
}

void BpeTokenizer::Impl::parse_added(const json& a) {
  if (a.is_null()) return;
  if (!a.is_array()) fail("added_tokens", "expected a list");
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& t = a[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string())
      fail(field, "expected {\"id\": integer, \"content\": string, ...}");
    if (flag(t, "single_word")) fail(field + ".single_word", "true is not supported");
    if (t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() > INT32_MAX)
      fail(field + ".id", "must be a non-negative 32-bit integer");
    AddedToken token{t["content"].get<std::string>(), t["id"].get<int32_t>(), flag(t, "lstrip"), flag(t, "rstrip"),
                     flag(t, "normalized")};
    vocab_size = std::max<int64_t>(vocab_size, int64_t{token.id} + 1);
    token_ids[token.content] = token.id;
    // Without a normalizer a normalized token matches the same text either way.
    if (token.normalized && !normalizers.empty()) {
      token.content = normalize(token.content);
      normalized_added.tokens.push_back(std::move(token));
    } else {
      raw_added.tokens.push_back(std::move(token));
    }
  }
  raw_added.build();
  normalized_added.build();
}

std::string BpeTokenizer::Impl::normalize(std::string text) const {
  for (const auto* form : normalizers) {
    UErrorCode status = U_ZERO_ERROR;
    if (form->isNormalizedUTF8(text, status) && U_SUCCESS(status)) continue;
    status = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out);
    form->normalizeUTF8(0, text, sink, nullptr, status);
    if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU normalization failed: ") + u_errorName(status));
    text = std::move(out);
  }
  return text;
}

// Splits the text pieces on added tokens (leftmost-longest), stripping the
// whitespace next to tokens with lstrip/rstrip.
void BpeTokenizer::Impl::split_added(const AddedMatcher& m, std::vector<Piece>& pieces) const {
  if (m.empty()) return;
  std::vector<Piece> out;
  for (auto& piece : pieces) {
    if (piece.token >= 0) {
      out.push_back(std::move(piece));
      continue;
    }
    const std::string& s = piece.text;
    size_t emitted = 0, i = 0;
    while (i < s.size()) {
      const AddedToken* hit = nullptr;
      for (size_t k : m.by_first_byte[static_cast<unsigned char>(s[i])]) {
        const auto& c = m.tokens[k].content;
        if (s.compare(i, c.size(), c) == 0) {
          hit = &m.tokens[k];
          break;
        }
      }
      if (!hit) {
        ++i;
        continue;
      }
      size_t start = i, end = i + hit->content.size();
      if (hit->lstrip) {
        // Back over whitespace to the previous match.
        while (start > emitted) {
          size_t b = start - 1;
          while (b > emitted && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
          char32_t cp;
          utf8_next(s, b, cp);
          if (!is_unicode_space(cp)) break;
          start = b;
        }
      }
      if (hit->rstrip) {
        while (end < s.size()) {
          char32_t cp;
          const size_t n = utf8_next(s, end, cp);
          if (!is_unicode_space(cp)) break;
          end += n;
        }
      }
      if (start > emitted) out.push_back({s.substr(emitted, start - emitted), -1});
      out.push_back({std::string(), hit->id});
      emitted = i = end;
    }
    if (emitted < s.size()) out.push_back({s.substr(emitted), -1});
  }
  pieces = std::move(out);
}

void BpeTokenizer::Impl::pre_tokenize(const std::string& text, std::vector<URegularExpression*>& res,
                                      std::vector<std::string>& words) const {
  words.clear();
  words.push_back(add_prefix_space && !text.starts_with(' ') ? " " + text : text);
  std::vector<std::string> next;
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> parts;
  for (size_t step = 0; step < splits.size(); ++step) {
    URegularExpression* re = res[step];
    const Behavior behavior = splits[step].behavior;
    next.clear();
    for (const auto& w : words) {
      if (w.empty()) continue;
      UErrorCode status = U_ZERO_ERROR;
      UText* ut = utext_openUTF8(nullptr, w.data(), static_cast<int64_t>(w.size()), &status);
      uregex_setUText(re, ut, &status);
      parts.clear();
      size_t last = 0;
      while (U_SUCCESS(status) && uregex_findNext(re, &status)) {
        const auto s = static_cast<size_t>(uregex_start64(re, 0, &status));
        const auto e = static_cast<size_t>(uregex_end64(re, 0, &status));
        if (e == s) continue;  // tokenizers drops empty matches
        if (s > last) parts.push_back({{last, s}, false});
        parts.push_back({{s, e}, true});
        last = e;
      }
      if (U_FAILURE(status)) {
        utext_close(ut);
        // The tokenizer's own regex failing on a text (ICU's backtracking stack): its fault, not ours.
        throw InputError(path + ": pre_tokenizer: the regex failed on a document (" + u_errorName(status) + ")");
      }
      if (last < w.size()) parts.push_back({{last, w.size()}, false});
      uregex_setText(re, u"", 0, &status);
      utext_close(ut);
      std::vector<std::pair<size_t, size_t>> ranges;
      if (behavior == Behavior::isolated) {
        for (const auto& [r, m] : parts) ranges.push_back(r);
      } else if (behavior == Behavior::removed) {
        for (const auto& [r, m] : parts)
          if (!m) ranges.push_back(r);
      } else if (behavior == Behavior::merged_with_previous) {
        bool previous_match = false;
        for (const auto& [r, m] : parts) {
          if (m && !previous_match && !ranges.empty()) ranges.back().second = r.second;
          else ranges.push_back(r);
          previous_match = m;
        }
      } else {
        bool previous_match = false;
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
          if (it->second && !previous_match && !ranges.empty()) ranges.back().first = it->first.first;
          else ranges.push_back(it->first);
          previous_match = it->second;
        }
        std::reverse(ranges.begin(), ranges.end());
      }
      for (const auto& [a, b] : ranges)
        if (b > a) next.push_back(w.substr(a, b - a));
    }
    words.swap(next);
  }
}

// Byte-pair merges of one pre-token, lowest rank first and leftmost among equals
// (tokenizers' priority queue of (rank, position)).
void BpeTokenizer::Impl::bpe(const std::string& word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    if (auto it = vocab.find(word); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  bool last_unk = false;
  for (size_t i = 0; i < word.size(); ++i) {
    const auto b = static_cast<unsigned char>(word[i]);
    int32_t id = byte_id[b];
    if (id < 0 && byte_fallback) id = fallback_id[b];
    if (id < 0) {
      if (unk_id < 0) continue;  // tokenizers drops characters it cannot represent
      if (fuse_unk && last_unk) continue;
      id = unk_id;
      last_unk = true;
    } else {
      last_unk = false;
    }
    sym.push_back({id, 0, 0, true});
  }
  const auto n = static_cast<int32_t>(sym.size());
  for (int32_t i = 0; i < n; ++i) {
    sym[static_cast<size_t>(i)].prev = i - 1;
    sym[static_cast<size_t>(i)].next = i + 1 < n ? i + 1 : -1;
  }
  auto key = [](int32_t a, int32_t b) { return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b); };
  struct Entry {
    int32_t rank, pos, id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  for (int32_t i = 0; i + 1 < n; ++i)
    if (auto it = merges.find(key(sym[static_cast<size_t>(i)].id, sym[static_cast<size_t>(i) + 1].id)); it != merges.end())
      queue.push({it->second.rank, i, it->second.id});
  while (!queue.empty()) {
    const Entry top = queue.top();
    queue.pop();
    auto& left = sym[static_cast<size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    auto& right = sym[static_cast<size_t>(left.next)];
    auto it = merges.find(key(left.id, right.id));
    if (it == merges.end() || it->second.id != top.id) continue;
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[static_cast<size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) {
      const auto& p = sym[static_cast<size_t>(left.prev)];
      if (auto m = merges.find(key(p.id, left.id)); m != merges.end()) queue.push({m->second.rank, left.prev, m->second.id});
    }
    if (left.next >= 0) {
      const auto& q = sym[static_cast<size_t>(left.next)];
      if (auto m = merges.find(key(left.id, q.id)); m != merges.end()) queue.push({m->second.rank, top.pos, m->second.id});
    }
  }
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = sym[static_cast<size_t>(i)].next) out.push_back(sym[static_cast<size_t>(i)].id);
}

BpeTokenizer::BpeTokenizer() : impl_(std::make_unique<Impl>()) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  BpeTokenizer t;
  auto& im = *t.impl_;
  im.path = path;
  im.serial = ++g_serial;
  json j;
  try {
    j = json::parse(read_file(path, "tokenizer"));
  } catch (const json::exception& e) {
    throw InputError(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("model")) im.fail("model", "missing (not a Hugging Face tokenizer.json)");
  try {
    im.parse_model(j["model"]);
    im.parse_normalizer(j.value("normalizer", json()), "normalizer");
    bool byte_level = false;
    im.parse_pre_tokenizer(j.value("pre_tokenizer", json()), "pre_tokenizer", byte_level);
    if (!byte_level)
      im.fail("pre_tokenizer", "no ByteLevel (only byte-level BPE tokenizers are supported natively: GPT-2, Llama 3, Qwen2)");
    im.parse_post_processor(j.value("post_processor", json()), "post_processor");
    im.parse_added(j.value("added_tokens", json()));
    t.decoder_ = make_bpe_decoder(j, path);
  } catch (const json::exception& e) {
    throw InputError(path + ": unexpected value: " + e.what());
  }
  for (int32_t id : im.prefix)
    if (id < 0 || id >= im.vocab_size) im.fail("post_processor", "special token id " + std::to_string(id) + " is outside the vocabulary");
  for (int32_t id : im.suffix)
    if (id < 0 || id >= im.vocab_size) im.fail("post_processor", "special token id " + std::to_string(id) + " is outside the vocabulary");
  return t;
}

int64_t BpeTokenizer::vocab_size() const { return impl_->vocab_size; }
const std::vector<int32_t>& BpeTokenizer::prefix() const { return impl_->prefix; }
const std::vector<int32_t>& BpeTokenizer::suffix() const { return impl_->suffix; }

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token) const {
  auto it = impl_->token_ids.find(std::string(token));
  if (it == impl_->token_ids.end()) return std::nullopt;
  return it->second;
}

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  const Impl& im = *impl_;
  if (t_cache.owner != im.serial) {
    t_cache.words.clear();
    t_cache.owner = im.serial;
  }
  std::vector<URegularExpression*> res;
  struct Closer {
    std::vector<URegularExpression*>& r;
    ~Closer() {
      for (auto* x : r) uregex_close(x);
    }
  } closer{res};
  for (const auto& s : im.splits) {
    UErrorCode status = U_ZERO_ERROR;
    res.push_back(uregex_clone(s.pattern->re, &status));
    if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU regex clone failed: ") + u_errorName(status));
  }
  std::vector<Piece> pieces{{std::string(text), -1}};
  im.split_added(im.raw_added, pieces);
  if (!im.normalizers.empty()) {
    for (auto& p : pieces)
      if (p.token < 0) p.text = im.normalize(std::move(p.text));
    im.split_added(im.normalized_added, pieces);
  }
  std::vector<std::string> words;
  for (const auto& p : pieces) {
    if (p.token >= 0) {
      out.push_back(p.token);
      continue;
    }
    if (p.text.empty()) continue;
    im.pre_tokenize(p.text, res, words);
    for (const auto& w : words) {
      auto it = t_cache.words.find(w);
      if (it != t_cache.words.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        continue;
      }
      const size_t before = out.size();
      im.bpe(w, out);
      if (t_cache.words.size() >= kCacheWords) t_cache.words.clear();
      t_cache.words.emplace(w, std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
    }
  }
}

// ---- what tokenizer.json puts around and into a text, for a model of its own -------------

TokenizerFrame TokenizerFrame::load(const std::string& path, int64_t vocab_size, const std::string& vocabulary) {
  auto im = std::make_shared<BpeTokenizer::Impl>();
  im->path = path;
  im->vocab_size = vocab_size;
  try {
    const json j = json::parse(read_file(path, "tokenizer"));
    if (!j.is_object()) im->fail("post_processor", "not a Hugging Face tokenizer.json");
    im->parse_post_processor(j.value("post_processor", json()), "post_processor");
    im->parse_added(j.value("added_tokens", json()));
  } catch (const json::exception& e) {
    throw InputError(path + ": not valid JSON: " + e.what());
  }
  for (const auto* ids : {&im->prefix, &im->suffix})
    for (int32_t id : *ids)
      if (id < 0 || id >= vocab_size)
        im->fail("post_processor", "id " + std::to_string(id) + " is outside the vocabulary of " + vocabulary);
  for (const auto& t : im->raw_added.tokens)
    if (t.id >= vocab_size)
      im->fail("added_tokens", "'" + t.content + "' has id " + std::to_string(t.id) + ", outside the vocabulary of " +
                                   vocabulary);
  TokenizerFrame frame;
  frame.impl_ = std::move(im);
  return frame;
}

const std::vector<int32_t>& TokenizerFrame::prefix() const { return impl_->prefix; }
const std::vector<int32_t>& TokenizerFrame::suffix() const { return impl_->suffix; }

std::vector<TokenizerFrame::Part> TokenizerFrame::split_added(std::string_view text) const {
  std::vector<Piece> pieces{{std::string(text), -1}};
  impl_->split_added(impl_->raw_added, pieces);
  std::vector<Part> parts;
  parts.reserve(pieces.size());
  for (auto& p : pieces) parts.push_back({std::move(p.text), p.token});
  return parts;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const { return bpe_decode(*decoder_, ids); }

}  // namespace segtrain::data
