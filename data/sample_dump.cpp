#include "data/sample_dump.h"

#include <nlohmann/json.hpp>

#include "common/atomic_write.h"
#include "common/log.h"
#include "data/loader.h"

namespace segtrain::data {

void write_sample_dump(const TokenStore& store, const DataConfig& config, const SampleDumpOptions& options) {
  LoaderOptions lo;
  lo.seed = options.seed;
  lo.split = options.split;
  lo.micro_batch_size = 1;
  lo.threads = 0;
  Loader loader(store, config, lo);
  const char* split = options.split == Split::train ? "train" : "valid";
  log::info("sample: ", split, " split: ", describe(loader.windows().stats, config.extended_length));
  std::string out;
  const int64_t n = loader.samples_per_epoch();
  for (int64_t i = 0; i < options.count; ++i) {
    const Sample s = loader.sample(i / n, i % n);
    const nlohmann::ordered_json line = {{"doc", s.doc},         {"window_start", s.window_start},
                                         {"tokens", s.tokens},   {"offsets", s.offsets},
                                         {"positions", s.positions}, {"targets", s.targets},
                                         {"loss_mask", s.loss_mask}};
    out += line.dump() + "\n";
  }
  write_file_atomic(options.out, out);
  log::info("sample: wrote ", options.count, " samples of ", loader.sample_length(), " tokens to ", options.out);
}

}  // namespace segtrain::data
