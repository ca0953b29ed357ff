// A converted model directory's converters.json through read_converters, as loading a
// run's final/ or a checkpoint: base does.
#include "models/modules/converters/converter.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(converters) {
  const auto dir = fuzz::scratch_dir() / "model";
  fuzz::write_file(dir / models::kConvertersFile, fuzz::as_text(data, size));
  (void)models::read_converters(dir.string());
}
