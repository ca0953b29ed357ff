#pragma once
// results.md's tables and their cells: perplexity by factor (Karypis et al.'s Tables 3-5) and
// by length with 95% intervals, prompt tasks' accuracies, and paired differences between
// rows with what they find. The sections (report_sections.cpp) put them in order.
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "trainer/experiment/intervals.h"
#include "trainer/experiment/report.h"

namespace segtrain::trainer {

// A perplexity to 3 decimals (none from 1000 on); "-" when missing, "inf" when infinite.
std::string cell(double ppl);

// "2.116 [2.081, 2.153]", or the plain perplexity when the row kept no windows.
std::string ppl_cell(const RowResult& row, int64_t length);

// "1,048,576".
std::string thousands(int64_t n);

// A relative interval as signed percentages: "-3.1% [-4.0%, -2.2%]".
std::string percent_interval(const Interval& i);

// Every compared row's perplexity by factor: at each factor's L_e, or at L_t.
void table(std::ostringstream& md, const CorpusResults& c, bool at_extended_length);

// Every row of `factor` at the experiment's budget, at each length it was evaluated at
// (experiment.eval_lengths), with its 95% interval where the row kept its windows.
void length_table(std::ostringstream& md, const CorpusResults& c, int64_t factor);

// A prompt task's accuracy for every row of `factor` by prompt length: "correct/trials [lo, hi]".
void task_table(std::ostringstream& md, const CorpusResults& c, int64_t factor, const std::string& task);

// One comparison the text draws: row a against row b at each length (b may differ by length).
struct Comparison {
  std::string name;
  const RowResult* a = nullptr;
  std::map<int64_t, const RowResult*> b;
};

// With this many windows (documents) or fewer, a difference is found only where every window
// agrees on its direction: a percentile interval over so few documents is optimistic.
inline constexpr int64_t kUnanimousUpTo = 5;

// What a comparison finds at one length: the paired difference, on which side each window is,
// and, when found, the documents it rests on (documents_carrying: leaving any one of them out
// makes the interval include 0).
struct Finding {
  PairedDifference d;
  WindowAgreement windows;
  std::vector<int64_t> carried_by;
  bool agreed() const {
    return windows.windows > kUnanimousUpTo ||
           (d.difference.estimate < 0 ? windows.lower : windows.higher) == windows.windows;
  }
  bool found() const { return d.difference.excludes_zero() && agreed(); }
  // Found, but not without one of its documents: the text marks it and does not state it
  // as a finding.
  bool fragile() const { return found() && !carried_by.empty(); }
  // "; fragile: not found without document 0, 1 or 6", or "" when not fragile.
  std::string fragile_text() const;
  // "4 of 4 windows lower": the windows on the estimate's side.
  std::string windows_text() const {
    const bool lower = d.difference.estimate < 0;
    return std::to_string(lower ? windows.lower : windows.higher) + " of " + std::to_string(windows.windows) +
           " windows " + (lower ? "lower" : "higher");
  }
};

// The finding of a comparison at `length`, when both rows kept the same windows there.
std::optional<Finding> difference_at(const Comparison& cmp, int64_t length);

// A finding at `length` as the lists of what the intervals find write it: "8192 (+0.5% [+0.1%,
// +0.9%], 7 of 8 windows higher)", with its fragile_text inside the brackets.
std::string finding_text(const Finding& f, int64_t length, const std::string& against = "");

// What the bootstrap is and when a difference counts as found, before a table of paired differences.
std::string paired_method_text();

// The comparisons `all` as a table of paired differences at `lengths`, then what they find:
// a difference is written as found only where its interval excludes 0 (and the windows agree).
void difference_table(std::ostringstream& md, const std::vector<Comparison>& all, const std::vector<int64_t>& lengths);

}  // namespace segtrain::trainer
