#pragma once
// A corpus's token store for the grid (<output_dir>/<corpus>/store): made from the
// corpus's text (written first for a synthetic corpus) once, with a record of the
// settings and files it was made from, so that a later invocation whose corpus changed
// is refused rather than training every row on a stale store.
#include "trainer/config/config.h"
#include "trainer/experiment/experiment.h"

namespace segtrain::trainer {

// Makes the store of `corpus` unless it is there and made from the same corpus (a
// corpus given as a ready store is left as it is); InputError naming the difference when
// the store there was made from another. `base_template`: the run settings (its seed
// splits the validation documents off).
void ensure_store(const ExperimentConfig& x, const CorpusSpec& corpus, const LoadedConfig& base_template);

}  // namespace segtrain::trainer
