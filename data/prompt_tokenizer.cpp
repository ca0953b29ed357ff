#include "data/prompt_tokenizer.h"

#include <filesystem>

#include "common/error.h"
#include "common/file_io.h"
#include "data/token_store.h"

namespace segtrain::data {

std::vector<int32_t> PromptTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  if (!text.empty()) tokenizer_.encode_text(text, ids);
  return ids;
}

std::vector<int32_t> PromptTokenizer::encode_prompt(std::string_view text) const {
  std::vector<int32_t> ids;
  if (bos_id_ >= 0) ids.push_back(bos_id_);
  const std::vector<int32_t> body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::string PromptTokenizer::decode(const std::vector<int32_t>& ids) const { return tokenizer_.decode(ids); }

PromptTokenizer open_prompt_tokenizer(const std::string& store_dir) {
  namespace fs = std::filesystem;
  const StoreMeta meta = read_meta(store_dir);
  const fs::path dir(store_dir);
  const std::string meta_path = (dir / "meta.json").string();
  std::string kind = meta.tokenizer_kind;
  if (kind.empty() && meta.tokenizer == "tokenizer.model") kind = "sentencepiece";  // stores older than the key
  if (kind.empty() && meta.tokenizer.starts_with("hf:")) kind = "hf-bpe";
  if (kind.empty())
    throw InputError(meta_path + ": the store '" + store_dir + "' records no tokenizer (\"tokenizer\": \"" +
                     meta.tokenizer + "\") to write prompts with; make it with `segtrain prepare --tokenizer` " +
                     "(a sentencepiece .model or the model's HF folder)");
  if (kind != "sentencepiece" && kind != "hf-sentencepiece" && kind != "hf-bpe")
    throw InputError(meta_path + ": tokenizer_kind '" + kind + "' is not one of sentencepiece, hf-sentencepiece, hf-bpe");
  // The file meta.json's "tokenizer" names: "tokenizer.model" or "hf:tokenizer.json".
  const std::string name = meta.tokenizer.starts_with("hf:") ? meta.tokenizer.substr(3) : meta.tokenizer;
  const fs::path file = path_inside(dir, name.empty() ? (kind == "hf-bpe" ? "tokenizer.json" : "tokenizer.model") : name,
                                    meta_path, "\"tokenizer\"");
  if (!fs::is_regular_file(file))
    throw InputError(file.string() + ": missing: the store '" + store_dir + "' records the tokenizer '" +
                     meta.tokenizer + "' (" + kind + ") in meta.json but does not hold its file");

  PromptTokenizer p;
  // A sentencepiece .model alone is opened as the file (documents without BOS); an HF
  // folder's tokenizer as the folder its kept files make of the store.
  p.tokenizer_ = open_document_tokenizer(kind == "sentencepiece" ? file.string() : store_dir);
  if (p.tokenizer_.kind != kind)
    throw InputError(store_dir + ": the tokenizer files kept in the store make a " + p.tokenizer_.kind +
                     " tokenizer, but " + meta_path + " records tokenizer_kind '" + kind + "'");
  if (p.tokenizer_.vocab_size != meta.vocab_size)
    throw InputError(file.string() + ": a vocabulary of " + std::to_string(p.tokenizer_.vocab_size) + ", but " +
                     meta_path + " records vocab_size " + std::to_string(meta.vocab_size));
  p.bos_id_ = meta.add_bos ? static_cast<int32_t>(meta.bos_id) : -1;
  return p;
}

}  // namespace segtrain::data
