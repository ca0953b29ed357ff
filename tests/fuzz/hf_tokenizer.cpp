// An HF tokenizer.json through BpeTokenizer::load (`segtrain prepare --tokenizer DIR`),
// then one text with added tokens, non-ASCII, CRLF and whitespace runs encoded with it.
// Property: every id is inside the vocabulary the tokenizer reports.
#include <cstdint>
#include <vector>

#include "data/bpe_tokenizer.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(hf_tokenizer) {
  const auto path = fuzz::scratch_dir() / "tokenizer.json";
  fuzz::write_file(path, fuzz::as_text(data, size));
  const auto tok = data::BpeTokenizer::load(path.string());
  std::vector<int32_t> ids;
  tok.encode("Hello, world! It's 2024:\r\n  na\xc3\xafve caf\xc3\xa9 \xf0\x9f\x91\x8d <|endoftext|>\t\t x  \n", ids);
  ids.insert(ids.end(), tok.prefix().begin(), tok.prefix().end());
  for (const int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) fuzz::violated("id " + std::to_string(id) + " outside the vocabulary");
}
