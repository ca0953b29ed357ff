// One safetensors file (header length, JSON header, dtypes, shapes, data
// offsets) through read_safetensors, as every model and checkpoint load does.
#include "models/modules/safetensors.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(safetensors) {
  const auto file = fuzz::scratch_dir() / "model.safetensors";
  fuzz::write_file(file, fuzz::as_text(data, size));
  std::map<std::string, std::string> metadata;
  (void)models::read_safetensors(file.string(), &metadata);
}
