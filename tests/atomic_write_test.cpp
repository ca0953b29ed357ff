#include <gtest/gtest.h>

#include "test_util.h"
#include "common/atomic_write.h"

namespace segtrain {
namespace {

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(AtomicDir, NothingAppearsUntilCommitAndAbandonedWritesVanish) {
  test::TempDir dir;
  const fs::path final_path = dir.path() / "step-10";
  {
    AtomicDir writing(final_path);
    test::write_file(writing.path() / "model.safetensors", "partial");
    EXPECT_FALSE(fs::exists(final_path));
    EXPECT_TRUE(is_incomplete_write(writing.path()));
  }  // destroyed without commit, as when an exception unwinds
  EXPECT_TRUE(names_in(dir.path()).empty());

  AtomicDir writing(final_path);
  test::write_file(writing.path() / "a.json", "1");
  writing.commit();
  EXPECT_EQ(test::read_file(final_path / "a.json"), "1");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"step-10"});
}

TEST(AtomicDir, CommitReplacesAnExistingDirectoryWhole) {
  test::TempDir dir;
  const fs::path final_path = dir.path() / "final";
  test::write_file(final_path / "old.txt", "old");
  AtomicDir writing(final_path);
  test::write_file(writing.path() / "new.txt", "new");
  writing.commit();
  EXPECT_EQ(names_in(final_path), std::vector<std::string>{"new.txt"});
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"final"});
}

TEST(AtomicFile, ReplacesContentsWithoutLeavingTemporaries) {
  test::TempDir dir;
  write_file_atomic(dir.path() / "state.json", "{\"step\": 1}");
  write_file_atomic(dir.path() / "state.json", "{\"step\": 2}");
  EXPECT_EQ(test::read_file(dir.path() / "state.json"), "{\"step\": 2}");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"state.json"});
}

}  // namespace
}  // namespace segtrain
