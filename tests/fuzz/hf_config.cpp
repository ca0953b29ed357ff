// An HF folder's config.json (gpt2, gpt_neox, bloom; rope scaling; the
// "segtrain" field of exported folders) through read_model_config, which is
// what `model.init: hf:DIR`, `segtrain eval/export/inspect --model DIR` call.
#include "models/modules/model_io.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(hf_config) {
  const auto dir = fuzz::scratch_dir() / "hf";
  fuzz::write_file(dir / "config.json", fuzz::as_text(data, size));
  (void)models::read_model_config(dir.string());
}
