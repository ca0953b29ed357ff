#pragma once
// A run config's key set from somewhere other than the command line's --set: an experiment
// file's `set:` mappings (experiment.base.set, extend.set, a method's or a variant's set), whose
// errors name the file, line and key they were written at, not a --set the user never gave.
#include <string>

#include "trainer/config/config.h"

namespace segtrain::trainer {

// apply_override of `assignment` ("key=value") with `where` ("exp.yaml:14:9 (experiment.variants[0].set,
// variant lora)") in place of "--set key=value": each error begins with it, and it is the key's origin.
void apply_setting(LoadedConfig& loaded, const std::string& assignment, const std::string& where);

}  // namespace segtrain::trainer
