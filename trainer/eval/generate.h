#pragma once
// Text generation from a stored model (`segtrain generate`) and the decoding loop
// the evaluation tasks use: the prompt read once, then one token at a time through
// the model's KV cache (models/modules/kv_cache.h), positions continuing past the prompt
// under the model's extension; greedy, or sampled with a temperature and top-k from
// a seeded generator.
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/modules/transformer.h"

namespace segtrain::trainer {

struct Decoding {
  int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0: greedy (argmax, the lowest id on a tie, as torch.argmax)
  int64_t top_k = 0;         // sampling from the k most likely tokens; 0: all
  uint64_t seed = 1234;      // the sampler's generator
  int32_t eos_id = -1;       // generation stops after writing it; -1: never
  // Called with the tokens written so far after each one; true stops generation
  // (an evaluation task whose answer is complete). Empty: never.
  std::function<bool(const std::vector<int32_t>&)> done;
};

// Where generation's time went: reading the prompt up to the first new token, then the
// tokens after it (one KV-cache step each).
struct GenerationTimes {
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int64_t decoded_tokens = 0;  // the new tokens after the first
};

// The new token ids after `prompt` (at most max_new_tokens, ending with eos_id when
// it was written). The model runs in inference mode on `device`. With `tell`, a long
// prompt's prefill is announced and the new tokens report their progress (segtrain generate).
std::vector<int32_t> generate_tokens(models::TransformerLM& model, const std::vector<int32_t>& prompt,
                                     const Decoding& decoding, c10::Device device, GenerationTimes* times = nullptr,
                                     bool tell = false);

struct GenerateOptions {
  std::string model;                   // checkpoint, run directory or HF folder
  std::vector<std::string> overrides;  // --set model.extension...
  std::string prompt;                  // the text, or
  std::string prompt_file;             // a file holding it, or
  std::vector<int64_t> prompt_ids;     // the prompt's token ids as they are (no tokenizer needed)
  std::string tokenizer;               // HF folder or sentencepiece .model; empty: the model's own
  Decoding decoding;
  bool ignore_eos = false;  // write max_new_tokens whatever they are
  std::string out;          // JSON with the ids and the text; empty: none
  std::string device = "auto";
  int64_t threads = 0;
};

// `segtrain generate`: prints the continuation on stdout: the new tokens' text, or
// their ids when the prompt was ids and the model has no tokenizer segtrain reads.
void generate_from_stored_model(const GenerateOptions& options);

}  // namespace segtrain::trainer
