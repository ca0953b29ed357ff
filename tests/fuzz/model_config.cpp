// segtrain's own model_config.json (checkpoints, run outputs) through
// read_segtrain_model_config, as `model.init: checkpoint:DIR`, `--model DIR` and the run
// config's checks of a base folder do.
#include "models/spec/model_config_json.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(model_config) {
  const auto dir = fuzz::scratch_dir() / "model";
  fuzz::write_file(dir / "model_config.json", fuzz::as_text(data, size));
  (void)models::read_segtrain_model_config(dir.string());
}
