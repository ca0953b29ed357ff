// One writer per run directory (common/dir_lock.h): the lock is refused while
// another process holds it, naming that process; the OS releases it when the
// holder dies; one process may hold its own directory twice.
#include "common/dir_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "test_util.h"

namespace segtrain {
namespace {

namespace fs = std::filesystem;

std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// A child process that holds `dir`'s lock until killed; returns once it holds it.
pid_t hold_in_child(const fs::path& dir) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    try {
      const DirectoryLock lock = DirectoryLock::hold(dir, "run.output_dir", "test holder");
      [[maybe_unused]] const ssize_t n = ::write(ready[1], "1", 1);
      for (;;) ::pause();
    } catch (...) {
      ::_exit(3);
    }
  }
  ::close(ready[1]);
  char byte = 0;
  const ssize_t n = ::read(ready[0], &byte, 1);
  ::close(ready[0]);
  return n == 1 ? pid : -1;
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

TEST(DirectoryLock, ASecondHolderIsRefusedNamingTheFirstUntilItDies) {
  test::TempDir tmp;
  const fs::path run = tmp.path() / "run";
  const pid_t holder = hold_in_child(run);
  ASSERT_GT(holder, 0);
  const std::string pid = std::to_string(holder);

  const std::string refused =
      test::input_error_of([&] { DirectoryLock::hold(run, "run.output_dir", "segtrain train"); });
  EXPECT_EQ(refused.rfind("run.output_dir: '" + run.string() + "' is in use by test holder (pid " + pid +
                              " on host " + this_host() + ", since ",
                          0),
            0u)
      << refused;
  EXPECT_NE(refused.find("kill -TERM " + pid + " on " + this_host()), std::string::npos) << refused;

  // Writing into the run's folder (an eval's --out, an export) is refused too, naming the run directory.
  const fs::path inside = run / "evals" / "eval.json";
  const std::string enclosing =
      test::input_error_of([&] { DirectoryLock::hold_enclosing(inside, "--out", "segtrain eval"); });
  EXPECT_EQ(enclosing.rfind("--out: '" + inside.string() + "' is inside the run directory '" +
                                fs::weakly_canonical(run).string() + "', which is in use by test holder (pid " + pid,
                            0),
            0u)
      << enclosing;

  // The OS drops a dead holder's lock: a killed run never blocks its own resume.
  kill_and_reap(holder);
  const DirectoryLock mine = DirectoryLock::hold(run, "run.output_dir", "segtrain train");
  EXPECT_TRUE(mine.held());
  EXPECT_TRUE(mine.warning().empty()) << mine.warning();
  EXPECT_TRUE(DirectoryLock::hold_enclosing(inside, "--out", "segtrain eval").held());
}

TEST(DirectoryLock, OneProcessHoldsItsOwnDirectoryAgainAndReleasesItAfterTheLast) {
  test::TempDir tmp;
  const fs::path grid = tmp.path() / "grid";
  {
    const DirectoryLock outer = DirectoryLock::hold(grid, "experiment.output_dir", "segtrain experiment");
    {
      // A grid's row (in-process) writing into the grid's folder.
      const DirectoryLock inner = DirectoryLock::hold_enclosing(grid / "row" / "x", "run.output_dir", "row");
      EXPECT_TRUE(inner.held());
    }
    // Still held after the inner one ends: another process is refused.
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        DirectoryLock::hold(grid, "experiment.output_dir", "other");
        ::_exit(0);
      } catch (const InputError&) {
        ::_exit(2);
      }
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_EQ(WEXITSTATUS(status), 2);
  }
  // Released after the last holder: a child takes it.
  const pid_t taker = hold_in_child(grid);
  EXPECT_GT(taker, 0);
  if (taker > 0) kill_and_reap(taker);
}

TEST(DirectoryLock, APathInNoRunDirectoryNeedsNoLock) {
  test::TempDir tmp;
  EXPECT_FALSE(DirectoryLock::hold_enclosing(tmp.path() / "a" / "eval.json", "--out", "segtrain eval").held());
  EXPECT_FALSE(fs::exists(tmp.path() / "a"));  // nothing created for it
}

}  // namespace
}  // namespace segtrain
