// Replays every seed (tests/fuzz/corpus/<target>/) and every input a fuzzer
// once crashed on (tests/fuzz/regressions/<target>/) through the same target
// code as `make fuzz`, in the normal build (no clang, no sanitizers): each must
// end in success or a clean InputError.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>

#include "tests/fuzz/fuzz_target.h"

namespace segtrain::fuzz {
namespace {

std::vector<fs::path> inputs_of(const std::string& target) {
  std::vector<fs::path> files;
  for (const char* kind : {"corpus", "regressions"}) {
    const fs::path dir = source_dir() / kind / target;
    if (!fs::is_directory(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().filename() != "README.md") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string bytes_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class Replay : public ::testing::TestWithParam<std::string> {};

TEST_P(Replay, EveryInputEndsInSuccessOrInputError) {
  const Body body = [&] {
    for (const auto& [name, b] : targets())
      if (name == GetParam()) return b;
    return Body{nullptr};
  }();
  ASSERT_NE(body, nullptr);
  const auto files = inputs_of(GetParam());
  EXPECT_FALSE(files.empty()) << "no seeds in tests/fuzz/corpus/" << GetParam();
  for (const auto& file : files) {
    const std::string input = bytes_of(file);
    try {
      body(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    } catch (const InputError&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << file << ": uncaught " << typeid(e).name() << ": " << e.what();
    }
  }
}

std::vector<std::string> target_names() {
  std::vector<std::string> names;
  for (const auto& [name, body] : targets()) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Fuzz, Replay, ::testing::ValuesIn(target_names()),
                         [](const auto& info) { return info.param; });

// Every corpus or regression folder belongs to a target (a renamed target
// would otherwise silently stop replaying its inputs).
TEST(Replay, EveryInputFolderHasATarget) {
  const auto names = target_names();
  for (const char* kind : {"corpus", "regressions"}) {
    if (!fs::is_directory(source_dir() / kind)) continue;
    for (const auto& e : fs::directory_iterator(source_dir() / kind)) {
      if (!e.is_directory()) continue;
      EXPECT_TRUE(std::binary_search(names.begin(), names.end(), e.path().filename().string()))
          << e.path() << " has no fuzz target";
    }
  }
}

}  // namespace
}  // namespace segtrain::fuzz
