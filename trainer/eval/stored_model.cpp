#include "trainer/eval/stored_model.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "common/atomic_write.h"
#include "common/dir_lock.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/numbers.h"
#include "common/output_path.h"
#include "models/modules/hf.h"
#include "models/modules/model_io.h"
#include "models/modules/peft_adapter.h"
#include "models/modules/positions.h"
#include "models/modules/safetensors.h"
#include "models/spec/base_record.h"
#include "models/spec/families/peft_config.h"
#include "trainer/config/config.h"
#include "trainer/config/model_ref.h"
#include "trainer/config/resolved_model.h"
#include "trainer/eval/adapter_export.h"

namespace segtrain::trainer {

namespace {

// A run's newest complete step checkpoint (checkpoints/step-N with its model), or "".
std::string newest_step_checkpoint(const std::string& run_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string newest;
  long long newest_step = -1;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || name.find(".tmp-") != std::string::npos ||
        !fs::exists(entry.path() / "model_config.json"))
      continue;
    const long long step = std::atoll(name.c_str() + 5);
    if (step > newest_step) newest_step = step, newest = entry.path().string();
  }
  return newest;
}

// model.init as the config.yaml beside a checkpoint's weights records it (model.init alone: a
// config of an older release, with keys since retired, still names its base); nullopt when the
// folder has no config.yaml or the key is no reference. Throws what reading and YAML throw.
std::optional<ModelRef> saved_model_init(const std::filesystem::path& dir) {
  const std::filesystem::path saved = dir / "config.yaml";
  if (!std::filesystem::exists(saved)) return std::nullopt;
  const YAML::Node init = YAML::Load(read_file(saved, "checkpoint config"))["model"]["init"];
  return parse_model_ref(init && init.IsScalar() ? init.Scalar() : std::string());
}

// model_inputs of a folder `depth` bases down; 16 at most (records that name each other in a loop end there).
void add_model_inputs(const std::string& dir, const std::string& what, int depth, std::vector<CommandInput>& inputs) {
  inputs.push_back({dir, what});
  std::string resolved = dir;
  models::detect_model_format(dir, &resolved);
  try {
    if (const auto init = saved_model_init(resolved); init && init->kind == ModelRef::Kind::peft)
      inputs.push_back({init->adapter, "the PEFT adapter " + what + " continues (its config.yaml's model.init)"});
  } catch (const std::exception&) {  // a config.yaml that does not read names nothing; its own readers say why
  }
  const std::filesystem::path record = std::filesystem::path(resolved) / models::kBaseFile;
  if (depth >= 16 || !std::filesystem::is_regular_file(record)) return;
  std::string base;
  try {
    base = models::base_record_from_json(read_file(record, "base record"), record.string()).folder;
  } catch (const std::exception&) {  // loading the model refuses it, naming what is wrong
    return;
  }
  add_model_inputs(base, "the base of " + what + " (its base.json)", depth + 1, inputs);
}

}  // namespace

std::vector<CommandInput> model_inputs(const std::string& dir, const std::string& what) {
  std::vector<CommandInput> inputs;
  add_model_inputs(dir, what, 0, inputs);
  return inputs;
}

std::vector<CommandInput> model_init_inputs(const std::string& init, const std::string& what) {
  const auto ref = parse_model_ref(init);
  if (!ref || !ref->from_folder()) return {};
  if (ref->kind != ModelRef::Kind::peft) return model_inputs(ref->dir, what);
  std::vector<CommandInput> inputs = {{ref->adapter, what}};
  if (!ref->dir.empty())
    add_model_inputs(ref->dir, "the base of " + what + " (its adapter_config.json)", 1, inputs);
  return inputs;
}

namespace {

// peft:DIR as eval and generate take it: the adapter's base (found as model.init finds it) with the
// adapter's settings read against that base's config, so nothing loads before both are known good.
StoredModel open_peft_adapter(const std::string& path, const ModelRef& ref, const std::vector<std::string>& overrides,
                              std::optional<int64_t> target_length) {
  models::read_peft_base_model(ref.adapter);  // the file's own errors first, naming it
  if (ref.dir.empty())
    throw InputError("--model " + path + ": the base its adapter_config.json names (base_model_name_or_path) is "
                     "neither a folder with config.json nor a model in the Hugging Face cache: write the base's "
                     "folder there");
  StoredModel m;
  if (models::detect_model_format(ref.dir, &m.dir) != models::ModelFormat::hf)
    throw InputError("--model " + path + ": its base " + ref.dir + " is not a transformers folder (no config.json)");
  m.config = apply_model_overrides(models::read_model_config(m.dir), overrides, target_length);
  models::read_peft_adapter_config(ref.adapter, m.config);  // its settings fit this base
  m.adapter = ref.adapter;
  m.inputs = model_init_inputs(path, "--model");
  return m;
}

}  // namespace

StoredModel open_stored_model(const std::string& path, const std::vector<std::string>& overrides,
                              std::optional<int64_t> target_length, AdapterUse adapter_use) {
  StoredModel m;
  // `hf:DIR` and `checkpoint:DIR` as model.init writes them, or a plain folder.
  const auto ref = parse_model_ref(path);
  if (ref && ref->kind == ModelRef::Kind::peft) {
    if (adapter_use == AdapterUse::on_its_base) return open_peft_adapter(path, *ref, overrides, target_length);
    throw InputError("--model: '" + path + "' is a PEFT adapter: give the run that trained it, or continue it in a "
                     "run (model.init: " + path + ")");
  }
  const std::string dir = ref && ref->from_folder() ? ref->dir : path;
  const auto format = models::detect_model_format(dir, &m.dir);
  if (!format) {
    // A run that stopped before its end has checkpoints but no final/.
    if (const std::string newest = newest_step_checkpoint(dir); !newest.empty())
      throw InputError("--model: '" + path + "' is a run without final/ (it stopped before its last step): give " +
                       "its newest checkpoint " + newest + ", or finish it with `segtrain train CONFIG --resume auto`");
    throw InputError("--model: '" + path + "' is not a model directory: neither a segtrain checkpoint/run " +
                     "(model_config.json) nor an HF folder (config.json)");
  }
  if (ref && ref->from_folder() && (*format == models::ModelFormat::hf) != (ref->kind == ModelRef::Kind::hf))
    throw InputError("--model: '" + path + "' is not " + ref->description() + " (no " + ref->marker_file() + ")");
  m.config = apply_model_overrides(models::read_model_config(m.dir), overrides, target_length);
  m.inputs = model_inputs(m.dir, "--model");
  return m;
}

models::TransformerLM load_stored_model(const StoredModel& stored) {
  models::TransformerLM model = models::load_model(stored.dir, stored.config);
  if (stored.adapter.empty()) return model;
  const int64_t tensors = models::apply_peft_adapter(model, stored.adapter);
  log::info("the PEFT adapter ", stored.adapter, " (", tensors, " tensors) on its base ", stored.dir);
  return model;
}

void check_store_fits(const StoredModel& model, int64_t store_vocab_size, const std::string& store_name) {
  const int64_t vocab = models::vocab_size_of(model.config);
  if (store_vocab_size > vocab)
    throw InputError(store_name + ": the store's vocabulary (" + std::to_string(store_vocab_size) +
                     ") is larger than the model's (" + std::to_string(vocab) + ", " + model.dir + ")");
}

namespace {

namespace fs = std::filesystem;

// The files transformers' AutoTokenizer (and generate) read from a model folder.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",     "tokenizer_config.json", "special_tokens_map.json",
                                           "tokenizer.model",    "vocab.json",            "merges.txt",
                                           "added_tokens.json",  "generation_config.json"};

// Where the model's tokenizer lives: an HF folder itself, or the hf: base a
// checkpoint was trained from (model.init in its config.yaml, followed through
// checkpoint: bases). Empty for models trained from scratch, whose store's
// tokenizer is not an HF tokenizer.
std::string tokenizer_origin(std::string dir) {
  for (int depth = 0; depth < 16; ++depth) {
    if (models::detect_model_format(dir, &dir) == models::ModelFormat::hf) return dir;
    std::optional<ModelRef> ref;
    try {
      ref = saved_model_init(dir);
    } catch (const std::exception& e) {  // the weights export fine without it; say why no tokenizer follows
      log::warn("tokenizer files not copied: ", (fs::path(dir) / "config.yaml").string(), ": ", e.what());
      return "";
    }
    if (!ref || !ref->from_folder()) return "";
    if (ref->kind == ModelRef::Kind::hf) return ref->dir;
    dir = ref->dir;
  }
  return "";
}

// The longest sequences a segtrain checkpoint was trained on: data.extended_length of the run
// config saved beside its weights; 0 for an HF folder or a config without it.
int64_t trained_length(const std::string& dir) {
  const fs::path saved = fs::path(dir) / "config.yaml";
  if (!fs::exists(saved)) return 0;
  try {
    const YAML::Node length = YAML::Load(read_file(saved, "checkpoint config"))["data"]["extended_length"];
    return length && length.IsScalar() ? length.as<int64_t>() : 0;
  } catch (const std::exception& e) {
    log::warn(saved.string(), ": no data.extended_length read (", e.what(), "): config.json keeps the base's length");
    return 0;
  }
}

void copy_tokenizer_files(const std::string& origin, const fs::path& out) {
  if (origin.empty()) return;
  int copied = 0;
  for (const char* name : kTokenizerFiles) {
    const fs::path from = fs::path(origin) / name;
    if (!fs::is_regular_file(from)) continue;
    write_file_atomic(out / name, read_file(from, "tokenizer file"));
    ++copied;
  }
  if (copied == 0)
    log::warn("no tokenizer files in ", origin, " (the model's HF origin): the export has weights and config only");
  else
    log::info("copied ", copied, " tokenizer file(s) from ", origin);
}

// A sentencepiece model (a store's tokenizer.model that segtrain trained or was given) for
// transformers: the file itself, and a tokenizer_config.json naming the generic TokenizersBackend,
// which transformers 5 builds from the model's own pieces, scores and normalizer, giving
// sentencepiece's ids (FirstUse.AnExportCarriesTheSentencepieceTokenizer); a model-specific class
// (LlamaTokenizer, which config.json's model_type would pick) converts it otherwise and encodes
// segtrain's unigram models differently. model_max_length: the length trained for, when known.
void write_sentencepiece_tokenizer(const fs::path& model_file, const fs::path& out, int64_t max_length) {
  write_file_atomic(out / "tokenizer.model", read_file(model_file, "sentencepiece tokenizer"));
  nlohmann::json config = {{"tokenizer_class", "TokenizersBackend"}};
  if (max_length > 0) config["model_max_length"] = max_length;
  write_file_atomic(out / "tokenizer_config.json", config.dump(2) + "\n");
  log::info("copied the sentencepiece tokenizer ", model_file.string(),
            " (tokenizer_config.json: TokenizersBackend, which transformers 5 builds with sentencepiece's ids)");
}

}  // namespace

std::optional<ModelTokenizer> model_tokenizer(const std::string& model_dir, std::string* unreadable) {
  const fs::path record = fs::path(model_dir) / "store_tokenizer.json";
  if (fs::is_regular_file(record)) {
    std::string store;
    ModelTokenizer m{data::identity_from_json(read_file(record, "store tokenizer record"), record.string(), &store),
                     "checkpoint '" + model_dir + "' (trained on store '" + store + "')", ""};
    m.tokenizer = m.identity.kind == "sentencepiece" ? (fs::path(store) / "tokenizer.model").string() : store;
    return m;
  }
  const std::string origin = tokenizer_origin(model_dir);
  if (origin.empty() || !fs::is_directory(origin)) return std::nullopt;
  std::optional<data::TokenizerIdentity> identity;
  try {
    identity = data::folder_tokenizer_identity(origin);
  } catch (const InputError& e) {  // a tokenizer segtrain cannot read (WordLevel, Unigram...): nothing to compare
    if (unreadable) *unreadable = e.what();
    return std::nullopt;
  }
  if (!identity) return std::nullopt;
  return ModelTokenizer{*identity, "HF folder '" + origin + "'", origin};
}

void check_store_tokenizer(const std::string& store_dir, const std::string& model_dir, const std::string& key,
                           const std::string& override_hint, bool allowed) {
  std::string unreadable;
  const auto model = model_tokenizer(model_dir, &unreadable);
  if (!model) {
    log::warn("the model '", model_dir, "' ",
              unreadable.empty() ? "records no tokenizer (no store_tokenizer.json, no HF tokenizer files)"
                                 : "has a tokenizer segtrain cannot read (" + unreadable + ")",
              ": nothing checks that the store '", store_dir, "' was made with its tokenizer");
    return;
  }
  const auto store = data::store_tokenizer_identity(store_dir, model->identity.probe);
  if (!store) {
    log::warn(key, ": the store '", store_dir, "' records no tokenizer (made without --tokenizer): nothing checks ",
              "that it was made with the model's (", model->source, ")");
    return;
  }
  const std::string difference = data::identity_difference(*store, model->identity);
  if (difference.empty()) return;
  const std::string what = key + ": the store '" + store_dir + "' was made with another tokenizer than the model's (" +
                           difference + "; the model's: " + model->source + ")";
  if (allowed) {
    log::warn(what, "; going on as ", override_hint, " asks");
    return;
  }
  throw InputError(what + "; make a store with the model's tokenizer: segtrain prepare --input TEXT... --tokenizer " +
                   model->tokenizer + " --out STORE, or set " + override_hint + " if this is deliberate");
}

// Whether `dir` holds only what an export writes (its config.json with the "segtrain"
// record every export carries, weights, index and tokenizer files): a previous export,
// which --overwrite may replace. Otherwise the first entry that is not an export's.
std::optional<std::string> not_an_export(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && (name == "adapter_config.json" || name == "adapter_model.safetensors")) continue;
    const bool ours = entry.is_regular_file() &&
                      (name == "config.json" || name == "model.safetensors.index.json" ||
                       (name.rfind("model", 0) == 0 && entry.path().extension() == ".safetensors") ||
                       std::find(std::begin(kTokenizerFiles), std::end(kTokenizerFiles), name) != std::end(kTokenizerFiles));
    if (!ours) return name;
  }
  if (!fs::exists(dir / "config.json")) {  // a PEFT folder of --adapter: PEFT's own config says so
    try {
      const auto cfg = nlohmann::json::parse(read_file(dir / "adapter_config.json", "adapter config"));
      if (cfg.is_object() && cfg.value("peft_type", "") == "LORA" && fs::exists(dir / "adapter_model.safetensors"))
        return std::nullopt;
    } catch (const std::exception&) {
    }
    return "no config.json of segtrain export";
  }
  try {
    const auto cfg = nlohmann::json::parse(read_file(dir / "config.json", "config"));
    if (!cfg.is_object() || !cfg.contains("segtrain")) return "a config.json that segtrain export did not write";
  } catch (const std::exception&) {
    return "no config.json of segtrain export";
  }
  return std::nullopt;
}

// The export's target, checked before any work: see export_stored_model in the header.
void check_export_target(const fs::path& out, const std::vector<CommandInput>& sources, bool overwrite) {
  check_output_is_no_input(out, "--out", sources);
  // The export is built beside `out` and renamed in: its folder must take new entries.
  check_can_create(out, "--out");
  if (!fs::exists(fs::symlink_status(out))) return;
  if (!fs::is_directory(out))
    throw InputError("--out: '" + out.string() + "' is a file; export writes a folder: choose another path");
  if (fs::is_empty(out)) return;
  if (const auto foreign = not_an_export(out))
    throw InputError("--out: '" + out.string() + "' is not empty and is not a previous export (it holds " + *foreign +
                     "); export never replaces what it did not write: choose a new or empty folder");
  if (!overwrite)
    throw InputError("--out: '" + out.string() + "' holds a previous export; add --overwrite to replace it");
}

void export_stored_model(const std::string& path, const std::vector<std::string>& overrides,
                         const ExportRequest& request) {
  models::HfExportOptions options;
  if (request.dtype == "bfloat16") options.dtype = at::kBFloat16;
  else if (request.dtype != "float32")
    throw InputError("--dtype: expected float32 or bfloat16, got '" + request.dtype + "'");
  const auto shard = parse_byte_size(request.max_shard_size);
  if (!shard)
    throw InputError("--max-shard-size: expected a positive size such as 5GB, 500MB, 2GiB or bytes, got '" +
                     request.max_shard_size + "'");
  options.max_shard_bytes = *shard;
  const std::string& out = request.out;
  const DirectoryLock out_lock = DirectoryLock::hold_enclosing(out, "--out", "segtrain export");
  const StoredModel stored = open_stored_model(path, overrides);
  const std::string given = model_ref_dir(path).empty() ? path : model_ref_dir(path);  // hf:DIR or a plain path
  std::vector<CommandInput> sources = {{given, "--model"}};
  for (const auto& input : stored.inputs) sources.push_back(input);
  check_export_target(out, sources, request.overwrite);
  const auto& c = stored.config;
  const std::string origin = tokenizer_origin(stored.dir);
  if (!origin.empty() && !fs::is_directory(origin))
    log::warn("the model's HF origin ", origin, " is gone: its tokenizer files are not copied to the export");
  options.trained_length = trained_length(stored.dir);
  if (request.adapter) {
    if (!overrides.empty())
      throw InputError("--set: applies to the merged model's export; a PEFT adapter holds no extension (its base's "
                       "config.json does)");
    AtomicDir staged(out);
    export_run_lora_adapter(stored, staged.path(), origin, options.dtype);
    staged.commit();
    log::info("exported the LoRA adapter of ", path, " as a PEFT folder to ", out,
              origin.empty() ? "" : " (its base: " + origin + ")");
    return;
  }
  // Built beside `out` and renamed in: a full disk or a kill never leaves half an export.
  AtomicDir staged(out);
  const auto exported = models::export_hf(models::load_model(stored.dir, c), staged.path().string(), options);
  if (fs::is_directory(origin)) copy_tokenizer_files(origin, staged.path());
  // A model trained from scratch on a sentencepiece store: that store's model, as transformers reads it.
  if (origin.empty())
    if (const auto m = model_tokenizer(stored.dir, nullptr); m && m->identity.kind == "sentencepiece") {
      if (fs::is_regular_file(m->tokenizer))
        write_sentencepiece_tokenizer(m->tokenizer, staged.path(), options.trained_length);
      else
        log::warn("the model's tokenizer ", m->tokenizer, " is gone: the export has no tokenizer");
    }
  staged.commit();
  log::info("exported ", path, " (", enum_name(models::kArchs, c.arch), ", extension ",
            enum_name(models::kExtensionMethods, c.extension.method), ") to ", out);
  if (!exported.transformers_reproduces) log::warn("transformers will not reproduce this model: ", exported.note);
}

}  // namespace segtrain::trainer
