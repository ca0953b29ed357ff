#include "trainer/commands.h"
#include "trainer/config.h"
#include "trainer/train.h"

namespace segtrain::trainer {

int cmd_train(const TrainOptions& options) {
  const LoadedConfig loaded = load_config(options.config, options.overrides);
  return run_training(loaded, options.resume);
}

}  // namespace segtrain::trainer
