#include "trainer/eval/perplexity_task.h"

#include <algorithm>
#include <cmath>

#include "common/log.h"

namespace segtrain::trainer {
namespace {

class PerplexityTask final : public EvalTask {
 public:
  explicit PerplexityTask(const TaskSetup& setup) : options_(setup.perplexity), split_(setup.split) {}
  const std::string& name() const override { return name_; }
  bool writes_prompts() const override { return false; }
  int64_t longest() const override {
    return std::max(options_.window_length, *std::max_element(options_.lengths.begin(), options_.lengths.end()));
  }
  // The keys of the grid's records before eval.tasks, so that its finished rows are kept.
  nlohmann::json settings() const override {
    nlohmann::json j = {{"lengths", options_.lengths},
                        {"max_sequences", options_.max_sequences},
                        {"stride", options_.stride},
                        {"split", split_}};
    if (options_.per_window) j["per_window"] = kLossBlock;
    if (options_.windows_per_document > 0) j["windows_per_document"] = options_.windows_per_document;
    if (options_.window_length > 0) {
      j["prefixes_of_longest"] = true;
      if (options_.lengths.back() != options_.window_length) j["window_length"] = options_.window_length;
    }
    return j;
  }
  void check(const TaskData&) const override {}
  TaskResult run(models::TransformerLM& model, const TaskData& data) const override {
    return {name_, evaluate(model, *data.split, options_), {}, 0};
  }
  std::string lengths_key() const override { return "eval.lengths"; }
  std::vector<std::pair<std::string, double>> scalars(const TaskResult& result) const override {
    std::vector<std::pair<std::string, double>> out;
    for (const auto& r : result.perplexity)
      if (std::isfinite(r.ppl)) out.emplace_back("eval/ppl@" + std::to_string(r.length), r.ppl);
    return out;
  }
  void log(const TaskResult& result) const override {
    for (const auto& r : result.perplexity)
      log::info("eval ", split_, " L=", r.length, ": ppl ", r.ppl, " (loss ", r.loss, ") over ", r.tokens,
                " tokens in ", r.sequences, " sequences");
  }

 private:
  std::string name_ = "perplexity";
  PerplexityOptions options_;
  std::string split_;
};

}  // namespace

std::unique_ptr<EvalTask> make_perplexity_task(const TaskSetup& setup) {
  return std::make_unique<PerplexityTask>(setup);
}

}  // namespace segtrain::trainer
