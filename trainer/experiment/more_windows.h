#pragma once
// A row scored on more windows than its record holds: eval.max_sequences raised after
// the row was scored (a study's 4 documents made 8). Windows are taken in a fixed order
// (the split's documents in turn), so the recorded ones are the first of the larger
// count: the grid keeps them and evaluates only the rest (PerplexityOptions::first_window,
// append_windows), from the row's own model or, for an imported row, from its model
// rebuilt here once it has reproduced the record's first window.
#include <nlohmann/json.hpp>

namespace segtrain::trainer {

// Whether a perplexity record measured with `recorded` settings is continued by a grid
// that asks `here`: the two differ in max_sequences alone, and `here` asks for more
// windows (0: every window) than `recorded` took (a positive count).
bool adds_windows(const nlohmann::json& recorded, const nlohmann::json& here);

// `settings` (a perplexity task's, as JSON) with max_sequences `count`: the settings the
// windows a record keeps were measured with, as this grid would record them.
nlohmann::json with_max_sequences(nlohmann::json settings, int64_t count);

}  // namespace segtrain::trainer
