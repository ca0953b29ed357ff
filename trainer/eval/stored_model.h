#pragma once
// A model on disk as eval, export and inspect take it: a segtrain checkpoint, a
// run directory (its final/) or an HF folder, recognised by content, or a PEFT
// LoRA adapter on its base (peft:DIR, eval and generate), with
// `--set model.extension...` overrides applied (config/resolved_model.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/output_path.h"
#include "data/tokenizer_identity.h"
#include "models/modules/transformer.h"
#include "models/spec/config.h"

namespace segtrain::trainer {

struct StoredModel {
  std::string dir;             // the folder holding the weights (a run's final/; a PEFT adapter's base)
  models::ModelConfig config;  // the stored config with the overrides applied
  std::string adapter;         // peft:DIR: the adapter folder, applied over `dir`'s weights; else ""
  std::vector<CommandInput> inputs;  // what loading it reads (model_inputs), `path` as the user gave it first
};

// Whether a command takes a PEFT adapter as its model (eval and generate score it on its base;
// export takes the run that trained it, inspect a model's positions).
enum class AdapterUse { refused, on_its_base };

// InputError naming `path` when it is no model folder, or an override that does not apply; for
// peft:DIR (AdapterUse::on_its_base), when the adapter's base cannot be found or read.
StoredModel open_stored_model(const std::string& path, const std::vector<std::string>& overrides,
                              std::optional<int64_t> target_length = std::nullopt,
                              AdapterUse adapter_use = AdapterUse::refused);

// The model's weights in fp32: load_model of its folder, then, for a PEFT adapter, the LoRA
// converter of its adapter_config.json and its adapter_model.safetensors over them (as
// peft.PeftModel.from_pretrained(base, DIR) gives it). InputError as load_model and
// models::load_peft_adapter say.
models::TransformerLM load_stored_model(const StoredModel& stored);

// What a command that loads the model folder `dir` reads, and what its run reads to continue
// (the inputs common/output_path.h's check_output_is_no_input keeps): the folder itself, the
// base its base.json names (a converted run holds only what trained; that base's own base.json
// followed in turn), and the PEFT adapter its run continues (model.init: peft:DIR in its
// config.yaml; --resume reads it again). `what` names the folder as the user gave it ("--model").
// A record it cannot read adds nothing: loading reports it.
std::vector<CommandInput> model_inputs(const std::string& dir, const std::string& what);

// The same for a model.init reference ("hf:DIR", "checkpoint:DIR", "peft:DIR"): its folder's, or
// a PEFT adapter's folder and its base's. None for scratch.
std::vector<CommandInput> model_init_inputs(const std::string& init, const std::string& what);

// InputError when token ids of a store with `store_vocab_size` would be out of the model's range.
void check_store_fits(const StoredModel& model, int64_t store_vocab_size, const std::string& store_name);

// The tokenizer a model learned, and where that was read (data/tokenizer_identity.h):
// a checkpoint's record of its store (store_tokenizer.json), else the tokenizer files
// of its HF origin (the folder itself, or the hf: base it was trained from).
// nullopt when it has neither (trained from scratch before records were kept), or
// when its HF tokenizer is one segtrain cannot read (`unreadable` then says why).
struct ModelTokenizer {
  data::TokenizerIdentity identity;
  std::string source;     // "HF folder 'DIR'" | "checkpoint 'DIR' (trained on store 'S')"
  std::string tokenizer;  // what `segtrain prepare --tokenizer` takes to make a matching store
};
std::optional<ModelTokenizer> model_tokenizer(const std::string& model_dir, std::string* unreadable = nullptr);

// Refuses (InputError) evaluating or training `model_dir` on a store made with
// another tokenizer, naming both and the `segtrain prepare` command that makes a
// matching store; `key` says where the store was given ("data.store", "--data")
// and `override_hint` how to allow it on purpose (then a warning). A one-line
// warning when either side records no tokenizer to compare.
void check_store_tokenizer(const std::string& store_dir, const std::string& model_dir, const std::string& key,
                           const std::string& override_hint, bool allowed);

// What `segtrain export` writes besides the weights' source.
struct ExportRequest {
  std::string out;
  std::string dtype = "float32";       // float32 | bfloat16
  std::string max_shard_size = "5GB";  // as transformers' save_pretrained: 5GB, 500MB, 2GiB, bytes
  bool overwrite = false;  // replace a previous export of segtrain at `out` (recognised by its content)
  // A LoRA model's adapters as a PEFT folder (models/modules/peft_adapter.h) instead of the merged model.
  bool adapter = false;
};

// `segtrain export`: an HF folder transformers loads (models/modules/hf.h), with the
// tokenizer files of the model's HF origin (the folder itself, or the hf: base
// a checkpoint was trained from) so the folder is usable as it is. It never deletes
// what it did not write: `out` must be new, an empty folder, or (with overwrite) a
// previous export; never a file, the source, inside it or around it (exit 2, before
// any weights are read).
void export_stored_model(const std::string& path, const std::vector<std::string>& overrides,
                         const ExportRequest& request);

}  // namespace segtrain::trainer
