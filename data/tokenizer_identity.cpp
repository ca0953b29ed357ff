#include "data/tokenizer_identity.h"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "common/error.h"
#include "data/prompt_tokenizer.h"
#include "data/token_store.h"

namespace segtrain::data {

// Words, code, numbers and scripts a tokenizer splits its own way; no leading
// space, so tokenizers that differ only in how they start a text agree here.
const char* const kTokenizerProbe =
    "The quick brown fox jumps over the lazy dog; 1234567890 + 0.5 = x.\n"
    "\tint main(void) { return printf(\"%d\\n\", 42); }  // comment\n"
    "Naïve café, Straße, Ελληνικά, русский, 東京タワー, 北京大学, 한국어, हिन्दी, 🙂👍";

TokenizerIdentity identity_of(const DocumentTokenizer& tokenizer, const std::string& probe) {
  TokenizerIdentity id;
  id.kind = tokenizer.kind;
  id.vocab_size = tokenizer.vocab_size;
  id.probe = probe;
  tokenizer.encode_text(probe, id.probe_ids);
  return id;
}

std::optional<TokenizerIdentity> store_tokenizer_identity(const std::string& store_dir, const std::string& probe) {
  const StoreMeta meta = read_meta(store_dir);
  if (meta.tokenizer_kind.empty() && meta.tokenizer != "tokenizer.model" && !meta.tokenizer.starts_with("hf:"))
    return std::nullopt;
  const PromptTokenizer tokenizer = open_prompt_tokenizer(store_dir);
  TokenizerIdentity id;
  id.kind = tokenizer.kind();
  id.vocab_size = tokenizer.vocab_size();
  id.probe = probe;
  id.probe_ids = tokenizer.encode(probe);
  return id;
}

std::optional<TokenizerIdentity> folder_tokenizer_identity(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_regular_file(fs::path(dir) / "tokenizer.json") && !fs::is_regular_file(fs::path(dir) / "tokenizer.model"))
    return std::nullopt;
  return identity_of(open_document_tokenizer(dir));
}

std::string identity_to_json(const TokenizerIdentity& identity, const std::string& store_dir) {
  return nlohmann::json{{"store", store_dir},
                        {"kind", identity.kind},
                        {"vocab_size", identity.vocab_size},
                        {"probe", identity.probe},
                        {"probe_ids", identity.probe_ids}}
             .dump(1) +
         "\n";
}

TokenizerIdentity identity_from_json(const std::string& text, const std::string& file, std::string* store_dir) {
  try {
    const auto j = nlohmann::json::parse(text);
    TokenizerIdentity id;
    id.kind = j.at("kind").get<std::string>();
    id.vocab_size = j.at("vocab_size").get<int64_t>();
    id.probe = j.at("probe").get<std::string>();
    id.probe_ids = j.at("probe_ids").get<std::vector<int32_t>>();
    if (store_dir) *store_dir = j.value("store", "");
    return id;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(file + ": not a store tokenizer record (kind, vocab_size, probe, probe_ids): " + e.what());
  }
}

std::string identity_difference(const TokenizerIdentity& a, const TokenizerIdentity& b) {
  if (a.vocab_size != b.vocab_size)
    return "vocabulary " + std::to_string(a.vocab_size) + " (" + a.kind + ") vs " + std::to_string(b.vocab_size) +
           " (" + b.kind + ")";
  if (a.probe != b.probe) return "probed with different texts";  // callers encode one text with both
  if (a.probe_ids != b.probe_ids)
    return "the same vocabulary size (" + std::to_string(a.vocab_size) + ") but other ids for the same text";
  return "";
}

}  // namespace segtrain::data
