// results.md: an experiment's tables in the order the text reads them, corpus by corpus,
// with the sentences around them (which windows, which rows were imported), the paired
// comparisons the text draws, the budget curves, the variants, ring placement against
// uniform placement, what each row cost, and the links to the plots.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "common/strings.h"
#include "data/sampler_kind.h"
#include "trainer/config/eval_tasks.h"
#include "trainer/experiment/report.h"
#include "trainer/experiment/report_plots.h"
#include "trainer/experiment/report_rows.h"
#include "trainer/experiment/report_tables.h"

namespace segtrain::trainer {
namespace {

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

// Karypis et al. 2024's chunk row at `factor`: the first chunk-<alpha> at the experiment's budget.
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

// The comparisons the text draws at `factor`: Karypis et al.'s chunk row against DA and each
// baseline sampler's row (data/sampler_kind.h: full, pose, randompos, in the registry's order),
// and every trained row against the best untrained row at each length.
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
    std::vector<const RowResult*> others = {da};
    for (const data::SamplerKind* kind : data::samplers())
      if (kind->baseline) others.push_back(main_row(c, std::string(kind->name), factor));
    for (const RowResult* other : others)
      if (other) out.push_back({chunk->label + " vs " + other->label, chunk, same_b(other)});
  }
  // A sampler's own comparison (cream against pose): both rows trained at the experiment's budget.
  for (const data::SamplerKind* kind : data::samplers()) {
    if (kind->compared_with.empty()) continue;
    const RowResult* a = main_row(c, std::string(kind->name), factor);
    const RowResult* b = main_row(c, std::string(kind->compared_with), factor);
    if (a && b) out.push_back({a->label + " vs " + b->label, a, same_b(b)});
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

// The comparisons the text draws, as paired differences with their 95% intervals.
void comparison_section(std::ostringstream& md, const CorpusResults& c, int64_t factor) {
  const auto all = comparisons(c, factor);
  if (all.empty()) return;
  md << "\nPaired differences at " << factor << "·L_t = " << factor * c.train_length
     << ": ppl(A) - ppl(B) with its 95% interval, the same as a percentage of B, and in how many windows "
     << "(each from another document) A is on that side. " << paired_method_text() << "\n\n";
  difference_table(md, all, factor_lengths(c, factor));
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
          else (d->d.difference.estimate < 0 ? lower : higher).push_back(finding_text(*d, l));
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
  md << "\nWhat more budget changes (paired differences, as above; stated only where found, marked fragile where "
        "it is not found without one of its documents):\n\n";
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
  auto row_of = [&](const std::string& key) -> const RowResult* {
    const auto it = std::find_if(c.rows.begin(), c.rows.end(), [&](const RowResult& r) {
      return r.factor == factor && r.key == key && !r.results.empty();
    });
    return it == c.rows.end() ? nullptr : &*it;
  };
  std::vector<const RowResult*> listed;
  std::vector<Comparison> all;
  for (const auto& [variant, of] : pairs) {
    std::vector<const RowResult*> shown = {of};
    for (const auto& key : variant->variant_versus) shown.push_back(row_of(key));  // experiment.variants[].versus
    shown.push_back(variant);
    for (const RowResult* row : shown) {
      if (!row || std::find(listed.begin(), listed.end(), row) != listed.end()) continue;
      listed.push_back(row);
      md << "| " << row->label << " | " << thousands(row->train_tokens) << " |";
      for (int64_t l : lengths) md << " " << ppl_cell(*row, l) << " |";
      md << "\n";
    }
  }
  for (const auto& [variant, of] : pairs) {
    std::vector<const RowResult*> against = {of};
    for (const auto& key : variant->variant_versus) against.push_back(row_of(key));  // experiment.variants[].versus
    for (const RowResult* b : against) {
      if (!b) continue;
      Comparison cmp{variant->label + " vs " + b->label, variant, {}};
      for (int64_t l : lengths) cmp.b[l] = b;
      all.push_back(cmp);
    }
  }
  if (all.empty()) return void(md << "\n");
  const bool versus = std::any_of(pairs.begin(), pairs.end(), [](const auto& p) { return !p.first->variant_versus.empty(); });
  md << "\nEach variant against its row" << (versus ? " (and the rows its experiment.variants[].versus names)" : "")
     << ": ppl(A) - ppl(B) [95% interval] (% of B; windows on that side). "
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

}  // namespace

std::string results_markdown(const ExperimentConfig& x, const std::vector<CorpusResults>& corpora,
                             const GridTime& time) {
  std::ostringstream md;
  md << "# Experiment " << x.name << "\n\n"
     << "Made by `segtrain experiment " << x.file << "`. Perplexities (lower is better) are on the same "
     << "non-overlapping windows of each corpus's validation split (Karypis et al. 2024, 4.5). OOTB rows are the base model "
     << "with no training and the named extension method; every trained row starts from the base and sees the same "
     << "number of training tokens (Karypis et al. 2024, eq. 2), but the budget curve's rows (<method>@<tokens>). DA is more truncate training at L_t, evaluated like OOTB.\n\n";
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

}  // namespace segtrain::trainer
