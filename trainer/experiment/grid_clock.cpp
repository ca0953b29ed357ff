// The grid's wall time across invocations (experiment/grid_clock.h).
#include "trainer/experiment/grid_clock.h"

#include <nlohmann/json.hpp>

#include <exception>

#include "common/atomic_write.h"
#include "common/file_io.h"
#include "common/log.h"

namespace segtrain::trainer {

GridClock::GridClock(const fs::path& file, GridTime imported)
    : file_(file), started_(std::chrono::steady_clock::now()), before_(imported) {
  if (!fs::exists(file_)) return;
  try {
    const auto j = nlohmann::json::parse(read_file(file_, "grid wall time"));
    before_ = {j.at("seconds").get<double>(), j.at("invocations").get<int64_t>()};
  } catch (const std::exception&) {
    log::warn("experiment: ", file_.string(), " is unreadable; the wall time starts again from this run");
  }
}

GridTime GridClock::now() const {
  return {before_.seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count(),
          before_.invocations + 1};
}

void GridClock::save() const {
  const GridTime t = now();
  write_file_atomic(file_, nlohmann::json{{"seconds", t.seconds}, {"invocations", t.invocations}}.dump() + "\n");
}

GridClock::~GridClock() {
  try {
    save();
  } catch (const std::exception&) {
  }
}

}  // namespace segtrain::trainer
