// `segtrain sample`: the first samples of the configured training stream, as
// DESIGN.md JSON lines, so what the model will see can be inspected.
#include <nlohmann/json.hpp>

#include "common/atomic_write.h"
#include "common/log.h"
#include "data/loader.h"
#include "trainer/commands.h"
#include "trainer/config.h"

namespace segtrain::trainer {

int cmd_sample(const SampleOptions& options) {
  const auto loaded = load_config(options.config, options.overrides);
  const auto& c = loaded.config;
  const auto store = data::TokenStore::open(c.data.store);
  data::LoaderOptions lo;
  lo.seed = static_cast<uint64_t>(c.run.seed);
  lo.split = data::parse_split(options.split);
  lo.micro_batch_size = 1;
  lo.threads = 0;
  data::Loader loader(store, c.data, lo);
  log::info("sample: ", options.split, " split: ", data::describe(loader.windows().stats, c.data.extended_length));
  std::string out;
  const int64_t n = loader.samples_per_epoch();
  for (int64_t i = 0; i < options.count; ++i) {
    const auto s = loader.sample(i / n, i % n);
    nlohmann::ordered_json j;
    j["doc"] = s.doc;
    j["window_start"] = s.window_start;
    j["tokens"] = s.tokens;
    j["offsets"] = s.offsets;
    j["positions"] = s.positions;
    j["targets"] = s.targets;
    j["loss_mask"] = s.loss_mask;
    out += j.dump() + "\n";
  }
  write_file_atomic(options.out, out);
  log::info("sample: wrote ", options.count, " samples of ", loader.sample_length(), " tokens to ", options.out);
  return 0;
}

}  // namespace segtrain::trainer
