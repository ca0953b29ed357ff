#pragma once
// The decoder of a byte-level BPE tokenizer.json (BpeTokenizer::decode): ids ->
// UTF-8 text as `tokenizers`' decode(ids, skip_special_tokens=False).
//
// Each id becomes its token string (an added token's content, else the model
// vocabulary's; ids that are neither are skipped, as tokenizers does), then the
// file's "decoder" runs over the list. Supported: ByteLevel (each token whose
// characters are all GPT-2 byte characters becomes those bytes, any other token
// its own UTF-8 bytes, e.g. added tokens such as "<|im_start|>"; the whole is read
// as UTF-8 with U+FFFD for each maximal invalid subsequence), ByteFallback
// ("<0xNN>" tokens become bytes, a run that is not valid UTF-8 one U+FFFD per
// byte), Fuse, and a Sequence of them. A file without a decoder is decoded as
// ByteLevel (BpeTokenizer needs a ByteLevel pre-tokenizer, so its ids are bytes;
// tokenizers itself would join the raw tokens with spaces). Any other decoder is
// an InputError naming the file and the field, raised when decoding.
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace segtrain::data {

struct BpeDecoder;  // bpe_decoder.cpp's

// `tokenizer_json` is the parsed file at `path` (already checked by BpeTokenizer::load).
std::shared_ptr<const BpeDecoder> make_bpe_decoder(const nlohmann::json& tokenizer_json, const std::string& path);
std::string bpe_decode(const BpeDecoder& decoder, const std::vector<int32_t>& ids);

// `bytes` as UTF-8, each maximal invalid subsequence replaced by one U+FFFD
// (Rust's String::from_utf8_lossy, Python's decode("utf-8", "replace")).
std::string utf8_lossy(const std::string& bytes);

}  // namespace segtrain::data
