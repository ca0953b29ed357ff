#pragma once
// The fixture of the GPU suite's whole runs through the CLI (device_run_test.cpp, two_ranks_test.cpp).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "models/modules/safetensors.h"
#include "test_util.h"

namespace segtrain::test {

// ---------------------------------------------------------------------------
// Whole runs through the CLI, as a user runs them.

class DeviceRun : public SyntheticStoreSuite {
 protected:
  // A chunk-0.25 run of a tiny RoPE model at L_t = 32 from L_e = 128 windows.
  static std::string config(const std::string& name, const std::string& device, const std::string& extra = "") {
    return tiny_run_config(name, {.run_keys = ", device: " + device, .train_keys = extra, .eval_lengths = "[32, 128]"});
  }
  static std::vector<nlohmann::json> rows(const std::string& run) {
    std::vector<nlohmann::json> out;
    std::istringstream lines(read_file(std::filesystem::path(run) / "metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }
  // The most peak_gpu_mb (the caching allocator's peak) of a run's metrics rows; 0 without one.
  static double peak_gpu_mib(const std::string& run) {
    double most = 0;
    for (const auto& row : rows(run_dir(run)))
      if (row.contains("peak_gpu_mb")) most = std::max(most, row["peak_gpu_mb"].get<double>());
    return most;
  }
  static nlohmann::json state_of(const std::string& dir) {
    return nlohmann::json::parse(read_file(std::filesystem::path(dir) / "trainer_state.json"));
  }

  // ||a - b|| / ||b|| over every tensor of two safetensors files, and the largest |a - b|.
  static std::pair<double, double> weight_difference(const std::string& a, const std::string& b) {
    const auto x = models::read_safetensors(a), y = models::read_safetensors(b);
    if (x.size() != y.size()) return {1e9, 1e9};
    double diff = 0, norm = 0, most = 0;
    for (const auto& [name, t] : x) {
      if (!y.count(name)) return {1e9, 1e9};
      const at::Tensor d = (t.to(at::kDouble) - y.at(name).to(at::kDouble));
      diff += d.pow(2).sum().item<double>();
      norm += y.at(name).to(at::kDouble).pow(2).sum().item<double>();
      most = std::max(most, d.abs().max().item<double>());
    }
    return {std::sqrt(diff / std::max(norm, 1e-30)), most};
  }
};

}  // namespace segtrain::test
