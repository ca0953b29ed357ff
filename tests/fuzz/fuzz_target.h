#pragma once
// One fuzz target per reader of outside input (tests/fuzz/README.md). A target is
//
//   SEGTRAIN_FUZZ_TARGET(name) { ...hand data/size to the real reader... }
//
// and is compiled twice:
//  * in the fuzz build (SEGTRAIN_FUZZ, clang) as libFuzzer's LLVMFuzzerTestOneInput,
//    where InputError is the documented refusal and every other exception aborts,
//    so libFuzzer keeps the input as a crash (as it does for ASan/UBSan reports);
//  * in the normal build (SEGTRAIN_FUZZ_REPLAY) as a function registered under its
//    name, which replay_test.cpp runs on every seed and regression input.
// Readers that take a path get the input written to a file in this process's
// scratch directory; no target parses anything itself.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "common/error.h"

namespace segtrain::fuzz {

namespace fs = std::filesystem;

using Body = void (*)(const uint8_t* data, size_t size);

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// This process's scratch directory (under $TMPDIR), removed at exit.
inline const fs::path& scratch_dir() {
  static const fs::path dir = [] {
    std::string pattern = (fs::temp_directory_path() / "segtrain-fuzz-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) {
      std::perror("segtrain fuzz: mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(scratch_dir(), ec);
    });
    return fs::path(pattern);
  }();
  return dir;
}

// Replaces `path` (creating its folder) with exactly these bytes.
inline void write_file(const fs::path& path, std::string_view bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "segtrain fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

// The text before the first NUL, and the NUL-separated parts after it (the
// `--set key=value` arguments of the config targets). YAML text has no NULs.
inline std::pair<std::string, std::vector<std::string>> split_nul(std::string_view input) {
  const auto nul = input.find('\0');
  std::pair<std::string, std::vector<std::string>> out{std::string(input.substr(0, nul)), {}};
  if (nul == std::string_view::npos) return out;
  for (std::string_view rest = input.substr(nul + 1);;) {
    const auto next = rest.find('\0');
    out.second.emplace_back(rest.substr(0, next));
    if (next == std::string_view::npos) break;
    rest = rest.substr(next + 1);
  }
  return out;
}

// Where the seed corpora and regression inputs live (tests/fuzz in the source tree): compiled into
// fuzz_paths.cpp alone, so that no target's own units name the checkout (ccache, as tests/test_paths.h).
extern const char* const kFuzzSourceDir;
inline fs::path source_dir() { return kFuzzSourceDir; }

// Runs one input: returns on success or InputError; anything else is a finding.
inline void run_one(Body body, const uint8_t* data, size_t size) {
  try {
    body(data, size);
  } catch (const InputError&) {
    // the documented refusal of bad input
  } catch (const std::exception& e) {
    std::fprintf(stderr, "segtrain fuzz: finding: uncaught %s: %s\n", typeid(e).name(), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "segtrain fuzz: finding: uncaught exception of unknown type\n");
    std::abort();
  }
}

// A documented property that does not hold (a finding, like a crash).
[[noreturn]] inline void violated(const std::string& what) {
  throw std::logic_error("property violated: " + what);
}

#ifdef SEGTRAIN_FUZZ_REPLAY
inline std::vector<std::pair<std::string, Body>>& targets() {
  static std::vector<std::pair<std::string, Body>> all;
  return all;
}
inline bool register_target(const char* name, Body body) {
  targets().emplace_back(name, body);
  return true;
}
#define SEGTRAIN_FUZZ_TARGET(name)                                                                      \
  static void segtrain_fuzz_##name(const uint8_t* data, size_t size);                                   \
  [[maybe_unused]] static const bool segtrain_fuzz_registered_##name =                                  \
      ::segtrain::fuzz::register_target(#name, segtrain_fuzz_##name);                                   \
  static void segtrain_fuzz_##name(const uint8_t* data, size_t size)
#else
#define SEGTRAIN_FUZZ_TARGET(name)                                                                      \
  static void segtrain_fuzz_##name(const uint8_t* data, size_t size);                                   \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {                             \
    ::segtrain::fuzz::run_one(segtrain_fuzz_##name, data, size);                                        \
    return 0;                                                                                            \
  }                                                                                                      \
  static void segtrain_fuzz_##name(const uint8_t* data, size_t size)
#endif

}  // namespace segtrain::fuzz
