#pragma once
// The `experiment:` section's key table: every key with its type, range, default
// and meaning (trainer/config/field.h), read by the run config's own reader
// (FieldReader: errors at file:line:col, unknown keys with the nearest one) and
// printed by `segtrain config reference`. What needs several keys at once (a
// corpus has one source, the lengths hold L_t and L_e, ...) is config_reader.cpp's.
#include <string>
#include <vector>

#include "trainer/config/field.h"
#include "trainer/config/field_reader.h"
#include "trainer/experiment/experiment.h"

namespace segtrain::trainer {

// One item of experiment.methods as written: a name, or {name, budgets, set}.
struct MethodItem {
  std::string name;
  std::vector<int64_t> budgets;
  std::vector<Assignment> set;
  std::string origin;  // file:line:col of the item
};

// The rows a file without experiment.methods trains: seed 004's Table 1 and 4 rows.
std::vector<MethodItem> default_method_items();

// The section's keys bound to `x` (and the method items to `methods`); the list
// keys read their items' own keys through `reader`, each under its index
// ("experiment.corpora[0].name").
std::vector<schema::Field> experiment_fields(ExperimentConfig& x, std::vector<MethodItem>& methods,
                                             schema::FieldReader& reader);

// Rows of `segtrain config reference`: the section's keys, then a corpus's and a
// method's ("experiment.corpora[].name").
std::string experiment_reference_rows();

}  // namespace segtrain::trainer
