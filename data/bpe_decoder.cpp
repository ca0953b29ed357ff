#include "data/bpe_decoder.h"

#include <array>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "common/error.h"

namespace segtrain::data {

namespace {

using nlohmann::json;

enum class Step { byte_level, byte_fallback, fuse };

// GPT-2's printable character -> byte (the inverse of tokenizers' bytes_char);
// the characters are U+0021..U+0143, -1 for any other.
const std::array<int16_t, 324>& char_bytes() {
  static const std::array<int16_t, 324> table = [] {
    std::array<int16_t, 324> t{};
    t.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[static_cast<size_t>(printable ? b : 256 + n++)] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return table;
}

// The length of the well-formed UTF-8 sequence at s[i] (Unicode table 3-7), or
// 0 with `bad` set to the length of its maximal invalid subpart (at least 1).
size_t utf8_sequence(const std::string& s, size_t i, size_t& bad) {
  const auto c = static_cast<unsigned char>(s[i]);
  bad = 0;
  if (c < 0x80) return 1;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) need = 1;
  else if (c == 0xE0) need = 2, lo = 0xA0;
  else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
  else if (c == 0xED) need = 2, hi = 0x9F;
  else if (c == 0xF0) need = 3, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) need = 3;
  else if (c == 0xF4) need = 3, hi = 0x8F;
  else {
    bad = 1;
    return 0;
  }
  size_t j = i + 1;
  for (size_t k = 0; k < need; ++k, ++j) {
    if (j >= s.size()) break;
    const auto b = static_cast<unsigned char>(s[j]);
    if (b < (k == 0 ? lo : 0x80) || b > (k == 0 ? hi : 0xBF)) break;
  }
  if (j == i + 1 + need) return need + 1;
  bad = j - i;
  return 0;
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0, bad = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i, bad);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// The code point at s[i] of a valid UTF-8 string; advances i.
char32_t next_code_point(const std::string& s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

// ByteLevel: a token of byte characters becomes its bytes, any other token stays as it is.
void append_byte_level(const std::string& token, std::string& out) {
  const auto& table = char_bytes();
  std::string bytes;
  for (size_t i = 0; i < token.size();) {
    const char32_t cp = next_code_point(token, i);
    const int16_t b = cp < table.size() ? table[cp] : int16_t{-1};
    if (b < 0) {
      out += token;
      return;
    }
    bytes += static_cast<char>(b);
  }
  out += bytes;
}

// "<0xNN>" -> NN (Rust's u8::from_str_radix on the two characters, which takes a leading '+').
int byte_fallback_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  if (t[3] == '+') return hex(t[4]);
  const int a = hex(t[3]), b = hex(t[4]);
  return a < 0 || b < 0 ? -1 : a * 16 + b;
}

std::vector<std::string> byte_fallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string run;
  auto flush = [&] {
    if (run.empty()) return;
    if (valid_utf8(run)) out.push_back(run);
    else
      for (size_t k = 0; k < run.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
    run.clear();
  };
  for (auto& t : tokens) {
    const int b = byte_fallback_value(t);
    if (b >= 0) {
      run += static_cast<char>(b);
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  return out;
}

}  // namespace

struct BpeDecoder {
  std::string path;
  // id -> token as written (an added token's content wins); a map, since a file's ids may be sparse
  // up to 2^31 (a vector sized by the largest id would allocate gigabytes for one token, fuzz_hf_tokenizer).
  std::unordered_map<int32_t, std::string> tokens;
  std::vector<Step> steps;
  std::string unsupported;  // "field: what" when the decoder is not one of ours

  void parse(const json& d, const std::string& field) {
    if (!unsupported.empty()) return;
    const std::string type = d.is_object() && d.contains("type") && d["type"].is_string() ? d["type"].get<std::string>() : "";
    if (type == "ByteLevel") steps.push_back(Step::byte_level);
    else if (type == "ByteFallback") steps.push_back(Step::byte_fallback);
    else if (type == "Fuse") steps.push_back(Step::fuse);
    else if (type == "Sequence" && d.contains("decoders") && d["decoders"].is_array())
      for (size_t i = 0; i < d["decoders"].size(); ++i) parse(d["decoders"][i], field + ".decoders[" + std::to_string(i) + "]");
    else
      unsupported = field + ".type: '" + type + "' is not supported (ByteLevel, ByteFallback, Fuse or a Sequence of them)";
  }
  void set(int64_t id, const std::string& token) {
    if (id < 0 || id > INT32_MAX) return;
    tokens[static_cast<int32_t>(id)] = token;
  }
};

std::shared_ptr<const BpeDecoder> make_bpe_decoder(const json& j, const std::string& path) {
  auto d = std::make_shared<BpeDecoder>();
  d->path = path;
  for (const auto& [token, id] : j["model"]["vocab"].items())
    if (id.is_number_integer()) d->set(id.get<int64_t>(), token);
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& t : j["added_tokens"])
      if (t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") && t["content"].is_string())
        d->set(t["id"].get<int64_t>(), t["content"].get<std::string>());
  const json none;
  const json& decoder = j.contains("decoder") ? j["decoder"] : none;
  if (decoder.is_null()) d->steps.push_back(Step::byte_level);
  else d->parse(decoder, "decoder");
  return d;
}

std::string bpe_decode(const BpeDecoder& d, const std::vector<int32_t>& ids) {
  if (!d.unsupported.empty()) throw InputError(d.path + ": " + d.unsupported);
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids)
    if (const auto it = d.tokens.find(id); it != d.tokens.end()) tokens.push_back(it->second);
  for (Step step : d.steps) {
    if (step == Step::byte_fallback) {
      tokens = byte_fallback(std::move(tokens));
      continue;
    }
    std::string joined;
    for (const auto& t : tokens) {
      if (step == Step::byte_level) append_byte_level(t, joined);
      else joined += t;
    }
    tokens.assign(1, step == Step::byte_level ? utf8_lossy(joined) : std::move(joined));
  }
  std::string text;
  for (const auto& t : tokens) text += t;
  return text;
}

std::string utf8_lossy(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0, bad = 0; i < bytes.size();) {
    const size_t n = utf8_sequence(bytes, i, bad);
    if (n > 0) {
      out.append(bytes, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

}  // namespace segtrain::data
