#include "trainer/experiment/more_windows.h"

namespace segtrain::trainer {

bool adds_windows(const nlohmann::json& recorded, const nlohmann::json& here) {
  if (!recorded.is_object() || !here.is_object()) return false;
  const auto before = recorded.find("max_sequences"), now = here.find("max_sequences");
  if (before == recorded.end() || now == here.end() || !before->is_number_integer() || !now->is_number_integer())
    return false;
  const int64_t took = before->get<int64_t>(), asks = now->get<int64_t>();
  if (took <= 0 || (asks != 0 && asks <= took)) return false;
  return with_max_sequences(recorded, 0) == with_max_sequences(here, 0);
}

nlohmann::json with_max_sequences(nlohmann::json settings, int64_t count) {
  settings["max_sequences"] = count;
  return settings;
}

}  // namespace segtrain::trainer
