#include <iostream>

#include "common/log.h"
#include "trainer/commands.h"
#include "trainer/config.h"

namespace segtrain::trainer {

int cmd_config_check(const ConfigCheckOptions& options) {
  LoadedConfig loaded = load_config(options.file, options.overrides);
  std::cout << to_yaml(loaded.config);
  log::info(options.file, ": OK");
  return 0;
}

int cmd_config_reference() {
  std::cout << reference_markdown();
  return 0;
}

}  // namespace segtrain::trainer
