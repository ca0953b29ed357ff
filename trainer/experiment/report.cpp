#include "trainer/experiment/report.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <algorithm>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/strings.h"
#include "trainer/config/eval_tasks.h"
#include "trainer/eval/eval_outputs.h"
#include "trainer/eval/plot.h"
#include "trainer/experiment/intervals.h"

namespace segtrain::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json number_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

// A block's summed loss to 1e-6 nats: the record stays small, the perplexity unchanged.
json rounded(double x) { return number_or_null(std::round(x * 1e6) / 1e6); }

json row_json(const RowResult& row) {
  json results = json::array();
  for (const auto& r : row.results) {
    json windows = json::array();
    for (const auto& w : r.windows) {
      json blocks = json::array();
      for (double v : w.block_nll) blocks.push_back(rounded(v));
      windows.push_back({{"doc", w.doc}, {"start", w.start}, {"block_nll", blocks}});
    }
    json result = {{"length", r.length},
                   {"loss", number_or_null(r.loss)},
                   {"ppl", number_or_null(r.ppl)},
                   {"sequences", r.sequences},
                   {"tokens", r.tokens}};
    if (!windows.empty()) result["windows"] = windows;
    results.push_back(result);
  }
  json out = {{"key", row.key},       {"label", row.label},   {"kind", row.kind},
              {"factor", row.factor}, {"lengths", row.lengths}, {"model", row.model},
              {"train_tokens", row.train_tokens}, {"train_seconds", row.train_seconds},
              {"eval_seconds", row.eval_seconds}, {"results", results}};
  if (row.budget) out["budget"] = row.budget;
  if (!row.variant_of.empty()) out["variant_of"] = row.variant_of;
  if (!row.imported_from.empty()) out["imported_from"] = row.imported_from;
  if (row.imported_windows) out["imported_windows"] = row.imported_windows;
  // The curve at the longest length is the one the plots show.
  if (!row.results.empty()) {
    json curve = json::array();
    for (double v : row.results.back().position_loss) curve.push_back(number_or_null(v));
    out["position_loss"] = curve;
  }
  out["evaluated_with"] = row.evaluated_with.empty() ? json(nullptr) : json::parse(row.evaluated_with);
  for (const auto& [name, task] : row.tasks)
    out["tasks"][name] = {{"by_length", task_scores_json(task.scores)}, {"with", json::parse(task.with)},
                          {"seconds", task.seconds}};
  return out;
}

// The row evaluated at `length`, or nullptr.
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

std::string cell(double ppl) {
  if (std::isnan(ppl)) return "-";
  if (!std::isfinite(ppl)) return "inf";
  std::ostringstream out;
  out << std::fixed << std::setprecision(ppl >= 1000 ? 0 : 3) << ppl;
  return out.str();
}

// A row the main tables compare: at the experiment's budget and no variant (the budget
// curve and the variants have tables of their own).
bool compared_row(const RowResult& row) { return row.budget == 0 && row.variant_of.empty(); }

// Labels of the rows the main tables compare.
std::vector<std::string> row_labels(const CorpusResults& c) {
  std::vector<std::string> labels;
  for (const auto& row : c.rows)
    if (compared_row(row) && std::find(labels.begin(), labels.end(), row.label) == labels.end()) labels.push_back(row.label);
  return labels;
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

// The lengths the rows of `factor` were evaluated at, ascending.
std::vector<int64_t> factor_lengths(const CorpusResults& c, int64_t factor) {
  std::vector<int64_t> lengths;
  for (const auto& row : c.rows)
    if (row.factor == factor)
      for (int64_t l : row.lengths)
        if (std::find(lengths.begin(), lengths.end(), l) == lengths.end()) lengths.push_back(l);
  std::sort(lengths.begin(), lengths.end());
  return lengths;
}

// The loss units of `row` at `length` (empty when it kept no windows there).
LossUnits units_at(const RowResult& row, int64_t length) {
  const LengthResult* r = at_length(row, length);
  if (!r || r->windows.empty()) return {};
  return loss_units(r->windows, length - 1);
}

std::string fixed(double v, int decimals, bool sign = false) {
  std::ostringstream out;
  if (sign) out << std::showpos;
  out << std::fixed << std::setprecision(decimals) << v;
  return out.str();
}

// Decimals that show a perplexity's interval: 3 below 10, fewer above.
int decimals_for(double ppl) { return ppl >= 100 ? 1 : ppl >= 10 ? 2 : 3; }

// "2.116 [2.081, 2.153]", or the plain perplexity when the row kept no windows.
std::string ppl_cell(const RowResult& row, int64_t length) {
  const LengthResult* r = at_length(row, length);
  if (!r) return "-";
  const LossUnits units = units_at(row, length);
  if (units.nll.empty() || !std::isfinite(r->ppl)) return cell(r->ppl);
  const Interval i = perplexity_interval(units);
  const int d = decimals_for(i.estimate);
  return fixed(i.estimate, d) + " [" + fixed(i.lo, d) + ", " + fixed(i.hi, d) + "]";
}

// Every row of `factor` at the experiment's budget, at each length it was evaluated at
// (experiment.eval_lengths), with its 95% interval where the row kept its windows.
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

// A count of correct trials: whole, or to one decimal when a task gives part credit.
std::string cell_count(double correct) {
  return correct == std::floor(correct) ? std::to_string(static_cast<int64_t>(correct)) : fixed(correct, 1);
}

std::string task_title(const std::string& task) {
  const EvalTaskInfo* info = find_eval_task(task);
  return info ? info->title : task;
}

// A prompt task's accuracy for every row of `factor` by prompt length: "correct/trials [lo, hi]".
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

std::string duration(double seconds) {
  std::ostringstream out;
  const auto s = static_cast<int64_t>(seconds);
  out << s / 3600 << " h " << std::setw(2) << std::setfill('0') << (s % 3600) / 60 << " min";
  return out.str();
}

// "42 s", "5 min 20 s", "1 h 02 min": a row's cost.
std::string short_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(seconds));
  std::ostringstream out;
  if (s < 60) out << s << " s";
  else if (s < 3600) out << s / 60 << " min " << s % 60 << " s";
  else out << s / 3600 << " h " << std::setw(2) << std::setfill('0') << (s % 3600) / 60 << " min";
  return out.str();
}

// What each row cost on this machine: its training (summed over resumes) and each
// of its evaluation tasks, as they ran; the sum is the corpus's compute, without
// the grid's pauses and restarts (the wall time above has them).
void cost_section(std::ostringstream& md, const CorpusResults& c) {
  std::vector<std::string> tasks;
  for (const auto& task : eval_task_catalog())
    if (task.writes_prompts)
      for (const auto& row : c.rows)
        if (row.tasks.count(task.name)) {
          tasks.push_back(task.name);
          break;
        }
  bool imported = !c.base.imported_from.empty();
  for (const auto& row : c.rows) imported = imported || !row.imported_from.empty();
  md << "\nWhat each row cost, wall time on this machine (training summed over resumes, from its "
     << "trainer_state.json; each evaluation as it ran; - : not recorded, by a segtrain from before it was"
     << (imported ? "; imported rows: as recorded where they ran" : "") << "):\n\n"
     << "| row | training | perplexity |";
  for (const auto& t : tasks) md << " " << t << " |";
  md << " total |\n|---|---:|---:|";
  for (size_t i = 0; i < tasks.size(); ++i) md << "---:|";
  md << "---:|\n";
  double sum = 0;
  int64_t unrecorded = 0;
  std::vector<const RowResult*> rows;
  if (!c.base.results.empty()) rows.push_back(&c.base);
  for (const auto& row : c.rows) rows.push_back(&row);
  for (const RowResult* row : rows) {
    double total = 0;
    auto cell = [&](const std::string& text) { md << " " << text << " |"; };
    auto seconds_cell = [&](double seconds) {
      if (seconds > 0) {
        cell(short_duration(seconds));
        total += seconds;
      } else {
        cell("-");
        ++unrecorded;
      }
    };
    md << "|";
    // A grid of several factors has a row of each label at each factor.
    cell(row->label + (c.factors.size() > 1 && row != &c.base ? " (" + std::to_string(row->factor) + "·L_t)" : ""));
    if (row->kind == "trained") seconds_cell(row->train_seconds);
    else cell("");
    seconds_cell(row->eval_seconds);
    for (const auto& t : tasks) {
      const auto it = row->tasks.find(t);
      if (it == row->tasks.end()) cell("");
      else seconds_cell(it->second.seconds);
    }
    cell(short_duration(total));
    md << "\n";
    sum += total;
  }
  md << "\nTogether: " << short_duration(sum);
  if (unrecorded) md << ", without the " << unrecorded << " figure" << (unrecorded > 1 ? "s" : "") << " marked -";
  md << ".\n\n";
}

std::string percent(double ratio) {
  std::ostringstream out;
  out << std::showpos << std::fixed << std::setprecision(1) << 100.0 * (ratio - 1.0) << "%";
  return out.str();
}

// The row labelled `label` at `factor` and the experiment's budget, with results; or nullptr.
const RowResult* main_row(const CorpusResults& c, const std::string& label, int64_t factor) {
  for (const auto& row : c.rows)
    if (row.label == label && row.factor == factor && compared_row(row) && !row.results.empty()) return &row;
  return nullptr;
}

// Seed 004's chunk row at `factor`: the first chunk-<alpha> at the experiment's budget.
const RowResult* chunk_row(const CorpusResults& c, int64_t factor) {
  for (const auto& row : c.rows)
    if (row.factor == factor && compared_row(row) && row.label.rfind("chunk-", 0) == 0 &&
        row.label.rfind("chunk-ring-", 0) != 0 && !row.results.empty())
      return &row;
  return nullptr;
}

// The untrained row with the lowest perplexity at `length` (the best a user gets without training).
const RowResult* best_untrained(const CorpusResults& c, int64_t factor, int64_t length) {
  const RowResult* best = nullptr;
  for (const auto& row : c.rows) {
    const LengthResult* r = row.factor == factor && row.kind == "ootb" ? at_length(row, length) : nullptr;
    if (r && std::isfinite(r->ppl) && (!best || r->ppl < at_length(*best, length)->ppl)) best = &row;
  }
  return best;
}

std::string percent_interval(const Interval& i) {
  return fixed(100 * i.estimate, 1, true) + "% [" + fixed(100 * i.lo, 1, true) + "%, " + fixed(100 * i.hi, 1, true) + "%]";
}

// One comparison the text draws: row a against row b at each length (b may differ by length).
struct Comparison {
  std::string name;
  const RowResult* a = nullptr;
  std::map<int64_t, const RowResult*> b;
};

std::vector<Comparison> comparisons(const CorpusResults& c, int64_t factor) {
  std::vector<Comparison> out;
  const auto lengths = factor_lengths(c, factor);
  auto same_b = [&](const RowResult* b) {
    std::map<int64_t, const RowResult*> m;
    for (int64_t l : lengths) m[l] = b;
    return m;
  };
  if (const RowResult* chunk = chunk_row(c, factor)) {
    // DA: the domain-adaptation row, DA at the base's positions or truncate at the rows' scaling.
    const RowResult* da = main_row(c, "DA", factor) ? main_row(c, "DA", factor) : main_row(c, "truncate", factor);
    for (const RowResult* other : {da, main_row(c, "full", factor), main_row(c, "pose", factor),
                                   main_row(c, "randompos", factor)})
      if (other) out.push_back({chunk->label + " vs " + other->label, chunk, same_b(other)});
  }
  for (const auto& row : c.rows) {
    if (row.factor != factor || row.kind != "trained" || !compared_row(row) || row.results.empty()) continue;
    Comparison cmp{row.label + " vs the best untrained row", &row, {}};
    for (int64_t l : lengths)
      if (const RowResult* best = best_untrained(c, factor, l)) cmp.b[l] = best;
    if (!cmp.b.empty()) out.push_back(cmp);
  }
  return out;
}

// With this many windows (documents) or fewer, a difference is found only where every window
// agrees on its direction: a percentile interval over so few documents is optimistic.
constexpr int64_t kUnanimousUpTo = 5;

// What a comparison finds at one length: the paired difference, and on which side each window is.
struct Finding {
  PairedDifference d;
  WindowAgreement windows;
  bool agreed() const {
    return windows.windows > kUnanimousUpTo ||
           (d.difference.estimate < 0 ? windows.lower : windows.higher) == windows.windows;
  }
  bool found() const { return d.difference.excludes_zero() && agreed(); }
  // "4 of 4 windows lower": the windows on the estimate's side.
  std::string windows_text() const {
    const bool lower = d.difference.estimate < 0;
    return std::to_string(lower ? windows.lower : windows.higher) + " of " + std::to_string(windows.windows) +
           " windows " + (lower ? "lower" : "higher");
  }
};

// The finding of a comparison at `length`, when both rows kept the same windows there.
std::optional<Finding> difference_at(const Comparison& cmp, int64_t length) {
  const auto it = cmp.b.find(length);
  if (it == cmp.b.end() || !it->second) return std::nullopt;
  const LossUnits a = units_at(*cmp.a, length), b = units_at(*it->second, length);
  if (a.nll.empty() || b.nll.empty() || a.where != b.where) return std::nullopt;
  return Finding{paired_difference(a, b), window_agreement(a, b)};
}

// What the bootstrap is and when a difference counts as found, before a table of paired differences.
std::string paired_method_text() {
  std::ostringstream md;
  md << "Intervals: a paired two-stage bootstrap of " << kBootstrapResamples
     << " resamples, the windows drawn with replacement, then blocks of L/" << kUnitsPerWindow
     << " contiguous positions within each drawn window (the same blocks for both rows), percentile intervals. "
     << "**bold**: found, the interval excludes 0 and, with " << kUnanimousUpTo
     << " windows or fewer, every window agrees.";
  return md.str();
}

// The comparisons `all` as a table of paired differences at `lengths`, then what they find:
// a difference is written as found only where its interval excludes 0 (and the windows agree).
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
      md << " " << (sure ? "**" + text + "**" : text)
         << (cmp.name.find("best untrained") != std::string::npos ? " vs " + b_name : "") << " |";
      const std::string at = std::to_string(l) + " (" + percent_interval(pd.relative) + ", " + d->windows_text() +
                             (cmp.name.find("best untrained") != std::string::npos ? ", vs " + b_name : "") + ")";
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
        "excludes 0 and, with " << kUnanimousUpTo << " windows or fewer, every window agrees):\n\n";
  for (const auto& f : found) md << f;
  md << "\n";
}

// The comparisons the text draws, as paired differences with their 95% intervals.
void comparison_section(std::ostringstream& md, const CorpusResults& c, int64_t factor) {
  const auto all = comparisons(c, factor);
  if (all.empty()) return;
  md << "\nPaired differences at " << factor << "·L_t = " << factor * c.train_length
     << ": ppl(A) - ppl(B) with its 95% interval, the same as a percentage of B, and in how many windows "
     << "(each from another document) A is on that side. " << paired_method_text() << "\n\n";
  difference_table(md, all, factor_lengths(c, factor));
}

// A trained method at more than one budget (methods[].budgets): its rows by budget.
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

std::string thousands(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ",";
    out += digits[i];
  }
  return out;
}

// The lengths a budget curve is read at: the two longest evaluated.
std::vector<int64_t> curve_lengths(const CorpusResults& c, int64_t factor) {
  auto lengths = factor_lengths(c, factor);
  if (lengths.size() > 2) lengths.erase(lengths.begin(), lengths.end() - 2);
  return lengths;
}

void budget_section(std::ostringstream& md, const CorpusResults& c, int64_t factor) {
  const auto curves = budget_curves(c, factor);
  if (curves.empty()) return;
  const auto lengths = curve_lengths(c, factor);
  md << "\nHow far training goes with the budget: perplexity [95% interval] of the methods trained at more than "
        "one budget, by training tokens (each budget its own run from the base, with its own schedule):\n\n"
     << "| method | training tokens |";
  for (int64_t l : lengths) md << " " << l << " |";
  md << "\n|---|---:|";
  for (size_t i = 0; i < lengths.size(); ++i) md << "---:|";
  md << "\n";
  for (const auto& [method, rows] : curves)
    for (const RowResult* row : rows) {
      md << "| " << method << " | " << thousands(row->train_tokens) << " |";
      for (int64_t l : lengths) md << " " << ppl_cell(*row, l) << " |";
      md << "\n";
    }
  // Each larger budget against the method's smallest, paired on the same windows as the comparisons above.
  std::vector<std::string> found;
  for (const auto& [method, rows] : curves)
    for (size_t i = 1; i < rows.size(); ++i) {
      Comparison cmp{method, rows[i], {}};
      for (int64_t l : lengths) cmp.b[l] = rows.front();
      std::vector<std::string> lower, higher, none;
      for (int64_t l : lengths)
        if (const auto d = difference_at(cmp, l)) {
          if (!d->found()) none.push_back(std::to_string(l));
          else (d->d.difference.estimate < 0 ? lower : higher).push_back(std::to_string(l) + " (" + percent_interval(d->d.relative) + ", " + d->windows_text() + ")");
        }
      std::vector<std::string> parts;
      if (!lower.empty()) parts.push_back("lower perplexity at " + join(lower, ", "));
      if (!higher.empty()) parts.push_back("higher perplexity at " + join(higher, ", "));
      if (!none.empty()) parts.push_back("no difference found at " + join(none, ", "));
      if (!parts.empty())
        found.push_back("- " + method + " at " + thousands(rows[i]->train_tokens) + " vs " +
                        thousands(rows.front()->train_tokens) + " tokens: " + join(parts, "; ") + ".\n");
    }
  if (found.empty()) return void(md << "\n");
  md << "\nWhat more budget changes (paired differences, as above; stated only where found):\n\n";
  for (const auto& f : found) md << f;
  md << "\n";  // the plots that follow are paragraphs of their own
}

// The rows of experiment.variants at `factor`, each beside the row it trains again with other
// settings, and each against that row as paired differences: what the variant's settings change.
void variant_section(std::ostringstream& md, const CorpusResults& c, int64_t factor) {
  std::vector<std::pair<const RowResult*, const RowResult*>> pairs;  // variant, its row
  for (const auto& row : c.rows) {
    if (row.factor != factor || row.variant_of.empty() || row.results.empty()) continue;
    const auto of = std::find_if(c.rows.begin(), c.rows.end(), [&](const RowResult& r) {
      return r.factor == factor && r.key == row.variant_of && !r.results.empty();
    });
    pairs.emplace_back(&row, of == c.rows.end() ? nullptr : &*of);
  }
  if (pairs.empty()) return;
  const auto lengths = factor_lengths(c, factor);
  md << "\nVariants (experiment.variants): each row trained again from the base on the same data and budget, with "
        "the variant's settings after its row's own, beside its row; perplexity [95% interval] at "
     << factor << "·L_t = " << factor * c.train_length << ":\n\n| row | training tokens |";
  for (int64_t l : lengths) md << " " << l << " |";
  md << "\n|---|---:|";
  for (size_t i = 0; i < lengths.size(); ++i) md << "---:|";
  md << "\n";
  std::vector<const RowResult*> listed;
  std::vector<Comparison> all;
  for (const auto& [variant, of] : pairs)
    for (const RowResult* row : {of, variant}) {
      if (!row || std::find(listed.begin(), listed.end(), row) != listed.end()) continue;
      listed.push_back(row);
      md << "| " << row->label << " | " << thousands(row->train_tokens) << " |";
      for (int64_t l : lengths) md << " " << ppl_cell(*row, l) << " |";
      md << "\n";
    }
  for (const auto& [variant, of] : pairs) {
    if (!of) continue;
    Comparison cmp{variant->label + " vs " + of->label, variant, {}};
    for (int64_t l : lengths) cmp.b[l] = of;
    all.push_back(cmp);
  }
  if (all.empty()) return void(md << "\n");
  md << "\nEach variant against its row: ppl(A) - ppl(B) [95% interval] (% of B; windows on that side). "
     << paired_method_text() << "\n\n";
  difference_table(md, all, lengths);
}

// Which rows this grid took as another invocation recorded them (--import-rows), and
// which of them it scored on more windows than recorded (more_windows.h).
std::string imported_sentence(const CorpusResults& c) {
  std::map<std::string, std::vector<std::string>> by_file, continued;
  std::map<std::string, int64_t> kept;  // windows taken from each file
  auto add = [&](const RowResult& row, const std::string& name) {
    if (row.imported_from.empty()) return;
    if (!row.imported_windows) return void(by_file[row.imported_from].push_back(name));
    continued[row.imported_from].push_back(name);
    kept[row.imported_from] = row.imported_windows;
  };
  add(c.base, c.base.label);
  for (const auto& row : c.rows) add(row, row.label + " (" + std::to_string(row.factor) + "·L_t)");
  std::ostringstream out;
  for (const auto& [file, labels] : by_file)
    out << "Imported from `" << file << "` (`--import-rows`: trained and evaluated by an earlier run of this "
        << "experiment, reported as recorded there): " << join(labels, ", ") << ".\n\n";
  for (const auto& [file, labels] : continued)
    out << "Scored on more windows than `" << file << "` records (`--import-rows` with a larger eval.max_sequences): "
        << join(labels, ", ") << ": the first " << kept.at(file) << " windows' losses as recorded there, the rest "
        << "scored here by the row's model rebuilt, which first gave the recorded loss of window 1 at the row's "
        << "shortest length within 1e-4; any other task's figures as recorded there.\n\n";
  return out.str();
}

// Which windows every row was scored on: "4 windows of 32768 tokens, each from another
// held-out document (documents 0, 1, 2, 3 of the split)".
std::string windows_sentence(const CorpusResults& c) {
  for (const auto& row : c.rows) {
    if (row.results.empty() || row.results.back().windows.empty()) continue;
    const auto& r = row.results.back();
    std::vector<std::string> docs;
    for (const auto& w : r.windows)
      if (std::find(docs.begin(), docs.end(), std::to_string(w.doc)) == docs.end()) docs.push_back(std::to_string(w.doc));
    std::ostringstream out;
    out << "Every row is scored on the same " << r.windows.size() << " window" << (r.windows.size() == 1 ? "" : "s")
        << " of " << r.length << " tokens"
        << (docs.size() == r.windows.size() && docs.size() > 1 ? ", each from another held-out document" : "")
        << " (document" << (docs.size() == 1 ? " " : "s ") << join(docs, ", ") << " of the "
        << "validation split); perplexity at a length L is over the first L tokens of each.\n\n";
    return out.str();
  }
  return "";
}

std::string budget_plot_name(const CorpusResults& c, int64_t factor) {
  return c.name + "-x" + std::to_string(factor) + "-budget.svg";
}

std::string plot_name(const CorpusResults& c, int64_t factor) {
  return c.name + "-x" + std::to_string(factor) + ".svg";
}

std::string ring_plot_name(const CorpusResults& c, int64_t factor) {
  return c.name + "-x" + std::to_string(factor) + "-ring.svg";
}

const RowResult* row_at(const CorpusResults& c, const std::string& label, int64_t factor) {
  for (const auto& row : c.rows)
    if (row.label == label && row.factor == factor && !row.results.empty()) return &row;
  return nullptr;
}

// Each chunk-ring-<a> row with its chunk-<a> row at `factor` (labels).
std::vector<std::pair<std::string, std::string>> ring_pairs(const CorpusResults& c, int64_t factor) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& label : row_labels(c)) {
    if (label.rfind("chunk-ring-", 0) != 0) continue;
    const std::string uniform = "chunk-" + label.substr(11);
    if (row_at(c, label, factor) && row_at(c, uniform, factor)) pairs.emplace_back(uniform, label);
  }
  return pairs;
}

// A row's per-position losses at its longest length. A row whose curve was not kept
// (imported from a published results.json) has each position at its block's mean over
// windows: bucket means over whole blocks are then the same as the kept curve's.
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

// Mean of the finite per-position losses at L_e over positions [first, last) of
// the curve (index p - 1 holds position p).
double mean_loss(const std::vector<double>& curve, size_t first, size_t last) {
  double sum = 0;
  size_t n = 0;
  for (size_t i = first; i < std::min(last, curve.size()); ++i)
    if (std::isfinite(curve[i])) sum += curve[i], ++n;
  return n ? sum / static_cast<double>(n) : std::nan("");
}

std::string loss_cell(double loss) {
  if (std::isnan(loss)) return "-";
  std::ostringstream out;
  out << std::fixed << std::setprecision(4) << loss;
  return out.str();
}

// Ring placement against the paper's uniform placement (data.sampler.placement):
// perplexity at L_e and the per-position loss at the window's two ends, where
// uniform placement trains least.
void ring_section(std::ostringstream& md, const CorpusResults& c) {
  bool any = false;
  for (int64_t f : c.factors) any = any || !ring_pairs(c, f).empty();
  if (!any) return;
  md << "Ring placement against uniform placement (`data.sampler.placement`): uniform covers offsets near 0 and "
        "L_e - 1 far less often than the middle, ring covers every offset equally. Mean loss per token (nats) at "
        "L_e over the first and last 10% of the positions, and over all of them:\n\n"
     << "| L_e | method | ppl at L_e | first 10% | last 10% | all positions |\n|---|---|---:|---:|---:|---:|\n";
  std::vector<std::string> lines;
  for (int64_t f : c.factors) {
    const int64_t le = f * c.train_length;
    for (const auto& [uniform, ring] : ring_pairs(c, f)) {
      struct Figures { double ppl, first, last, all; };
      auto figures = [&](const std::string& label) {
        const RowResult* row = row_at(c, label, f);
        const auto curve = position_losses(row->results.back());
        const size_t n = curve.size(), tenth = std::max<size_t>(1, (n + 5) / 10);
        return Figures{ppl_at(c, label, f, le), mean_loss(curve, 0, tenth), mean_loss(curve, n - std::min(n, tenth), n),
                       mean_loss(curve, 0, n)};
      };
      const Figures u = figures(uniform), r = figures(ring);
      for (const auto& [label, x] : {std::pair{uniform, u}, std::pair{ring, r}})
        md << "| " << f << "·L_t = " << le << " | " << label << " | " << cell(x.ppl) << " | " << loss_cell(x.first)
           << " | " << loss_cell(x.last) << " | " << loss_cell(x.all) << " |\n";
      auto signed_nats = [](double d) {
        std::ostringstream o;
        o << std::showpos << std::fixed << std::setprecision(4) << d;
        return o.str();
      };
      std::ostringstream line;
      line << "- at " << f << "·L_t = " << le << ": " << ring << " " << (r.ppl < u.ppl ? "beats" : "does NOT beat") << " "
           << uniform << " at L_e (" << cell(r.ppl) << " vs " << cell(u.ppl) << ", " << percent(r.ppl / u.ppl)
           << "); over the last 10% of positions its loss is " << signed_nats(r.last - u.last) << " nats per token ("
           << (r.last < u.last ? "better" : "not better") << "), over the first 10% " << signed_nats(r.first - u.first)
           << ".\n";
      lines.push_back(line.str());
    }
  }
  md << "\n";
  for (const auto& l : lines) md << l;
  md << "\n";
}

// The spread over windows of a per-position curve in buckets of `bucket` predictions
// (a multiple of kLossBlock): each window's mean loss in the bucket, lowest and highest,
// at the bucket's mean position (as bucketed() places its means). Empty without windows.
std::vector<std::tuple<double, double, double>> window_band(const LengthResult& r, int64_t bucket) {
  std::vector<std::tuple<double, double, double>> band;
  if (r.windows.size() < 2 || bucket % kLossBlock != 0) return band;
  const int64_t predictions = r.length - 1, per_bucket = bucket / kLossBlock;
  for (int64_t first = 0; first < predictions; first += bucket) {
    const int64_t last = std::min(predictions, first + bucket);
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& w : r.windows) {
      double sum = 0;
      for (int64_t b = first / kLossBlock; b < first / kLossBlock + per_bucket && b < static_cast<int64_t>(w.block_nll.size()); ++b)
        sum += w.block_nll[b];
      const double mean = sum / static_cast<double>(last - first);
      lo = std::min(lo, mean), hi = std::max(hi, mean);
    }
    band.emplace_back(static_cast<double>(first + last + 1) / 2.0, lo, hi);
  }
  return band;
}

// The mean curve of a row whose per-position losses were not kept (imported): its
// blocks' means (position_losses), without the faint per-position line. The same as
// the kept curve's where a bucket holds whole blocks (L_e a multiple of 4,096).
PlotSeries block_curve(const std::string& label, const LengthResult& r, int64_t bucket) {
  const std::vector<double> curve = position_losses(r);
  const auto size = static_cast<size_t>(std::max<int64_t>(1, bucket));
  return bucketed(label, curve, static_cast<int>((curve.size() + size - 1) / size));
}

// A row's mean curve at its longest length: the kept per-position curve, or its blocks'.
PlotSeries row_curve(const std::string& label, const LengthResult& r, int64_t bucket) {
  return r.position_loss.empty() ? block_curve(label, r, bucket) : position_curve(label, r.position_loss, bucket);
}

// Perplexity by training budget: one line per method and length, its 95% interval as a
// band; x is log2 of the budget over the smallest (equal steps for 4x budgets), marked.
std::string budget_plot(const ExperimentConfig& x, const CorpusResults& c, int64_t factor) {
  const auto curves = budget_curves(c, factor);
  int64_t smallest = INT64_MAX;
  for (const auto& [method, rows] : curves)
    for (const RowResult* row : rows) smallest = std::min(smallest, row->train_tokens);
  auto at = [&](int64_t tokens) { return 1.0 + std::log2(static_cast<double>(tokens) / static_cast<double>(smallest)); };
  PlotOptions options;
  options.title = x.name + " / " + c.name + ": perplexity by training budget";
  options.x_label = "training tokens (log scale)";
  options.y_label = "perplexity";
  options.band_note = "band: 95% interval";
  std::vector<PlotSeries> series;
  std::vector<int64_t> budgets;
  for (const auto& [method, rows] : curves)
    for (int64_t l : curve_lengths(c, factor)) {
      PlotSeries s{method + " at " + std::to_string(l), {}, {}, {}};
      for (const RowResult* row : rows) {
        const LossUnits units = units_at(*row, l);
        if (units.nll.empty()) continue;
        const Interval i = perplexity_interval(units);
        s.points.emplace_back(at(row->train_tokens), i.estimate);
        s.band.emplace_back(at(row->train_tokens), i.lo, i.hi);
        if (std::find(budgets.begin(), budgets.end(), row->train_tokens) == budgets.end())
          budgets.push_back(row->train_tokens);
      }
      series.push_back(std::move(s));
    }
  for (int64_t b : budgets) options.markers.push_back({at(b), thousands(b)});
  return line_plot_svg(options, series);
}

}  // namespace

std::string row_to_json(const RowResult& row) { return row_json(row).dump(2) + "\n"; }

RowResult row_from_json(const std::string& text, const std::string& source) {
  try {
    const json j = json::parse(text);
    RowResult row;
    row.key = j.at("key");
    row.label = j.at("label");
    row.kind = j.at("kind");
    row.factor = j.at("factor");
    row.lengths = j.at("lengths").get<std::vector<int64_t>>();
    row.model = j.at("model");
    row.train_tokens = j.at("train_tokens");
    row.budget = j.value("budget", int64_t{0});
    row.variant_of = j.value("variant_of", std::string());
    row.train_seconds = j.value("train_seconds", 0.0);
    row.eval_seconds = j.value("eval_seconds", 0.0);
    row.imported_from = j.value("imported_from", std::string());
    row.imported_windows = j.value("imported_windows", int64_t{0});
    auto scores = [](const json& list) {
      std::vector<TaskScore> out;
      for (const auto& p : list) {
        TaskScore score{p.at("length").get<int64_t>(), p.at("trials").get<int64_t>(), p.at("correct").get<double>(), "", {}};
        if (p.contains("first"))
          score.first_output = p.at("first").at("output"),
          score.first_answers = p.at("first").at("answers").get<std::vector<std::string>>();
        out.push_back(score);
      }
      return out;
    };
    if (j.contains("tasks"))
      for (const auto& [name, task] : j.at("tasks").items())
        row.tasks[name] = {scores(task.at("by_length")), task.at("with").dump(), task.value("seconds", 0.0)};
    // A record from before eval.tasks: its passkey figures are the passkey task's.
    if (j.contains("passkey_with") && !j.at("passkey_with").is_null())
      row.tasks["passkey"] = {scores(j.at("passkey")), j.at("passkey_with").dump(), j.value("passkey_seconds", 0.0)};
    row.evaluated_with = j.at("evaluated_with").is_null() ? "" : j.at("evaluated_with").dump();
    for (const auto& r : j.at("results")) {
      LengthResult l;
      l.length = r.at("length");
      // null is what evaluate()'s NaN (no window of that length) was written as.
      l.loss = r.at("loss").is_null() ? NAN : r.at("loss").get<double>();
      l.ppl = r.at("ppl").is_null() ? NAN : r.at("ppl").get<double>();
      l.sequences = r.at("sequences");
      l.tokens = r.at("tokens");
      if (r.contains("windows"))
        for (const auto& w : r.at("windows")) {
          WindowLoss window{w.at("doc").get<int64_t>(), w.at("start").get<int64_t>(), {}};
          for (const auto& v : w.at("block_nll")) window.block_nll.push_back(v.is_null() ? NAN : v.get<double>());
          l.windows.push_back(std::move(window));
        }
      row.results.push_back(l);
    }
    if (!row.results.empty() && j.contains("position_loss"))
      for (const auto& v : j.at("position_loss"))
        row.results.back().position_loss.push_back(v.is_null() ? NAN : v.get<double>());
    return row;
  } catch (const json::exception& e) {
    // A damaged record is not trusted; the caller evaluates the row again.
    RowResult stale;
    stale.evaluated_with = std::string("unreadable: ") + source + ": " + e.what();
    return stale;
  }
}

std::string results_markdown(const ExperimentConfig& x, const std::vector<CorpusResults>& corpora,
                             const GridTime& time) {
  std::ostringstream md;
  md << "# Experiment " << x.name << "\n\n"
     << "Made by `segtrain experiment " << x.file << "`. Perplexities (lower is better) are on the same "
     << "non-overlapping windows of each corpus's validation split (seed 004, 4.5). OOTB rows are the base model "
     << "with no training and the named extension method; every trained row starts from the base and sees the same "
     << "number of training tokens (seed 004, eq. 2), but the budget curve's rows (<method>@<tokens>). DA is more truncate training at L_t, evaluated like OOTB.\n\n";
  if (time.invocations > 0)
    md << "Wall time of the grid so far: " << duration(time.seconds) << " ("
       << (time.invocations == 1 ? std::string("one run") : std::to_string(time.invocations) + " runs, each resuming the last")
       << " of `segtrain experiment`).\n\n";
  for (const auto& c : corpora) {
    md << "## " << c.name << " (" << c.arch << ", L_t = " << c.train_length << ")\n\n";
    if (!c.base.results.empty())
      md << "The base model at L_t = " << c.train_length << ": perplexity " << cell(c.base.results.front().ppl)
         << ".\n\n";
    md << windows_sentence(c) << imported_sentence(c);
    if (x.eval_lengths.empty()) {  // else the table by length below holds L_t and L_e, with intervals
      md << "Perplexity at L_e, for models extended to L_e:\n\n";
      table(md, c, true);
      md << "\nPerplexity at L_t = " << c.train_length << " of the same models (what extending costs on short inputs):\n\n";
      table(md, c, false);
    }
    if (!x.eval_lengths.empty())
      for (int64_t f : c.factors) {
        md << "\nPerplexity by length [95% interval], every row of " << f << "·L_t = " << f * c.train_length
           << (x.eval_from_longest ? " (each length on the first L tokens of the same longest windows; rows whose "
                                     "positions depend on the input's length scored on windows of each length)"
                                   : "")
           << ":\n\n";
        length_table(md, c, f);
      }
    for (const auto& task : eval_task_catalog())
      if (task.writes_prompts)
        for (int64_t f : c.factors) task_table(md, c, f, task.name);
    std::vector<std::string> tokens;
    for (int64_t f : c.factors)
      for (const auto& row : c.rows)
        if (row.factor == f && row.kind == "trained" && compared_row(row)) {
          tokens.push_back(thousands(row.train_tokens) + " at " + std::to_string(f) + "·L_t");
          break;
        }
    if (!tokens.empty()) md << "\nTraining tokens per trained row (budget-curve rows aside): " << join(tokens, "; ") << ".\n\n";
    for (int64_t f : c.factors) {
      comparison_section(md, c, f);
      budget_section(md, c, f);
      variant_section(md, c, f);
    }
    ring_section(md, c);
    cost_section(md, c);
    for (int64_t f : c.factors) {
      md << "![loss by position at " << f << "·L_t](plots/" << plot_name(c, f) << ")\n";
      if (!budget_curves(c, f).empty())
        md << "![perplexity by training budget at " << f << "·L_t](plots/" << budget_plot_name(c, f) << ")\n";
      if (!ring_pairs(c, f).empty())
        md << "![chunk vs chunk-ring: loss by position at " << f << "·L_t](plots/" << ring_plot_name(c, f) << ")\n";
    }
    md << "\n";
  }
  return md.str();
}

namespace {

// Each length a row reports is one of its lengths, and each window holds a loss for
// every block of kLossBlock predictions: what the intervals and plots read.
void check_windows(const RowResult& row, const std::string& where) {
  for (const auto& r : row.results) {
    if (std::find(row.lengths.begin(), row.lengths.end(), r.length) == row.lengths.end())
      throw InputError(where + ": row '" + row.label + "' reports length " + std::to_string(r.length) +
                       ", not one of its lengths");
    const auto blocks = static_cast<size_t>((r.length - 1 + kLossBlock - 1) / kLossBlock);
    for (const auto& w : r.windows)
      if (w.block_nll.size() != blocks)
        throw InputError(where + ": row '" + row.label + "' at length " + std::to_string(r.length) + ": a window with " +
                         std::to_string(w.block_nll.size()) + " block losses, expected " + std::to_string(blocks));
  }
}

}  // namespace

RecordedGrid read_results(const std::string& file) {
  std::string text;
  try {
    text = read_file(file, "results.json");
  } catch (const InputError& e) {
    throw InputError(file + ": " + e.what());
  }
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(file + ": not JSON (" + std::string(e.what()) + "); expected an experiment's results.json");
  }
  if (!j.is_object() || !j.contains("corpora") || !j.contains("experiment"))
    throw InputError(file + ": expected an experiment's results.json (with \"experiment\" and \"corpora\")");
  try {
    RecordedGrid grid;
    grid.experiment = j.at("experiment");
    for (const auto& c : j.at("corpora")) {
      CorpusResults corpus;
      corpus.name = c.at("name");
      corpus.arch = c.at("arch");
      corpus.store = c.at("store");
      corpus.train_length = c.at("train_length");
      corpus.factors = c.at("factors").get<std::vector<int64_t>>();
      // row_from_json gives a row without a key, and why in evaluated_with, for one it cannot read; the
      // windows must hold what the intervals and plots read.
      auto read_row = [&](const json& r) {
        RowResult row = row_from_json(r.dump(), file);
        if (row.key.empty())
          throw InputError(file + ": corpus '" + corpus.name + "': an unreadable row: " + row.evaluated_with);
        check_windows(row, file);
        return row;
      };
      corpus.base = read_row(c.at("base"));
      for (const auto& row : c.at("rows")) corpus.rows.push_back(read_row(row));
      grid.corpora.push_back(std::move(corpus));
    }
    grid.time = {j.value("wall_seconds", 0.0), j.value("invocations", int64_t{0})};
    return grid;
  } catch (const json::exception& e) {
    throw InputError(file + ": " + std::string(e.what()) + "; expected an experiment's results.json");
  }
}

void write_reports(const ExperimentConfig& x, const std::vector<CorpusResults>& corpora, const GridTime& time) {
  const fs::path out = x.output_dir;
  json all = {{"experiment", x.name}, {"file", x.file}, {"corpora", json::array()}};
  for (const auto& c : corpora) {
    json rows = json::array();
    for (const auto& row : c.rows) rows.push_back(row_json(row));
    all["corpora"].push_back({{"name", c.name},
                              {"arch", c.arch},
                              {"store", c.store},
                              {"train_length", c.train_length},
                              {"factors", c.factors},
                              {"base", row_json(c.base)},
                              {"rows", rows}});
    fs::create_directories(out / "plots");
    for (int64_t f : c.factors) {
      PlotOptions options;
      options.title = x.name + " / " + c.name + ": mean loss by position at L_e = " + std::to_string(f * c.train_length);
      options.x_label = "position (tokens of context before the predicted token)";
      options.markers.push_back({static_cast<double>(c.train_length), "L_t = " + std::to_string(c.train_length)});
      const int64_t bucket = position_bucket(f * c.train_length);
      options.solid_note = "solid: mean of " + std::to_string(bucket) + " positions";
      options.band_note = "band: lowest to highest window";
      std::vector<PlotSeries> series;
      for (const auto& row : c.rows)
        if (row.factor == f && compared_row(row) && !row.results.empty()) {
          series.push_back(row_curve(row.label, row.results.back(), bucket));
          series.back().band = window_band(row.results.back(), bucket);
        }
      write_file_atomic(out / "plots" / plot_name(c, f), line_plot_svg(options, series));
      if (!budget_curves(c, f).empty())
        write_file_atomic(out / "plots" / budget_plot_name(c, f), budget_plot(x, c, f));
      const auto pairs = ring_pairs(c, f);
      if (pairs.empty()) continue;
      series.clear();
      for (const auto& [uniform, ring] : pairs)
        for (const auto& label : {uniform, ring})
          series.push_back(row_curve(label, row_at(c, label, f)->results.back(), bucket));
      options.title = x.name + " / " + c.name + ": chunk vs chunk-ring, loss by position at L_e = " +
                      std::to_string(f * c.train_length);
      write_file_atomic(out / "plots" / ring_plot_name(c, f), line_plot_svg(options, series));
    }
  }
  all["wall_seconds"] = time.seconds;
  all["invocations"] = time.invocations;
  write_file_atomic(out / "results.json", all.dump(2) + "\n");
  write_file_atomic(out / "results.md", results_markdown(x, corpora, time));
}

}  // namespace segtrain::trainer
