#include "data/document_tokenizer.h"

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/error.h"
#include "common/file_io.h"
#include "data/bpe_tokenizer.h"
#include "data/tokenizer.h"

namespace segtrain::data {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string str(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}
bool flag(const json& j, const char* key) { return j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); }

// The one rule of a stored document's end: EOS, unless the ids already end with it
// (a post-processor that appends it).
void end_document(std::vector<int32_t>& ids, int32_t eos) {
  if (ids.empty() || ids.back() != eos) ids.push_back(eos);
}

json read_json_if(const fs::path& p) {
  if (!fs::is_regular_file(p)) return json();
  try {
    return json::parse(read_file(p, "tokenizer configuration"));
  } catch (const json::exception& e) {
    throw InputError(p.string() + ": not valid JSON: " + e.what());
  }
}

// tokenizer_config.json's (or special_tokens_map.json's) bos_token / eos_token: a string or {"content": ...}.
std::optional<std::string> special_token(const json& config, const json& map, const char* key) {
  for (const json* j : {&config, &map}) {
    if (!j->is_object() || !j->contains(key)) continue;
    const auto& v = (*j)[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    if (v.is_null()) return std::nullopt;
  }
  return std::nullopt;
}

std::optional<bool> config_flag(const json& config, const char* key) {
  if (config.is_object() && config.contains(key) && config[key].is_boolean()) return config[key].get<bool>();
  return std::nullopt;
}

// The sentencepiece model with normalizer_spec.add_dummy_prefix = false: ModelProto's
// field 3 (NormalizerSpec) gets its field 3 (add_dummy_prefix) = 0 appended, and protobuf
// keeps the last value of a scalar field. The input unchanged if it cannot be walked.
std::string without_dummy_prefix(const std::string& proto) {
  auto varint = [&](size_t& i, uint64_t& v) {
    v = 0;
    for (int shift = 0; i < proto.size() && shift < 64; shift += 7) {
      const auto b = static_cast<unsigned char>(proto[i++]);
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  auto put_varint = [](std::string& out, uint64_t v) {
    while (v >= 0x80) {
      out += static_cast<char>((v & 0x7F) | 0x80);
      v >>= 7;
    }
    out += static_cast<char>(v);
  };
  const std::string off("\x18\x00", 2);
  std::string out;
  bool found = false;
  for (size_t i = 0; i < proto.size();) {
    const size_t start = i;
    uint64_t key = 0, v = 0;
    if (!varint(i, key)) return proto;
    switch (key & 7) {
      case 0: if (!varint(i, v)) return proto; break;
      case 1: i += 8; break;
      case 5: i += 4; break;
      case 2:
        if (!varint(i, v) || v > proto.size() - i) return proto;
        if ((key >> 3) == 3) {
          out += '\x1A';
          put_varint(out, v + off.size());
          out.append(proto, i, v);
          out += off;
          i += v;
          found = true;
          continue;
        }
        i += v;
        break;
      default: return proto;
    }
    if (i > proto.size()) return proto;
    out.append(proto, start, i - start);
  }
  if (!found) out += std::string("\x1A\x02", 2) + off;
  return out;
}

// Where transformers' conversion of a sentencepiece model puts the "▁" that
// sentencepiece's add_dummy_prefix adds in front of the text.
enum class Prepend { never, always, unless_space, first_unless_space };

Prepend prepend_of(const json& j, const json& config) {
  // transformers 5's LlamaTokenizer (Llama 2, Mistral) keeps tokenizer.json's vocabulary,
  // merges and post-processor but sets its own pipeline: no normalizer and
  // Metaspace(prepend_scheme = add_prefix_space ? (legacy ? always : first) : never).
  const std::string cls = str(config, "tokenizer_class");
  if (cls == "LlamaTokenizer" || cls == "LlamaTokenizerFast") {
    if (!config_flag(config, "add_prefix_space").value_or(true)) return Prepend::never;
    return config_flag(config, "legacy").value_or(false) ? Prepend::unless_space : Prepend::first_unless_space;
  }
  Prepend mode = Prepend::never;
  std::function<void(const json&)> normalizer = [&](const json& n) {
    if (!n.is_object()) return;
    if (str(n, "type") == "Prepend") mode = Prepend::always;  // legacy: every piece, even after a space
    if (n.contains("normalizers") && n["normalizers"].is_array())
      for (const auto& m : n["normalizers"]) normalizer(m);
  };
  std::function<void(const json&)> pre = [&](const json& p) {
    if (!p.is_object()) return;
    if (str(p, "type") == "Metaspace") {
      const std::string scheme = str(p, "prepend_scheme");
      mode = scheme == "first"    ? Prepend::first_unless_space
             : scheme == "always" ? Prepend::unless_space
             : scheme == "never"  ? Prepend::never
             : flag(p, "add_prefix_space") ? Prepend::unless_space
                                           : Prepend::never;
    }
    if (p.contains("pretokenizers") && p["pretokenizers"].is_array())
      for (const auto& m : p["pretokenizers"]) pre(m);
  };
  normalizer(j.value("normalizer", json()));
  pre(j.value("pre_tokenizer", json()));
  return mode;
}

}  // namespace

namespace {

// A sentencepiece .model file given as the tokenizer (segtrain's own stores).
DocumentTokenizer sentencepiece_file(const std::string& path) {
  DocumentTokenizer d;
  auto sp = std::make_shared<Tokenizer>(Tokenizer::load(path));
  d.kind = "sentencepiece";
  d.meta_name = "tokenizer.model";
  d.vocab_size = sp->vocab_size();
  d.eos_id = sp->eos_id();
  d.bos_id = sp->bos_id();  // recorded; documents do not start with it (add_bos false), as before
  d.encode = [sp](std::string_view text, std::vector<int32_t>& out) { sp->encode(text, out); };
  d.encode_text = [sp](std::string_view text, std::vector<int32_t>& out) { sp->encode_ids(text, out); };
  d.decode = [sp](const std::vector<int32_t>& ids) { return sp->decode(ids); };
  d.files.emplace_back("tokenizer.model", sp->serialized());
  return d;
}

// An HF folder's files and its bos/eos tokens (tokenizer_config.json, else special_tokens_map.json).
struct HfFolder {
  fs::path model, tokenizer_json, config_file, map_file;
  json config, map;
  std::optional<std::string> bos_token, eos_token;

  explicit HfFolder(const fs::path& dir)
      : model(dir / "tokenizer.model"), tokenizer_json(dir / "tokenizer.json"),
        config_file(dir / "tokenizer_config.json"), map_file(dir / "special_tokens_map.json"),
        config(read_json_if(config_file)), map(read_json_if(map_file)),
        bos_token(special_token(config, map, "bos_token")), eos_token(special_token(config, map, "eos_token")) {}

  // The folder's `key` token (bos_token, eos_token) as an id of `vocabulary` (named
  // in the message), looked up by `id`.
  int32_t special_id(const std::string& token, const char* key, const std::string& vocabulary,
                     const std::function<std::optional<int32_t>(const std::string&)>& id) const {
    const auto found = id(token);
    if (!found)
      throw InputError((fs::is_regular_file(config_file) ? config_file : map_file).string() + ": " + key + " '" +
                       token + "' is not a token of " + vocabulary);
    return *found;
  }
};

// sentencepiece alone: BOS as LlamaTokenizer's add_bos_token (default true).
void encode_with_sentencepiece(DocumentTokenizer& d, const std::shared_ptr<Tokenizer>& sp, const HfFolder& f) {
  const bool add_bos = config_flag(f.config, "add_bos_token").value_or(true) && d.bos_id >= 0;
  const int32_t bos = d.bos_id, eos = d.eos_id;
  d.add_bos = add_bos;
  d.encode = [sp, add_bos, bos, eos](std::string_view text, std::vector<int32_t>& out) {
    out.clear();
    if (add_bos) out.push_back(bos);
    sp->encode_ids(text, out);
    end_document(out, eos);
  };
  d.encode_text = [sp](std::string_view text, std::vector<int32_t>& out) { sp->encode_ids(text, out); };
}

// transformers loads tokenizer.json, its conversion of the model: its post-processor says
// what goes around `tok(text)` (BOS for Llama 2), its added tokens are matched in the text
// first, and its Metaspace or Prepend says which pieces get sentencepiece's "▁" prefix.
void encode_as_tokenizer_json(DocumentTokenizer& d, const std::shared_ptr<Tokenizer>& sp, const HfFolder& f) {
  auto frame = std::make_shared<TokenizerFrame>(
      TokenizerFrame::load(f.tokenizer_json.string(), d.vocab_size, f.model.string()));
  Prepend mode = Prepend::never;
  try {
    mode = prepend_of(json::parse(read_file(f.tokenizer_json, "tokenizer")), f.config);
  } catch (const json::exception& e) {
    throw InputError(f.tokenizer_json.string() + ": not valid JSON: " + e.what());
  }
  d.add_bos = d.bos_id >= 0 && !frame->prefix().empty() && frame->prefix().front() == d.bos_id;
  auto plain = std::make_shared<Tokenizer>(
      Tokenizer::from_serialized(without_dummy_prefix(sp->serialized()), f.model.string()));
  const int32_t eos = d.eos_id;
  d.encode_text = [plain, frame, mode](std::string_view text, std::vector<int32_t>& out) {
    const auto pieces = frame->split_added(text);
    for (size_t i = 0; i < pieces.size(); ++i) {
      const auto& p = pieces[i];
      if (p.token >= 0) {
        out.push_back(p.token);
        continue;
      }
      const bool space = p.text.starts_with(' ');
      const bool prefix = mode == Prepend::always || (mode == Prepend::unless_space && !space) ||
                          (mode == Prepend::first_unless_space && i == 0 && !space);
      plain->encode_ids(prefix ? " " + p.text : p.text, out);
    }
  };
  d.encode = [text_ids = d.encode_text, frame, eos](std::string_view text, std::vector<int32_t>& out) {
    out.assign(frame->prefix().begin(), frame->prefix().end());
    text_ids(text, out);
    out.insert(out.end(), frame->suffix().begin(), frame->suffix().end());
    end_document(out, eos);
  };
}

// An HF folder whose tokenizer.model is sentencepiece (Llama 2, Mistral).
DocumentTokenizer hf_sentencepiece(Tokenizer loaded, const HfFolder& f) {
  DocumentTokenizer d;
  auto sp = std::make_shared<Tokenizer>(std::move(loaded));
  d.kind = "hf-sentencepiece";
  d.meta_name = "tokenizer.model";
  d.vocab_size = sp->vocab_size();
  const auto piece = [&](const std::string& token) -> std::optional<int32_t> {
    const int32_t id = sp->piece_id(token);
    return id < 0 ? std::nullopt : std::optional<int32_t>(id);
  };
  const std::string vocabulary = f.model.string();
  d.bos_id = f.bos_token ? f.special_id(*f.bos_token, "bos_token", vocabulary, piece) : sp->bos_id();
  d.eos_id = f.eos_token ? f.special_id(*f.eos_token, "eos_token", vocabulary, piece) : sp->eos_id();
  if (d.eos_id < 0) throw InputError(vocabulary + ": no EOS piece and no eos_token in " + f.config_file.string());
  if (fs::is_regular_file(f.tokenizer_json))
    encode_as_tokenizer_json(d, sp, f);
  else
    encode_with_sentencepiece(d, sp, f);
  d.decode = [sp](const std::vector<int32_t>& ids) { return sp->decode(ids); };
  d.files.emplace_back("tokenizer.model", sp->serialized());
  return d;
}

// An HF folder with a byte-level BPE tokenizer.json alone (GPT-2, Llama 3, Qwen2, SmolLM2).
DocumentTokenizer hf_bpe(const std::string& path, const HfFolder& f) {
  DocumentTokenizer d;
  const std::string tj = f.tokenizer_json.string();
  auto bpe = std::make_shared<BpeTokenizer>(BpeTokenizer::load(tj));
  d.kind = "hf-bpe";
  d.meta_name = "hf:tokenizer.json";
  d.vocab_size = bpe->vocab_size();
  const auto token = [&](const std::string& t) { return bpe->token_id(t); };
  if (f.eos_token) {
    d.eos_id = f.special_id(*f.eos_token, "eos_token", tj, token);
  } else {
    for (const char* c : {"<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>"})
      if (auto id = bpe->token_id(c)) {
        d.eos_id = *id;
        break;
      }
    if (d.eos_id < 0)
      throw InputError(path + ": no eos_token in tokenizer_config.json and none of <|endoftext|>, </s>, <eos>, "
                              "<|end_of_text|> in " + tj);
  }
  if (f.bos_token) d.bos_id = f.special_id(*f.bos_token, "bos_token", tj, token);
  d.add_bos = d.bos_id >= 0 && !bpe->prefix().empty() && bpe->prefix().front() == d.bos_id;
  const int32_t eos = d.eos_id;
  d.encode = [bpe, eos](std::string_view text, std::vector<int32_t>& out) {
    out.assign(bpe->prefix().begin(), bpe->prefix().end());
    bpe->encode(text, out);
    out.insert(out.end(), bpe->suffix().begin(), bpe->suffix().end());
    end_document(out, eos);
  };
  d.encode_text = [bpe](std::string_view text, std::vector<int32_t>& out) { bpe->encode(text, out); };
  d.decode = [bpe](const std::vector<int32_t>& ids) { return bpe->decode(ids); };
  return d;
}

}  // namespace

DocumentTokenizer open_document_tokenizer(const std::string& path) {
  // A file of an HF folder (its tokenizer.json, tokenizer_config.json) given for the folder.
  if (fs::is_regular_file(path) && fs::path(path).extension() == ".json")
    throw InputError(path + ": a Hugging Face tokenizer is read from its folder (tokenizer.json with the files "
                     "beside it): give --tokenizer " + (fs::path(path).has_parent_path()
                                                           ? fs::path(path).parent_path().string()
                                                           : std::string(".")));
  if (!fs::is_directory(path)) return sentencepiece_file(path);
  const fs::path dir(path);
  const HfFolder folder(dir);
  std::optional<Tokenizer> sp_loaded;
  if (fs::is_regular_file(folder.model)) {
    try {
      sp_loaded = Tokenizer::load(folder.model.string());
    } catch (const InputError&) {
      // Not sentencepiece (Llama 3 ships tiktoken's file under this name): use tokenizer.json.
      if (!fs::is_regular_file(folder.tokenizer_json)) throw;
    }
  }
  DocumentTokenizer d;
  if (sp_loaded)
    d = hf_sentencepiece(std::move(*sp_loaded), folder);
  else if (fs::is_regular_file(folder.tokenizer_json))
    d = hf_bpe(path, folder);
  else
    throw InputError(path + ": neither tokenizer.model nor tokenizer.json in this folder (expected a Hugging Face "
                            "tokenizer folder or a sentencepiece .model file)");
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
    if (fs::is_regular_file(dir / name)) d.files.emplace_back(name, read_file(dir / name, "tokenizer"));
  return d;
}

}  // namespace segtrain::data
