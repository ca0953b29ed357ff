#pragma once
// Internal to the config code: the run config's key table, one Field per YAML key
// bound to a Config (the builders and Field itself: field.h).
#include <vector>

#include "trainer/config/config.h"
#include "trainer/config/field.h"

namespace segtrain::trainer::schema {

// Every key of the config, in the order the resolved YAML lists them.
std::vector<Field> fields(Config& config);

}  // namespace segtrain::trainer::schema
