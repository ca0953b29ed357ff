// A checkpoint's rng_state.json through generators_from_json, which `segtrain train --resume`
// calls before it sets the generators dropout draws from.
#include "tests/fuzz/fuzz_target.h"
#include "trainer/train/random_state.h"

#include <string>

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(rng_state) {
  (void)trainer::generators_from_json(std::string(fuzz::as_text(data, size)), "rng_state.json");
}
