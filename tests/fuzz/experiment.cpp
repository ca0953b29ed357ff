// The experiment file reader as `segtrain experiment FILE --set k=v...` uses it:
// load_experiment parses the run sections and the `experiment:` section, then
// plans and validates every run of the grid (nothing is written or trained).
// Input: the YAML file, optionally followed by NUL-separated --set assignments.
#include "common/log.h"
#include "tests/fuzz/fuzz_target.h"
#include "trainer/experiment/experiment.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(experiment) {
  static const bool quiet = [] {
    log::Options options;
    options.level = log::Level::error;
    log::init(options);
    return true;
  }();
  (void)quiet;
  const auto [yaml, overrides] = fuzz::split_nul(fuzz::as_text(data, size));
  const auto file = fuzz::scratch_dir() / "experiment.yaml";
  fuzz::write_file(file, yaml);
  (void)trainer::load_experiment(file.string(), overrides);
}
