#include "trainer/experiment/report.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <algorithm>
#include <iomanip>
#include <sstream>

#include "common/atomic_write.h"
#include "common/error.h"
#include "trainer/eval/plot.h"

namespace segtrain::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json number_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

json row_json(const RowResult& row) {
  json results = json::array();
  for (const auto& r : row.results)
    results.push_back({{"length", r.length},
                       {"loss", number_or_null(r.loss)},
                       {"ppl", number_or_null(r.ppl)},
                       {"sequences", r.sequences},
                       {"tokens", r.tokens}});
  json out = {{"key", row.key},       {"label", row.label},   {"kind", row.kind},
              {"factor", row.factor}, {"lengths", row.lengths}, {"model", row.model},
              {"train_tokens", row.train_tokens}, {"eval_seconds", row.eval_seconds}, {"results", results}};
  // The curve at the longest length is the one the plots show.
  if (!row.results.empty()) {
    json curve = json::array();
    for (double v : row.results.back().position_loss) curve.push_back(number_or_null(v));
    out["position_loss"] = curve;
  }
  out["evaluated_with"] = row.evaluated_with.empty() ? json(nullptr) : json::parse(row.evaluated_with);
  if (!row.passkey_with.empty()) {
    json passkey = json::array();
    for (const auto& p : row.passkey)
      passkey.push_back({{"length", p.length}, {"trials", p.trials}, {"correct", p.correct}, {"accuracy", p.accuracy()}});
    out["passkey"] = passkey;
    out["passkey_with"] = json::parse(row.passkey_with);
    out["passkey_seconds"] = row.passkey_seconds;
  }
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

std::vector<std::string> row_labels(const CorpusResults& c) {
  std::vector<std::string> labels;
  for (const auto& row : c.rows)
    if (std::find(labels.begin(), labels.end(), row.label) == labels.end()) labels.push_back(row.label);
  return labels;
}

// The best (lowest perplexity at L_e) row among those whose label starts with
// `prefix` (and not with `unless`, when given).
std::pair<std::string, double> best_of(const CorpusResults& c, const std::string& prefix, int64_t factor,
                                       const std::string& unless = "") {
  std::pair<std::string, double> best{"", std::nan("")};
  for (const auto& label : row_labels(c)) {
    if (label.rfind(prefix, 0) != 0 || (!unless.empty() && label.rfind(unless, 0) == 0)) continue;
    const double ppl = ppl_at(c, label, factor, factor * c.train_length);
    if (!std::isnan(ppl) && (std::isnan(best.second) || ppl < best.second)) best = {label, ppl};
  }
  return best;
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

// Every row of `factor` at each length it was evaluated at (experiment.eval_lengths).
void length_table(std::ostringstream& md, const CorpusResults& c, int64_t factor) {
  std::vector<int64_t> lengths;
  for (const auto& row : c.rows)
    if (row.factor == factor)
      for (int64_t l : row.lengths)
        if (std::find(lengths.begin(), lengths.end(), l) == lengths.end()) lengths.push_back(l);
  std::sort(lengths.begin(), lengths.end());
  md << "| method |";
  for (int64_t l : lengths) md << " " << l << " |";
  md << "\n|---|";
  for (size_t i = 0; i < lengths.size(); ++i) md << "---:|";
  md << "\n";
  for (const auto& label : row_labels(c)) {
    bool any = false;
    for (int64_t l : lengths) any = any || !std::isnan(ppl_at(c, label, factor, l));
    if (!any) continue;
    md << "| " << label << " |";
    for (int64_t l : lengths) md << " " << cell(ppl_at(c, label, factor, l)) << " |";
    md << "\n";
  }
}

// Passkey accuracy of every row of `factor` by prompt length: "correct/trials".
void passkey_table(std::ostringstream& md, const CorpusResults& c, int64_t factor) {
  std::vector<int64_t> lengths;
  for (const auto& row : c.rows)
    if (row.factor == factor)
      for (const auto& p : row.passkey)
        if (std::find(lengths.begin(), lengths.end(), p.length) == lengths.end()) lengths.push_back(p.length);
  if (lengths.empty()) return;
  std::sort(lengths.begin(), lengths.end());
  md << "\nPasskey retrieval, correct of trials by prompt length (every row of " << factor << "·L_t; the same "
     << "prompts for every row):\n\n| method |";
  for (int64_t l : lengths) md << " " << l << " |";
  md << "\n|---|";
  for (size_t i = 0; i < lengths.size(); ++i) md << "---:|";
  md << "\n";
  for (const auto& row : c.rows) {
    if (row.factor != factor || row.passkey.empty()) continue;
    md << "| " << row.label << " |";
    for (int64_t l : lengths) {
      auto it = std::find_if(row.passkey.begin(), row.passkey.end(), [&](const auto& p) { return p.length == l; });
      md << " " << (it == row.passkey.end() ? "-" : std::to_string(it->correct) + "/" + std::to_string(it->trials)) << " |";
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

std::string percent(double ratio) {
  std::ostringstream out;
  out << std::showpos << std::fixed << std::setprecision(1) << 100.0 * (ratio - 1.0) << "%";
  return out.str();
}

// Seed 004's findings, checked against this grid's numbers; each line says
// whether it holds here.
void findings(std::ostringstream& md, const CorpusResults& c) {
  const double base = c.base.results.empty() ? std::nan("") : c.base.results.front().ppl;
  md << "Checks of seed 004's findings on this grid:\n\n";
  for (int64_t f : c.factors) {
    const int64_t le = f * c.train_length;
    const std::string at = "at " + std::to_string(f) + "·L_t = " + std::to_string(le);
    const double ootb = ppl_at(c, "OOTB", f, le);
    if (!std::isnan(ootb) && std::isfinite(base))
      md << "- " << at << ": out of the box the base has perplexity " << cell(ootb) << ", " << cell(ootb / base)
         << "× its perplexity at L_t (" << cell(base) << ").\n";
    const auto chunk = best_of(c, "chunk-", f, "chunk-ring-");  // the paper's chunk; ring is compared below
    if (chunk.first.empty()) continue;
    auto compare = [&](const std::string& name, std::pair<std::string, double> other) {
      if (other.first.empty() || std::isnan(other.second)) return;
      const bool beats = chunk.second < other.second;
      md << "- " << at << ": " << chunk.first << " (" << cell(chunk.second) << ") " << (beats ? "beats" : "does NOT beat")
         << " " << name << " (" << other.first << ", " << cell(other.second) << "): " << percent(chunk.second / other.second)
         << ".\n";
    };
    compare("the best OOTB row", best_of(c, "OOTB", f));
    compare("full", best_of(c, "full", f));
    compare("the best prefix", best_of(c, "prefix-", f));
    compare("RandomPos", best_of(c, "randompos", f));
    compare("DA", best_of(c, "DA", f));
  }
  md << "\n";
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
        const auto& curve = row->results.back().position_loss;
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
    row.eval_seconds = j.value("eval_seconds", 0.0);
    if (j.contains("passkey_with") && !j.at("passkey_with").is_null()) {
      row.passkey_with = j.at("passkey_with").dump();
      row.passkey_seconds = j.value("passkey_seconds", 0.0);
      for (const auto& p : j.at("passkey"))
        row.passkey.push_back({p.at("length").get<int64_t>(), p.at("trials").get<int64_t>(), p.at("correct").get<int64_t>()});
    }
    row.evaluated_with = j.at("evaluated_with").is_null() ? "" : j.at("evaluated_with").dump();
    for (const auto& r : j.at("results")) {
      LengthResult l;
      l.length = r.at("length");
      // null is what evaluate()'s NaN (no window of that length) was written as.
      l.loss = r.at("loss").is_null() ? NAN : r.at("loss").get<double>();
      l.ppl = r.at("ppl").is_null() ? NAN : r.at("ppl").get<double>();
      l.sequences = r.at("sequences");
      l.tokens = r.at("tokens");
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
     << "Made by `segtrain experiment " << x.file << "`. Every number is perplexity (lower is better) on the same "
     << "non-overlapping windows of each corpus's validation split (seed 004, 4.5). OOTB rows are the base model "
     << "with no training and the named extension method; every trained row starts from the base and sees the same "
     << "number of training tokens (seed 004, eq. 2). DA is more truncate training at L_t, evaluated like OOTB.\n\n";
  if (time.invocations > 0)
    md << "Wall time of the grid so far: " << duration(time.seconds) << " ("
       << (time.invocations == 1 ? std::string("one run") : std::to_string(time.invocations) + " runs, each resuming the last")
       << " of `segtrain experiment`).\n\n";
  for (const auto& c : corpora) {
    md << "## " << c.name << " (" << c.arch << ", L_t = " << c.train_length << ")\n\n";
    if (!c.base.results.empty())
      md << "The base model at L_t = " << c.train_length << ": perplexity " << cell(c.base.results.front().ppl)
         << ".\n\n";
    md << "Perplexity at L_e, for models extended to L_e:\n\n";
    table(md, c, true);
    md << "\nPerplexity at L_t = " << c.train_length << " of the same models (what extending costs on short inputs):\n\n";
    table(md, c, false);
    if (!x.eval_lengths.empty())
      for (int64_t f : c.factors) {
        md << "\nPerplexity by length, every row of " << f << "·L_t = " << f * c.train_length
           << (x.eval_from_longest ? " (each length on the first L tokens of the same longest windows; rows whose "
                                     "positions depend on the input's length scored on windows of each length)"
                                   : "")
           << ":\n\n";
        length_table(md, c, f);
      }
    for (int64_t f : c.factors) passkey_table(md, c, f);
    md << "\nTraining tokens per trained row:";
    for (int64_t f : c.factors)
      for (const auto& row : c.rows)
        if (row.factor == f && row.kind == "trained") {
          md << " " << f << "·L_t: " << row.train_tokens << ";";
          break;
        }
    md << "\n\n";
    findings(md, c);
    ring_section(md, c);
    for (int64_t f : c.factors) {
      md << "![loss by position at " << f << "·L_t](plots/" << plot_name(c, f) << ")\n";
      if (!ring_pairs(c, f).empty())
        md << "![chunk vs chunk-ring: loss by position at " << f << "·L_t](plots/" << ring_plot_name(c, f) << ")\n";
    }
    md << "\n";
  }
  return md.str();
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
      std::vector<PlotSeries> series;
      for (const auto& row : c.rows)
        if (row.factor == f && !row.results.empty())
          series.push_back(position_curve(row.label, row.results.back().position_loss, bucket));
      write_file_atomic(out / "plots" / plot_name(c, f), line_plot_svg(options, series));
      const auto pairs = ring_pairs(c, f);
      if (pairs.empty()) continue;
      series.clear();
      for (const auto& [uniform, ring] : pairs)
        for (const auto& label : {uniform, ring})
          series.push_back(position_curve(label, row_at(c, label, f)->results.back().position_loss, bucket));
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
