// Rank-aware logging: rank 0 (or every rank when asked) on the console, each rank
// in its own file when given one, levels filtered.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/log.h"
#include "test_util.h"

namespace segtrain {
namespace {

std::string console_of(const log::Options& options, const std::string& message) {
  testing::internal::CaptureStderr();
  log::init(options);
  log::info(message);
  log::warn(message, " (warn)");
  log::flush();
  std::string err = testing::internal::GetCapturedStderr();
  log::init(log::Options{});
  return err;
}

TEST(Log, OnlyRankZeroPrintsToTheConsoleByDefault) {
  log::Options rank0;
  EXPECT_NE(console_of(rank0, "hello from 0").find("hello from 0"), std::string::npos);
  log::Options rank1;
  rank1.rank = 1;
  EXPECT_EQ(console_of(rank1, "hello from 1").find("hello from 1"), std::string::npos);
  rank1.console_all_ranks = true;
  const std::string all = console_of(rank1, "hello from 1");
  EXPECT_NE(all.find("[rank 1] hello from 1"), std::string::npos) << all;
}

TEST(Log, LevelsFilterAndFilesAreAppendedPerRank) {
  test::TempDir dir;
  for (int rank : {0, 1}) {
    log::Options options;
    options.level = log::Level::warn;
    options.rank = rank;
    options.file = dir / ("rank-" + std::to_string(rank) + ".log");
    testing::internal::CaptureStderr();
    log::init(options);
    log::info("quiet ", rank);
    log::warn("loud ", rank);
    log::flush();
    testing::internal::GetCapturedStderr();
  }
  log::init(log::Options{});
  for (int rank : {0, 1}) {
    const std::string text = test::read_file(dir / ("rank-" + std::to_string(rank) + ".log"));
    EXPECT_NE(text.find("[warning] [rank " + std::to_string(rank) + "] loud " + std::to_string(rank)), std::string::npos)
        << text;
    EXPECT_EQ(text.find("quiet"), std::string::npos) << text;
    EXPECT_TRUE(std::regex_search(text, std::regex(R"(^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\])")))
        << "no timestamp: " << text;
  }
}

TEST(Log, LevelNamesParseAndUnknownOnesAreInputErrors) {
  EXPECT_EQ(log::parse_level("debug", "run.log_level"), log::Level::debug);
  EXPECT_STREQ(log::level_name(log::Level::warn), "warn");
  try {
    log::parse_level("loud", "--log-level");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--log-level: unknown log level 'loud'"), std::string::npos);
  }
}

}  // namespace
}  // namespace segtrain
