#pragma once
// The freeze converter (train.freeze): parameters whose name matches stop
// training; their values are then bit-identical through training, resume and
// export, and the optimizer holds no state for them.
//
// Patterns are globs over parameter names ("*" any run of characters, "?" one),
// read in order; a pattern starting with "!" makes what it matches train again,
// and the last pattern that matches a name decides, as in .gitignore:
//   ["*", "!*norm*", "!wte.*"]  freezes everything but the norms and the embedding.
#include <memory>
#include <string>
#include <vector>

#include "models/modules/converters/converter.h"

namespace segtrain::models {

// Whether glob `pattern` matches all of `name`.
bool glob_matches(const std::string& pattern, const std::string& name);

// Refuses (InputError) an empty pattern or "!" alone; convert() refuses a
// pattern that matches no parameter (a typo freezes nothing) and a list that
// freezes every parameter (nothing would train).
std::unique_ptr<ModelConverter> make_freeze(std::vector<std::string> patterns);

// Its entry in the registry (converter.h).
ConverterKind freeze_converter();

}  // namespace segtrain::models
