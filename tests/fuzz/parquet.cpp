// A Parquet corpus file through read_corpus, as `segtrain prepare --input corpus.parquet` reads
// it (data/arrow_documents.h): Arrow's own code is not instrumented here, but every way it
// fails must reach the user as one InputError, not another exception.
#include "data/corpus.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(parquet) {
  const auto file = fuzz::scratch_dir() / "corpus.parquet";
  fuzz::write_file(file, fuzz::as_text(data, size));
  data::CorpusStats stats;
  (void)data::read_corpus({file.string()}, data::CorpusOptions{}, stats);
}
