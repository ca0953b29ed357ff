// One split of a token store, a Megatron indexed dataset (.idx + .bin), through
// IndexedDataset::open with a vocabulary of 4096, then every document read back
// as the samplers do. Input: a little-endian uint32 n, then n bytes of .idx,
// then the .bin (corpus files are made this way from real stores).
#include <cstring>

#include "data/token_store.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(megatron_idx) {
  std::string_view input = fuzz::as_text(data, size), idx = input, bin;
  if (input.size() >= 4) {
    uint32_t n = 0;
    std::memcpy(&n, input.data(), 4);
    input.remove_prefix(4);
    idx = input.substr(0, n);
    bin = input.substr(idx.size());
  }
  const auto prefix = fuzz::scratch_dir() / "train";
  fuzz::write_file(prefix.string() + ".idx", idx);
  fuzz::write_file(prefix.string() + ".bin", bin);
  const auto ds = data::IndexedDataset::open(prefix.string(), 4096);
  int64_t tokens = 0;
  for (int64_t d = 0; d < ds.documents(); ++d) tokens += static_cast<int64_t>(ds.document(d).size());
  if (tokens != ds.tokens()) fuzz::violated("the documents' lengths do not add up to tokens()");
}
