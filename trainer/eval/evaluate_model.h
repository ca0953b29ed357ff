#pragma once
// `segtrain eval`: the evaluation suite (perplexity by length, and the prompt tasks
// of --tasks) of a stored model on a token store, written as eval JSON.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainer/config/config.h"

namespace segtrain::trainer {

struct EvalOptions {
  std::string model;  // checkpoint, run directory or HF folder
  std::string data;   // token store
  std::string split = "valid";
  std::vector<int64_t> lengths;
  std::vector<std::string> overrides;  // --set model.extension...
  std::string out;                     // eval JSON
  std::string per_position_csv;        // empty: none; the SVG goes beside it
  int64_t stride = 0;                  // 0: non-overlapping windows
  int64_t max_sequences = kEvalWindows;  // per length, as a run's eval; 0: all
  int64_t windows_per_document = 0;    // 0: every window a document holds
  std::vector<std::string> tasks = EvalConfig{}.tasks;  // as eval.tasks, with its default
  std::vector<std::string> task_settings;          // --set eval.<task>.<key>=value
  std::string device = "auto";  // auto|cpu|cuda, as run.device
  std::string precision = "fp32";  // fp32|bf16: bf16 autocast (positions and the loss stay fp32)
  std::optional<int64_t> loss_chunk_tokens;  // as train.loss_chunk_tokens: nullopt auto, 0 off
  bool allow_tokenizer_mismatch = false;     // evaluate on a store made with another tokenizer (a warning)
  int64_t threads = 0;                       // as run.threads: 0 every core of this process's share
};

void evaluate_stored_model(const EvalOptions& options);

}  // namespace segtrain::trainer
