// An HF folder's config.json (gpt2, gpt_neox, bloom; rope scaling; the
// "segtrain" field of exported folders) through read_hf_config, which is what
// `model.init: hf:DIR`, `segtrain eval/export/inspect --model DIR` and the run config's
// checks of a base folder call.
#include "models/spec/families/hf_config.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(hf_config) {
  const auto dir = fuzz::scratch_dir() / "hf";
  fuzz::write_file(dir / "config.json", fuzz::as_text(data, size));
  (void)models::read_hf_config(dir.string());
}
