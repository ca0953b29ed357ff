#include "trainer/eval/stored_model.h"

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/log.h"
#include "models/hf.h"
#include "models/model_io.h"
#include "models/positions.h"
#include "trainer/config/model_values.h"

namespace segtrain::trainer {

StoredModel open_stored_model(const std::string& path, const std::vector<std::string>& overrides,
                              std::optional<int64_t> target_length) {
  StoredModel m;
  if (!models::detect_model_format(path, &m.dir))
    throw InputError("--model: '" + path + "' is not a model directory: neither a segtrain checkpoint/run " +
                     "(model_config.json) nor an HF folder (config.json)");
  m.config = apply_model_overrides(models::read_model_config(m.dir), overrides, target_length);
  return m;
}

void check_store_fits(const StoredModel& model, int64_t store_vocab_size, const std::string& store_name) {
  const int64_t vocab = models::vocab_size_of(model.config);
  if (store_vocab_size > vocab)
    throw InputError(store_name + ": the store's vocabulary (" + std::to_string(store_vocab_size) +
                     ") is larger than the model's (" + std::to_string(vocab) + ", " + model.dir + ")");
}

void export_stored_model(const std::string& path, const std::vector<std::string>& overrides, const std::string& out) {
  const StoredModel stored = open_stored_model(path, overrides);
  const auto& c = stored.config;
  // Built beside `out` and renamed in: a full disk or a kill never leaves half an export.
  AtomicDir staged(out);
  models::export_hf(models::load_model(stored.dir, c), staged.path().string());
  staged.commit();
  log::info("exported ", path, " (", enum_name(models::kArchs, c.arch), ", extension ",
            enum_name(models::kExtensionMethods, c.extension.method), ") to ", out);
  if (c.arch == models::Arch::bloom && c.extension.method != models::ExtensionMethod::none)
    log::warn("transformers' BLOOM cannot reproduce ALiBi extension ",
              enum_name(models::kExtensionMethods, c.extension.method),
              "; config.json records it under \"segtrain\" and segtrain applies it on load");
}

}  // namespace segtrain::trainer
