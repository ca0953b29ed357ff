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

// One item of experiment.variants: the rows `of` trained again with `set` applied after their
// own settings, each as the row <row>+<name>, compared with its row.
struct VariantItem {
  std::string name;
  std::vector<std::string> of;
  std::vector<Assignment> set;
  std::vector<std::string> versus;  // more rows its rows are compared with (e.g. da)
  std::string origin;  // file:line:col of the item
};

// The rows a file without experiment.methods trains: Karypis et al.'s Table 1 and 4 rows.
std::vector<MethodItem> default_method_items();

// The section's keys bound to `x` (and the method and variant items to `methods`, `variants`); the list
// keys read their items' own keys through `reader`, each under its index
// ("experiment.corpora[0].name").
std::vector<schema::Field> experiment_fields(ExperimentConfig& x, std::vector<MethodItem>& methods,
                                             std::vector<VariantItem>& variants, schema::FieldReader& reader);

// Rows of `segtrain config reference`: the section's keys, then a corpus's, a
// method's and a variant's ("experiment.corpora[].name").
std::string experiment_reference_rows();

}  // namespace segtrain::trainer
