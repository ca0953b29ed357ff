#include "trainer/eval/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/numbers.h"
#include "common/output_path.h"
#include "common/progress.h"
#include "data/document_tokenizer.h"
#include "models/modules/model_io.h"
#include "models/spec/auto_values.h"
#include "trainer/eval/eval_mode.h"
#include "trainer/eval/stored_model.h"
#include "trainer/runtime/device.h"
#include "trainer/runtime/memory.h"

namespace segtrain::trainer {
namespace {

// The next token from the last position's logits [V] (fp32).
int32_t pick(const at::Tensor& logits, const Decoding& d, at::Generator& generator) {
  if (d.temperature <= 0) return static_cast<int32_t>(logits.argmax().item<int64_t>());
  auto scaled = logits / d.temperature;
  if (d.top_k > 0 && d.top_k < scaled.size(0)) {
    // Every logit below the k-th largest is ruled out (ties with it stay, as transformers' TopK).
    const auto kth = std::get<0>(scaled.topk(d.top_k)).select(0, d.top_k - 1);
    scaled = scaled.masked_fill(scaled < kth, -std::numeric_limits<float>::infinity());
  }
  const auto probs = scaled.softmax(0).to(at::kCPU);
  return static_cast<int32_t>(at::multinomial(probs, 1, /*replacement=*/false, generator).item<int64_t>());
}

at::Tensor row(const std::vector<int64_t>& values, c10::Device device) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong)).view({1, -1}).to(device);
}

}  // namespace

std::vector<int32_t> generate_tokens(models::TransformerLM& model, const std::vector<int32_t>& prompt,
                                     const Decoding& decoding, c10::Device device, GenerationTimes* times,
                                     bool tell) {
  if (prompt.empty()) throw InputError("generate: the prompt has no tokens");
  const EvalMode eval_mode(model);
  // Nothing generated here is ever differentiated: inference tensors skip autograd's bookkeeping too.
  at::InferenceMode inference;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(decoding.seed);
  models::KvCache cache;
  cache.reserved_tokens = static_cast<int64_t>(prompt.size()) + decoding.max_new_tokens;
  std::vector<int64_t> tokens(prompt.begin(), prompt.end()), positions(prompt.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i);
  std::vector<int32_t> out;
  int64_t next_position = static_cast<int64_t>(prompt.size());
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  auto first_token = started;
  // The prefill is one forward over the whole prompt: nothing to count, so it is announced.
  if (tell && prompt.size() >= 2048)
    log::info("generate: reading the ", prompt.size(), "-token prompt (one forward; its time grows with the square of "
              "its length) before the first new token");
  Progress progress("generate", decoding.max_new_tokens, "new tokens");
  while (static_cast<int64_t>(out.size()) < decoding.max_new_tokens) {
    if (tell) progress.update(static_cast<int64_t>(out.size()));
    // Only the last position's logits are needed: the head runs on it alone.
    const auto hidden = model->decode(row(tokens, device), row(positions, device), cache);
    const auto logits = model->logits(hidden.select(1, hidden.size(1) - 1).select(0, 0)).to(at::kFloat);
    const int32_t next = pick(logits, decoding, generator);  // on the host: the step has finished
    out.push_back(next);
    if (out.size() == 1) first_token = Clock::now();
    if (next == decoding.eos_id || (decoding.done && decoding.done(out))) break;
    tokens = {next};
    positions = {next_position++};
  }
  if (times) {
    times->prefill_seconds = std::chrono::duration<double>(first_token - started).count();
    times->decode_seconds = std::chrono::duration<double>(Clock::now() - first_token).count();
    times->decoded_tokens = std::max<int64_t>(0, static_cast<int64_t>(out.size()) - 1);
  }
  return out;
}

namespace {

// The tokenizer to write the prompt and read the output with: --tokenizer, else the
// model's own (its folder's, or the hf: base a checkpoint was trained from).
// nullopt only when `needed` is false and the model has none segtrain reads.
std::optional<data::DocumentTokenizer> open_tokenizer(const GenerateOptions& options, bool needed) {
  if (!options.tokenizer.empty()) return data::open_document_tokenizer(options.tokenizer);
  std::string why;
  const auto own = model_tokenizer(
      open_stored_model(options.model, options.overrides, std::nullopt, AdapterUse::on_its_base).dir, &why);
  if (own) {
    try {
      return data::open_document_tokenizer(own->tokenizer);
    } catch (const InputError& e) {
      why = e.what();
    }
  }
  if (!needed) return std::nullopt;
  throw InputError("--model " + options.model + ": " + (why.empty() ? "it records no tokenizer" : why) +
                   "; give one with --tokenizer DIR (or the prompt as --prompt-ids)");
}

// Before any weights are read: the KV cache of the prompt and every new token (taken at once)
// fits the device's available memory, else exit 2 with the figures; a length past the positions
// a model without an extension was trained at is warned about.
void check_generation_fits(const models::ModelConfig& c, int64_t prompt, int64_t new_tokens, const c10::Device& device) {
  const int64_t tokens = prompt + new_tokens;
  const int64_t kv_heads = c.n_kv_heads.value_or(c.n_heads);
  const int64_t head_dim = c.head_dim.value_or(c.d_model / c.n_heads);
  const double per_token = 2.0 * static_cast<double>(c.n_layers * kv_heads * head_dim) * sizeof(float);
  const double cache = per_token * static_cast<double>(tokens);
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  auto gib = [&](double bytes) { return format_double(std::round(bytes / kGiB * 100.0) / 100.0); };
  if (const auto available = available_memory_bytes(device); available && cache > 0.9 * static_cast<double>(*available))
    throw InputError("--max-new-tokens " + std::to_string(new_tokens) + ": " + std::to_string(prompt) +
                     " prompt tokens + " + std::to_string(new_tokens) + " new ones need a KV cache of " + gib(cache) +
                     " GiB (" + std::to_string(c.n_layers) + " layers x keys and values x " + std::to_string(kv_heads) +
                     " heads x " + std::to_string(head_dim) + " x 4 bytes a token), and " + device.str() + " has " +
                     gib(static_cast<double>(*available)) + " GiB available; ask for fewer tokens");
  if (c.extension.method == models::ExtensionMethod::none && c.max_positions && tokens > *c.max_positions &&
      models::position_scheme(c.arch) != models::PositionScheme::learned)
    log::warn("generate: ", prompt, " prompt tokens + ", new_tokens, " new ones reach past the ", *c.max_positions,
              " positions the model was trained at, with no extension: expect its text to degrade there (extend "
              "it with --set model.extension.method=yarn, or train it longer with segtrain train)");
}

}  // namespace

void generate_from_stored_model(const GenerateOptions& options) {
  if (!options.out.empty()) check_output_file(options.out, "--out");
  const int given = int(!options.prompt.empty()) + int(!options.prompt_file.empty()) + int(!options.prompt_ids.empty());
  if (given != 1)
    throw InputError("generate: give the prompt as --prompt TEXT, --prompt-file FILE or --prompt-ids IDS (one of them)");
  at::set_num_threads(static_cast<int>(thread_count(options.threads)));
  const c10::Device device = pick_device(*enum_from_name(kDevices, options.device), /*local_rank=*/0, "--device");

  const auto tokenizer = open_tokenizer(options, /*needed=*/options.prompt_ids.empty());
  std::vector<int32_t> prompt;
  if (!options.prompt_ids.empty()) {
    for (const int64_t id : options.prompt_ids) prompt.push_back(static_cast<int32_t>(id));
  } else {
    const std::string text =
        options.prompt_file.empty() ? options.prompt : read_file(options.prompt_file, "--prompt-file");
    if (tokenizer->add_bos && tokenizer->bos_id >= 0) prompt.push_back(tokenizer->bos_id);
    tokenizer->encode_text(text, prompt);
  }

  // factor auto: stretch the model to the longest sequence it will read.
  const int64_t longest = static_cast<int64_t>(prompt.size()) + options.decoding.max_new_tokens;
  const StoredModel stored = open_stored_model(options.model, options.overrides, longest, AdapterUse::on_its_base);
  // Nothing it reads is written over: the model's folder and its base (a PEFT adapter's too), the
  // prompt, the tokenizer.
  if (!options.out.empty()) {
    std::vector<CommandInput> reads = stored.inputs;
    reads.push_back({options.prompt_file, "--prompt-file"});
    reads.push_back({options.tokenizer, "--tokenizer"});
    check_output_is_no_input(options.out, "--out", reads);
  }
  const int64_t vocab = models::vocab_size_of(stored.config);
  for (const int32_t id : prompt)
    if (id < 0 || id >= vocab)
      throw InputError("generate: prompt token id " + std::to_string(id) + " is outside the model's vocabulary of " +
                       std::to_string(vocab));
  if (models::position_scheme(stored.config.arch) == models::PositionScheme::learned &&
      longest > models::ape_rows(stored.config))
    throw InputError("generate: " + std::to_string(prompt.size()) + " prompt tokens + --max-new-tokens " +
                     std::to_string(options.decoding.max_new_tokens) + " reach past the model's learned position "
                     "table (" + std::to_string(models::ape_rows(stored.config)) +
                     " rows); shorten them, or extend the table with --set model.extension.method=interpolate");
  check_generation_fits(stored.config, static_cast<int64_t>(prompt.size()), options.decoding.max_new_tokens, device);
  models::TransformerLM model = load_stored_model(stored);
  model->to(device);

  Decoding decoding = options.decoding;
  decoding.eos_id = options.ignore_eos || !tokenizer ? -1 : tokenizer->eos_id;
  const auto start = std::chrono::steady_clock::now();
  GenerationTimes times;
  const auto ids = generate_tokens(model, prompt, decoding, device, &times, /*tell=*/true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string continuation;
  if (tokenizer) {
    continuation = tokenizer->decode(ids);
  } else {
    for (size_t i = 0; i < ids.size(); ++i) continuation += (i ? " " : "") + std::to_string(ids[i]);
  }
  std::cout << continuation << std::endl;
  log::info("generate: ", prompt.size(), " prompt tokens, ", ids.size(), " new in ", seconds, " s");
  if (!options.out.empty()) {
    nlohmann::json j = {{"model", options.model}, {"prompt_ids", prompt},   {"output_ids", ids},
                        {"text", continuation},   {"seconds", seconds},     {"temperature", decoding.temperature},
                        {"top_k", decoding.top_k}, {"seed", decoding.seed},
                        // The prompt up to the first new token, then one cached step a token after it.
                        {"prefill_seconds", times.prefill_seconds}, {"decode_seconds", times.decode_seconds},
                        {"decoded_tokens", times.decoded_tokens},
                        {"decode_tokens_per_s", times.decode_seconds > 0 ? times.decoded_tokens / times.decode_seconds
                                                                         : 0.0}};
    write_file_atomic(options.out, j.dump(2) + "\n");
  }
}

}  // namespace segtrain::trainer
