// results.md's tables and their cells (experiment/report_tables.h).
#include "trainer/experiment/report_tables.h"

#include <algorithm>
#include <cmath>
#include <iomanip>

#include "common/strings.h"
#include "trainer/config/eval_tasks.h"
#include "trainer/experiment/report_rows.h"

namespace segtrain::trainer {
namespace {

std::string fixed(double v, int decimals, bool sign = false) {
  std::ostringstream out;
  if (sign) out << std::showpos;
  out << std::fixed << std::setprecision(decimals) << v;
  return out.str();
}

// Decimals that show a perplexity's interval: 3 below 10, fewer above.
int decimals_for(double ppl) { return ppl >= 100 ? 1 : ppl >= 10 ? 2 : 3; }

// A count of correct trials: whole, or to one decimal when a task gives part credit.
std::string cell_count(double correct) {
  return correct == std::floor(correct) ? std::to_string(static_cast<int64_t>(correct)) : fixed(correct, 1);
}

std::string task_title(const std::string& task) {
  const EvalTaskInfo* info = find_eval_task(task);
  return info ? info->title : task;
}

}  // namespace

std::string cell(double ppl) {
  if (std::isnan(ppl)) return "-";
  if (!std::isfinite(ppl)) return "inf";
  std::ostringstream out;
  out << std::fixed << std::setprecision(ppl >= 1000 ? 0 : 3) << ppl;
  return out.str();
}

std::string ppl_cell(const RowResult& row, int64_t length) {
  const LengthResult* r = at_length(row, length);
  if (!r) return "-";
  const LossUnits units = units_at(row, length);
  if (units.nll.empty() || !std::isfinite(r->ppl)) return cell(r->ppl);
  const Interval i = perplexity_interval(units);
  const int d = decimals_for(i.estimate);
  return fixed(i.estimate, d) + " [" + fixed(i.lo, d) + ", " + fixed(i.hi, d) + "]";
}

std::string thousands(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ",";
    out += digits[i];
  }
  return out;
}

std::string percent_interval(const Interval& i) {
  return fixed(100 * i.estimate, 1, true) + "% [" + fixed(100 * i.lo, 1, true) + "%, " + fixed(100 * i.hi, 1, true) + "%]";
}

void table(std::ostringstream& md, const CorpusResults& c, bool at_extended_length) {
  md << "| method |";
  for (int64_t f : c.factors)
    md << " " << (at_extended_length ? std::to_string(f) + "·L_t = " + std::to_string(f * c.train_length)
                                     : "extended to " + std::to_string(f) + "·L_t")
       << " |";
  md << "\n|---|";
  for (size_t i = 0; i < c.factors.size(); ++i) md << "---:|";
  md << "\n";
  for (const auto& label : row_labels(c)) {
    md << "| " << label << " |";
    for (int64_t f : c.factors) md << " " << cell(ppl_at(c, label, f, at_extended_length ? f * c.train_length : c.train_length)) << " |";
    md << "\n";
  }
}

void length_table(std::ostringstream& md, const CorpusResults& c, int64_t factor) {
  const auto lengths = factor_lengths(c, factor);
  md << "| method |";
  for (int64_t l : lengths) md << " " << l << " |";
  md << "\n|---|";
  for (size_t i = 0; i < lengths.size(); ++i) md << "---:|";
  md << "\n";
  for (const auto& row : c.rows) {
    if (row.factor != factor || !compared_row(row)) continue;
    md << "| " << row.label << " |";
    for (int64_t l : lengths) md << " " << ppl_cell(row, l) << " |";
    md << "\n";
  }
}

void task_table(std::ostringstream& md, const CorpusResults& c, int64_t factor, const std::string& task) {
  std::vector<int64_t> lengths;
  for (const auto& row : c.rows)
    if (row.factor == factor && row.tasks.count(task))
      for (const auto& p : row.tasks.at(task).scores)
        if (std::find(lengths.begin(), lengths.end(), p.length) == lengths.end()) lengths.push_back(p.length);
  if (lengths.empty()) return;
  std::sort(lengths.begin(), lengths.end());
  md << "\n" << task_title(task) << ", correct of trials by prompt length with Wilson's 95% interval of the accuracy "
     << "(every row of " << factor << "·L_t; the same prompts for every row):\n\n| method |";
  for (int64_t l : lengths) md << " " << l << " |";
  md << "\n|---|";
  for (size_t i = 0; i < lengths.size(); ++i) md << "---:|";
  md << "\n";
  for (const auto& row : c.rows) {
    if (row.factor != factor || !row.tasks.count(task)) continue;
    const auto& scores = row.tasks.at(task).scores;
    md << "| " << row.label << " |";
    for (int64_t l : lengths) {
      auto it = std::find_if(scores.begin(), scores.end(), [&](const auto& p) { return p.length == l; });
      if (it == scores.end()) {
        md << " - |";
        continue;
      }
      const Interval w = wilson_interval(it->correct, it->trials);
      md << " " << cell_count(it->correct) << "/" << it->trials << " [" << fixed(w.lo, 2) << ", " << fixed(w.hi, 2)
         << "] |";
    }
    md << "\n";
  }
}

std::optional<Finding> difference_at(const Comparison& cmp, int64_t length) {
  const auto it = cmp.b.find(length);
  if (it == cmp.b.end() || !it->second) return std::nullopt;
  const LossUnits a = units_at(*cmp.a, length), b = units_at(*it->second, length);
  if (a.nll.empty() || b.nll.empty() || a.where != b.where) return std::nullopt;
  Finding f{paired_difference(a, b), window_agreement(a, b), {}};
  if (f.found()) f.carried_by = documents_carrying(a, b);
  return f;
}

std::string Finding::fragile_text() const {
  if (!fragile()) return "";
  std::vector<std::string> docs;
  for (const int64_t doc : carried_by) docs.push_back(std::to_string(doc));
  std::string listed = docs.back();
  if (docs.size() > 1) {
    docs.pop_back();
    listed = join(docs, ", ") + " or " + listed;
  }
  return std::string("; fragile: not found without document") + (carried_by.size() > 1 ? "s " : " ") + listed;
}

std::string finding_text(const Finding& f, int64_t length, const std::string& against) {
  return std::to_string(length) + " (" + percent_interval(f.d.relative) + ", " + f.windows_text() +
         (against.empty() ? "" : ", vs " + against) + f.fragile_text() + ")";
}

std::string paired_method_text() {
  std::ostringstream md;
  md << "Intervals: a paired two-stage bootstrap of " << kBootstrapResamples
     << " resamples, the windows drawn with replacement, then blocks of L/" << kUnitsPerWindow
     << " contiguous positions within each drawn window (the same blocks for both rows), percentile intervals. "
     << "**bold**: found, the interval excludes 0 and, with " << kUnanimousUpTo
     << " windows or fewer, every window agrees; *fragile*: found, but leaving one document out (its window) "
     << "makes the interval include 0, so the finding rests on that document.";
  return md.str();
}

void difference_table(std::ostringstream& md, const std::vector<Comparison>& all, const std::vector<int64_t>& lengths) {
  md << "| A vs B |";
  for (int64_t l : lengths) md << " " << l << " |";
  md << "\n|---|";
  for (size_t i = 0; i < lengths.size(); ++i) md << "---:|";
  md << "\n";
  std::vector<std::string> found;
  for (const auto& cmp : all) {
    md << "| " << cmp.name << " |";
    std::vector<std::string> lower, higher, none;
    for (int64_t l : lengths) {
      const auto d = difference_at(cmp, l);
      if (!d) {
        md << " - |";
        continue;
      }
      const PairedDifference& pd = d->d;
      const int decimals = decimals_for(std::abs(pd.difference.estimate) + 1);
      const bool sure = d->found();
      const std::string text = fixed(pd.difference.estimate, decimals, true) + " [" +
                               fixed(pd.difference.lo, decimals, true) + ", " + fixed(pd.difference.hi, decimals, true) +
                               "] (" + fixed(100 * pd.relative.estimate, 1, true) + "%; " + d->windows_text() + ")";
      const std::string b_name = cmp.b.at(l)->label;
      const bool versus = cmp.name.find("best untrained") != std::string::npos;
      md << " " << (sure ? "**" + text + "**" : text) << (d->fragile() ? " *fragile*" : "")
         << (versus ? " vs " + b_name : "") << " |";
      const std::string at = finding_text(*d, l, versus ? b_name : "");
      (!sure ? none : pd.difference.estimate < 0 ? lower : higher).push_back(at);
    }
    md << "\n";
    std::ostringstream line;
    line << "- " << cmp.name << ": ";
    std::vector<std::string> parts;
    if (!lower.empty()) parts.push_back("lower perplexity at " + join(lower, ", "));
    if (!higher.empty()) parts.push_back("higher perplexity at " + join(higher, ", "));
    if (!none.empty()) {
      std::vector<std::string> at;
      for (const auto& n : none) at.push_back(n.substr(0, n.find(' ')));
      parts.push_back("no difference found at " + join(at, ", "));
    }
    if (parts.empty()) continue;
    line << join(parts, "; ") << ".\n";
    found.push_back(line.str());
  }
  md << "\nWhat the intervals find (A against B; a difference is stated only where it is found: its interval "
        "excludes 0 and, with " << kUnanimousUpTo << " windows or fewer, every window agrees; marked fragile where "
        "it is not found without one of its documents):\n\n";
  for (const auto& f : found) md << f;
  md << "\n";
}

}  // namespace segtrain::trainer
