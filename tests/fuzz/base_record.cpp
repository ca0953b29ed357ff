// base.json (models/spec/base_record.h) through base_record_from_json: the record a run converted
// from a base keeps. Parsing only: checking the record reads the base's files, which a fuzzed
// folder name could point anywhere.
#include <string>

#include "models/spec/base_record.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(base_record) {
  (void)models::base_record_from_json(std::string(fuzz::as_text(data, size)), "base.json");
}
