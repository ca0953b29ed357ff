#include "trainer/train/rank_failure.h"

#include <algorithm>
#include <stdexcept>

#include "trainer/train/rendezvous.h"

namespace segtrain::trainer {

std::string failure_message(const std::exception& e) { return rendezvous::message_of(e); }

void throw_if_a_rank_failed(const RankFailure& own, int64_t rank, const std::vector<double>& all,
                            const std::string& what) {
  if (own.failed) {
    const std::string said = "rank " + std::to_string(rank) + ": " + own.message;
    if (own.input) throw InputError(said);
    throw std::runtime_error(said);
  }
  // Every rank exits as the failed one does (a launcher takes the first exit code it sees): bad
  // input first, since any rank's is the run's.
  const auto bad_input = std::find(all.begin(), all.end(), RankFailure::kBadInput);
  const auto failed =
      bad_input != all.end() ? bad_input : std::find_if(all.begin(), all.end(), [](double v) { return v < 0; });
  if (failed == all.end()) return;
  const std::string said = what + ": rank " + std::to_string(failed - all.begin()) + " stopped (its log says why)";
  if (failed == bad_input) throw InputError(said);
  throw std::runtime_error(said);
}

}  // namespace segtrain::trainer
