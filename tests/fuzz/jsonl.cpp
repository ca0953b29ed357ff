// A JSONL corpus file (optionally gzip-compressed: zlib reads both) through
// read_corpus, as `segtrain prepare --input corpus.jsonl` does.
#include "data/corpus.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(jsonl) {
  const auto file = fuzz::scratch_dir() / "corpus.jsonl";
  fuzz::write_file(file, fuzz::as_text(data, size));
  data::CorpusStats stats;
  (void)data::read_corpus({file.string()}, data::CorpusOptions{}, stats);
}
