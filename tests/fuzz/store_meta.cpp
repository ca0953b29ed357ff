// A token store's meta.json through read_meta (TokenStore::open reads it first).
#include "data/token_store.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(store_meta) {
  const auto dir = fuzz::scratch_dir() / "store";
  fuzz::write_file(dir / "meta.json", fuzz::as_text(data, size));
  (void)data::read_meta(dir.string());
}
