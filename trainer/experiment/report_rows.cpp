// The lookups over a corpus's rows that the report's tables, sections and plots share
// (experiment/report_rows.h).
#include "trainer/experiment/report_rows.h"

#include <algorithm>
#include <cmath>

namespace segtrain::trainer {

const LengthResult* at_length(const RowResult& row, int64_t length) {
  for (const auto& r : row.results)
    if (r.length == length) return &r;
  return nullptr;
}

double ppl_at(const CorpusResults& c, const std::string& label, int64_t factor, int64_t length) {
  for (const auto& row : c.rows)
    if (row.label == label && row.factor == factor)
      if (const LengthResult* r = at_length(row, length)) return r->ppl;
  return std::nan("");
}

bool compared_row(const RowResult& row) { return row.budget == 0 && row.variant_of.empty(); }

std::vector<std::string> row_labels(const CorpusResults& c) {
  std::vector<std::string> labels;
  for (const auto& row : c.rows)
    if (compared_row(row) && std::find(labels.begin(), labels.end(), row.label) == labels.end()) labels.push_back(row.label);
  return labels;
}

std::vector<int64_t> factor_lengths(const CorpusResults& c, int64_t factor) {
  std::vector<int64_t> lengths;
  for (const auto& row : c.rows)
    if (row.factor == factor)
      for (int64_t l : row.lengths)
        if (std::find(lengths.begin(), lengths.end(), l) == lengths.end()) lengths.push_back(l);
  std::sort(lengths.begin(), lengths.end());
  return lengths;
}

LossUnits units_at(const RowResult& row, int64_t length) {
  const LengthResult* r = at_length(row, length);
  if (!r || r->windows.empty()) return {};
  return loss_units(r->windows, length - 1);
}

const RowResult* main_row(const CorpusResults& c, const std::string& label, int64_t factor) {
  for (const auto& row : c.rows)
    if (row.label == label && row.factor == factor && compared_row(row) && !row.results.empty()) return &row;
  return nullptr;
}

const RowResult* row_at(const CorpusResults& c, const std::string& label, int64_t factor) {
  for (const auto& row : c.rows)
    if (row.label == label && row.factor == factor && !row.results.empty()) return &row;
  return nullptr;
}

std::vector<std::pair<std::string, std::vector<const RowResult*>>> budget_curves(const CorpusResults& c, int64_t factor) {
  std::vector<std::pair<std::string, std::vector<const RowResult*>>> curves;
  for (const auto& row : c.rows) {
    if (row.factor != factor || row.kind != "trained" || row.budget == 0 || !row.variant_of.empty() ||
        row.results.empty())
      continue;
    const std::string method = row.label.substr(0, row.label.find('@'));
    auto it = std::find_if(curves.begin(), curves.end(), [&](const auto& e) { return e.first == method; });
    if (it == curves.end()) {
      it = curves.insert(curves.end(), {method, {}});
      if (const RowResult* main = main_row(c, method, factor)) it->second.push_back(main);
    }
    it->second.push_back(&row);
  }
  for (auto& [method, rows] : curves)
    std::sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->train_tokens < b->train_tokens; });
  return curves;
}

std::vector<int64_t> curve_lengths(const CorpusResults& c, int64_t factor) {
  auto lengths = factor_lengths(c, factor);
  if (lengths.size() > 2) lengths.erase(lengths.begin(), lengths.end() - 2);
  return lengths;
}

std::vector<std::pair<std::string, std::string>> ring_pairs(const CorpusResults& c, int64_t factor) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& label : row_labels(c)) {
    if (label.rfind("chunk-ring-", 0) != 0) continue;
    const std::string uniform = "chunk-" + label.substr(11);
    if (row_at(c, label, factor) && row_at(c, uniform, factor)) pairs.emplace_back(uniform, label);
  }
  return pairs;
}

std::vector<double> position_losses(const LengthResult& r) {
  if (!r.position_loss.empty() || r.windows.empty()) return r.position_loss;
  const int64_t predictions = r.length - 1;
  std::vector<double> out(static_cast<size_t>(std::max<int64_t>(0, predictions)), 0.0);
  for (int64_t p = 0; p < predictions; ++p) {
    const auto b = static_cast<size_t>(p / kLossBlock);
    const double block_size = static_cast<double>(std::min(kLossBlock, predictions - p / kLossBlock * kLossBlock));
    double sum = 0;
    for (const auto& w : r.windows) sum += b < w.block_nll.size() ? w.block_nll[b] / block_size : NAN;
    out[static_cast<size_t>(p)] = sum / static_cast<double>(r.windows.size());
  }
  return out;
}

}  // namespace segtrain::trainer
