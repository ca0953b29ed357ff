#include "common/error.h"
#include "common/log.h"
#include "models/hf.h"
#include "models/model_io.h"
#include "trainer/commands.h"
#include "trainer/model_overrides.h"

namespace segtrain::trainer {

int cmd_export(const ExportOptions& o) {
  const auto config = apply_model_overrides(models::read_model_config(o.model), o.overrides);
  auto model = models::load_model(o.model, config);
  models::export_hf(model, o.out);
  log::info("exported ", o.model, " (", enum_name(models::kArchs, config.arch), ", extension ",
            enum_name(models::kExtensionMethods, config.extension.method), ") to ", o.out);
  if (config.arch == models::Arch::bloom && config.extension.method != models::ExtensionMethod::none)
    log::warn("transformers' BLOOM cannot reproduce ALiBi extension ", enum_name(models::kExtensionMethods,
              config.extension.method), "; config.json records it under \"segtrain\" and segtrain applies it on load");
  return 0;
}

}  // namespace segtrain::trainer
