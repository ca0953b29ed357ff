#pragma once
// The transformers-made references all model tests share. ctest runs every test
// in its own process, so the folder is made once per script version under a lock.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace segtrain::test {

// python_path: a folder put first on PYTHONPATH (another transformers), or empty;
// script: the reference script (hf_reference.py, or peft_reference.py).
inline std::string python_command(const std::string& args, const std::string& python_path = "",
                                  const std::string& script = HF_REFERENCE_SCRIPT) {
  return "env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error " +
         (python_path.empty() ? std::string() : "PYTHONPATH=" + shell_quote(python_path) + " ") +
         shell_quote(SEGTRAIN_PYTHON) + " " + shell_quote(script) + " " + args;
}

inline std::string reference_dir() {
  const std::string script = read_file(HF_REFERENCE_SCRIPT);
  const std::string dir = std::string(HF_REFERENCE_DIR) + "-" + std::to_string(std::hash<std::string>{}(script));
  const std::string stamp = dir + "/done";
  if (!fs::exists(stamp)) {
    const std::string cmd = "flock " + shell_quote(std::string(HF_REFERENCE_DIR) + ".lock") + " sh -c " +
                            shell_quote("test -f " + shell_quote(stamp) + " || (" +
                                        python_command("make " + shell_quote(dir)) + " >/dev/null 2>&1 && touch " +
                                        shell_quote(stamp) + ")");
    if (std::system(cmd.c_str()) != 0 || !fs::exists(stamp))
      throw std::runtime_error("could not create the transformers references: " + cmd);
  }
  return dir;
}

// Runs transformers on DIR/input.safetensors of each folder (one Python start);
// each folder gets hf_logits.safetensors and transformers_version.
inline void hf_logits(const std::vector<std::string>& dirs, const std::string& python_path = "") {
  std::string args = "logits";
  for (const auto& d : dirs) args += " " + shell_quote(d);
  const std::string cmd = python_command(args, python_path) + " >/dev/null 2>" + shell_quote(dirs.front() + "/python.err");
  if (std::system(cmd.c_str()) != 0)
    throw std::runtime_error("transformers failed to load an export: " + read_file(dirs.front() + "/python.err"));
}

inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace segtrain::test
