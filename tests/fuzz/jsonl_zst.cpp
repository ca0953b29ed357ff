// A zstd-compressed JSONL corpus file through read_corpus, as `segtrain prepare --input
// corpus.jsonl.zst` reads it: libzstd's streaming decoder behind data/file_stream.h.
#include "data/corpus.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(jsonl_zst) {
  const auto file = fuzz::scratch_dir() / "corpus.jsonl.zst";
  fuzz::write_file(file, fuzz::as_text(data, size));
  data::CorpusStats stats;
  (void)data::read_corpus({file.string()}, data::CorpusOptions{}, stats);
}
