#pragma once
// A failure of one rank's part of work that every rank must finish together (the autos' measuring
// passes, trainer_batch_size.cpp): kept until the ranks have agreed, so that none waits in the
// agreement for a rank that gave up, then thrown on every rank as what it was (bad input exits 2,
// the rest 1). Not covered: an error that breaks the device's context (an illegal memory access),
// after which the agreement's own collective cannot run on that rank; the launcher's timeout ends it.
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "common/error.h"

namespace segtrain::trainer {

struct RankFailure {
  bool failed = false;
  bool input = false;   // an InputError: exit 2
  std::string message;  // one line (a c10::Error's without its C++ backtrace)

  // What this rank sends into the agreement in place of a choice (choices are >= 0).
  static constexpr double kFailed = -1.0;
  static constexpr double kBadInput = -2.0;
  double code() const { return input ? kBadInput : kFailed; }
};

// The message of `e` on one line, as the agreement says it.
std::string failure_message(const std::exception& e);

// Runs `work`; on one rank (no group) its exception goes on as it is, among ranks it is kept.
template <typename Work>
RankFailure kept_failure(bool grouped, Work&& work) {
  try {
    work();
  } catch (const InputError& e) {
    if (!grouped) throw;
    return {true, true, e.what()};
  } catch (const std::exception& e) {
    if (!grouped) throw;
    return {true, false, failure_message(e)};
  }
  return {};
}

// After the agreement (`all`: every rank's choice or failure code): this rank's own failure as it was,
// else another's, named ("`what`: rank 1 stopped (its log says why)"): the first rank's with bad input,
// as bad input, else the first failed rank's. Returns when no rank failed.
void throw_if_a_rank_failed(const RankFailure& own, int64_t rank, const std::vector<double>& all,
                            const std::string& what);

}  // namespace segtrain::trainer
