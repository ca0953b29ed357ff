#pragma once
// Helpers shared by the test suites: temporary directories, files, and running
// the real `segtrain` binary the way a user does.
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace segtrain::test {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("segtrain-test-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

struct RunResult {
  int exit_code = -1;
  bool signaled = false;  // died from a signal (a crash) or hit the timeout
  std::string out;
  std::string err;
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `program args...` under a timeout so a hang fails the test instead of CI.
inline RunResult run(const std::string& program, const std::vector<std::string>& args, int timeout_s = 120) {
  TempDir io;
  std::string command = "timeout -s KILL " + std::to_string(timeout_s) + " " + shell_quote(program);
  for (const auto& a : args) command += " " + shell_quote(a);
  command += " >" + shell_quote(io / "out") + " 2>" + shell_quote(io / "err") + " </dev/null";
  int status = std::system(command.c_str());
  RunResult result;
  result.out = read_file(io / "out");
  result.err = read_file(io / "err");
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
    // timeout(1) reports a killed child as 137; the shell reports signals as 128+n.
    result.signaled = result.exit_code == 137 || (result.exit_code > 128 && result.exit_code != 130 &&
                                                   result.exit_code != 143);
  } else {
    result.signaled = true;
  }
  return result;
}

// The smallest directory that config validation accepts as a token store.
inline void make_store_stub(const fs::path& dir) {
  write_file(dir / "meta.json", "{\"vocab_size\": 64}\n");
}

}  // namespace segtrain::test
