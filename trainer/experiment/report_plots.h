#pragma once
// An experiment's plots, plots/<corpus>-x<f>*.svg: each factor's loss by position of the
// compared rows, the budget curves' perplexity by training tokens, and chunk against
// chunk-ring. results.md links them by the names given here.
#include <cstdint>
#include <filesystem>
#include <string>

#include "trainer/experiment/experiment.h"
#include "trainer/experiment/report.h"

namespace segtrain::trainer {

std::string plot_name(const CorpusResults& c, int64_t factor);         // "<corpus>-x<f>.svg"
std::string budget_plot_name(const CorpusResults& c, int64_t factor);  // "<corpus>-x<f>-budget.svg"
std::string ring_plot_name(const CorpusResults& c, int64_t factor);    // "<corpus>-x<f>-ring.svg"

// Writes corpus `c`'s plots into `dir` (made if missing): a budget plot where a method has
// a budget curve, a ring plot where chunk-ring rows have their chunk rows.
void write_plots(const ExperimentConfig& x, const CorpusResults& c, const std::filesystem::path& dir);

}  // namespace segtrain::trainer
