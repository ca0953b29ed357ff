#pragma once
// A corpus's rows as the report reads them: a row's result at a length, the rows the
// main tables compare, the budget curves and the chunk/chunk-ring pairs. The markdown
// sections and the plots ask the same questions, so they read the same answers.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trainer/experiment/intervals.h"
#include "trainer/experiment/report.h"

namespace segtrain::trainer {

// The row evaluated at `length`, or nullptr.
const LengthResult* at_length(const RowResult& row, int64_t length);

// The perplexity of the row labelled `label` at `factor` and `length`; NaN when there is none.
double ppl_at(const CorpusResults& c, const std::string& label, int64_t factor, int64_t length);

// A row the main tables compare: at the experiment's budget and no variant (the budget
// curve and the variants have tables of their own).
bool compared_row(const RowResult& row);

// Labels of the rows the main tables compare.
std::vector<std::string> row_labels(const CorpusResults& c);

// The lengths the rows of `factor` were evaluated at, ascending.
std::vector<int64_t> factor_lengths(const CorpusResults& c, int64_t factor);

// The loss units of `row` at `length` (empty when it kept no windows there).
LossUnits units_at(const RowResult& row, int64_t length);

// The row labelled `label` at `factor` and the experiment's budget, with results; or nullptr.
const RowResult* main_row(const CorpusResults& c, const std::string& label, int64_t factor);

// The row labelled `label` at `factor`, with results, at any budget; or nullptr.
const RowResult* row_at(const CorpusResults& c, const std::string& label, int64_t factor);

// A trained method at more than one budget (methods[].budgets): its rows by budget.
std::vector<std::pair<std::string, std::vector<const RowResult*>>> budget_curves(const CorpusResults& c, int64_t factor);

// The lengths a budget curve is read at: the two longest evaluated.
std::vector<int64_t> curve_lengths(const CorpusResults& c, int64_t factor);

// Each chunk-ring-<a> row with its chunk-<a> row at `factor` (labels).
std::vector<std::pair<std::string, std::string>> ring_pairs(const CorpusResults& c, int64_t factor);

// A row's per-position losses at its longest length. A row whose curve was not kept
// (imported from a published results.json) has each position at its block's mean over
// windows: bucket means over whole blocks are then the same as the kept curve's.
std::vector<double> position_losses(const LengthResult& r);

}  // namespace segtrain::trainer
