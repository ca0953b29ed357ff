#include "trainer/eval/adapter_export.h"

#include <sstream>

#include "common/error.h"
#include "common/file_io.h"
#include "common/log.h"
#include "models/modules/converters/converter.h"
#include "models/modules/converters/lora.h"
#include "models/modules/peft_adapter.h"
#include "models/modules/safetensors.h"
#include "models/modules/weight_init.h"
#include "models/spec/base_record.h"

namespace segtrain::trainer {

namespace {

namespace fs = std::filesystem;

std::string shape_text(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// The base base.json names, checked by what a look at its folder costs (each file there, of its
// recorded size): a warning when not, since the adapter is exported as trained either way.
void say_a_changed_base(const std::string& dir) {
  const fs::path record = fs::path(dir) / models::kBaseFile;
  if (!fs::is_regular_file(record)) return;
  const models::BaseRecord base = models::base_record_from_json(read_file(record, "base record"), record.string());
  for (const auto& f : base.files) {
    const fs::path file = fs::path(base.folder) / f.name;
    std::error_code ec;
    const auto bytes = fs::file_size(file, ec);
    if (ec || static_cast<int64_t>(bytes) != f.bytes) {
      log::warn(record.string(), ": the base these adapters trained on, ", base.folder, ", has ",
                ec ? "no " + f.name : f.name + " of " + std::to_string(bytes) + " bytes (recorded " +
                                           std::to_string(f.bytes) + ")",
                " now: the adapters are exported as trained, but they apply to that base as it was");
      return;
    }
  }
}

}  // namespace

void export_run_lora_adapter(const StoredModel& stored, const fs::path& out, const std::string& origin,
                             at::ScalarType dtype) {
  const models::Converters converters = models::read_converters(stored.dir);
  const models::LoraConfig* lora = models::lora_settings(converters);
  if (!lora)
    throw InputError("--adapter: " + stored.dir + " was not trained with LoRA adapters (model.adapters.lora); "
                     "export it without --adapter");
  say_a_changed_base(stored.dir);
  // The model's shape alone: its pages are allocated, never written (nor read back), but for the
  // parameters that train, which the run's file fills below.
  models::TransformerLM model = [&] {
    const models::SkipWeightInit skip;
    models::TransformerLM built(stored.config);
    models::apply_converters(converters, built);
    return built;
  }();
  // The run's file, each tensor read when its parameter is filled: a converted run's holds what
  // trained alone; one trained without a base, every weight (only what trained is read).
  const models::TensorSources saved = models::open_safetensors_dir(stored.dir);
  const std::string file = (fs::path(stored.dir) / "model.safetensors").string();
  at::NoGradGuard no_grad;
  for (auto& [name, p] : models::trainable_parameters(model)) {
    const auto source = saved.find(name);
    if (source == saved.end())
      throw InputError(file + ": holds no " + name + ", a parameter its converters.json trains");
    const at::Tensor value = source->second();
    if (value.sizes() != p.sizes())
      throw InputError(file + ": tensor " + name + " has shape " + shape_text(value) + ", the model's " +
                       shape_text(p));
    p.copy_(value);
  }
  models::export_peft_adapter(model, *lora, out.string(), {origin, dtype});
}

}  // namespace segtrain::trainer
