#pragma once
// How the grid scores a row: the evaluation suite and settings of each row, and the
// evaluation itself, which keeps every task's figures in the row's row.json and runs
// again only what its record does not hold with the same settings (a task added since,
// more windows asked for since, another model in the folder).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "data/token_store.h"
#include "trainer/eval/suite.h"
#include "trainer/experiment/experiment.h"
#include "trainer/experiment/report.h"

namespace segtrain::trainer {

// Names, sizes and write times of a model folder's files: a base trained
// again in the same place has another identity, so nothing built on the old
// one is reused.
std::string model_identity(const std::string& dir);

// The grid's evaluation suite for `row`: the template's eval.tasks at the row's
// lengths, perplexity from window `first_window` on (the earlier ones kept from the
// row's record). The base row at L_t is the OOTB row without a scaling: its prompt
// tasks would repeat that row's.
EvalSuite row_suite(const ExperimentConfig& x, const RowResult& row, int64_t first_window = 0);

// Each task of `row`'s suite with the settings its figures are recorded with (the
// model folder's files aside: evaluate_row adds their identity).
std::map<std::string, nlohmann::json> task_settings(const ExperimentConfig& x, const RowResult& row,
                                                    const std::string& model_dir,
                                                    const std::vector<std::string>& overrides);

// Evaluates one row's model: each task of the suite unless row.json holds its
// figures from the same settings; each is reused on its own, so adding a task
// to a finished grid runs that task alone, and asking for more windows scores
// only the new ones. `continued`: an imported row whose windows this one keeps
// (its model rebuilt here), or nullptr.
RowResult evaluate_row(RowResult row, const std::filesystem::path& row_dir, const std::string& model_dir,
                       const std::vector<std::string>& overrides, const ExperimentConfig& x,
                       const std::string& store_path, const data::TokenStore& store,
                       const RowResult* continued = nullptr);

}  // namespace segtrain::trainer
