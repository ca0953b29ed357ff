#include "trainer/train/random_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <c10/util/Exception.h>

#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log.h"

namespace segtrain::trainer {
namespace {

using nlohmann::json;

constexpr int64_t kCudaStateBytes = 16;

at::Tensor state_of(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_state(at::Generator generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

std::string hex_of(const at::Tensor& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const at::Tensor b = bytes.contiguous();
  const auto* p = b.data_ptr<uint8_t>();
  std::string out;
  out.reserve(static_cast<size_t>(b.numel()) * 2);
  for (int64_t i = 0; i < b.numel(); ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

// nullopt-like: an undefined tensor when `text` is not hex of whole bytes.
at::Tensor bytes_of(const std::string& text) {
  auto digit = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  if (text.empty() || text.size() % 2 != 0) return {};
  at::Tensor out = at::empty({static_cast<int64_t>(text.size() / 2)}, at::kByte);
  auto* p = out.data_ptr<uint8_t>();
  for (size_t i = 0; i < text.size(); i += 2) {
    const int hi = digit(text[i]), lo = digit(text[i + 1]);
    if (hi < 0 || lo < 0) return {};
    p[i / 2] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return out;
}

}  // namespace

GeneratorStates capture_generators(const c10::Device& device) {
  GeneratorStates states;
  states.cpu = state_of(at::globalContext().defaultGenerator(c10::Device(c10::kCPU)));
  if (device.is_cuda()) states.device = state_of(at::globalContext().defaultGenerator(device));
  return states;
}

void restore_generators(const GeneratorStates& states, const c10::Device& device) {
  if (states.cpu.defined()) set_state(at::globalContext().defaultGenerator(c10::Device(c10::kCPU)), states.cpu);
  if (states.device.defined() && device.is_cuda()) set_state(at::globalContext().defaultGenerator(device), states.device);
}

KeptGenerators::~KeptGenerators() {
  try {
    restore_generators(states_, device_);
  } catch (const std::exception& e) {
    log::warn("the random generators could not be put back (", e.what(), "): dropout draws other masks from here");
  }
}

std::string generators_to_json(const GeneratorStates& states) {
  json j = {{"cpu", hex_of(states.cpu)}};
  if (states.device.defined()) j["cuda"] = hex_of(states.device);
  return j.dump(2) + "\n";
}

GeneratorStates generators_from_json(const std::string& text, const std::string& source) {
  const std::string expected = source + ": expected {\"cpu\": hex bytes, \"cuda\": hex bytes (optional)}";
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(expected + ", not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("cpu") || !j.at("cpu").is_string()) throw InputError(expected);
  GeneratorStates states;
  states.cpu = bytes_of(j.at("cpu").get<std::string>());
  if (!states.cpu.defined()) throw InputError(expected + "; \"cpu\" is not hex bytes");
  if (j.contains("cuda")) {
    if (!j.at("cuda").is_string() || !(states.device = bytes_of(j.at("cuda").get<std::string>())).defined())
      throw InputError(expected + "; \"cuda\" is not hex bytes");
    // A CUDA generator's state is its seed and its offset, 8 bytes each (CUDAGeneratorImpl::get_state).
    if (states.device.numel() != kCudaStateBytes)
      throw InputError(source + ": \"cuda\" holds " + std::to_string(states.device.numel()) + " bytes, a CUDA "
                       "generator's state " + std::to_string(kCudaStateBytes));
  }
  // The CPU generator checks its state's size and contents as it takes it: a state it refuses is the file's error.
  try {
    at::Generator probe = at::detail::createCPUGenerator();
    probe.set_state(states.cpu);
  } catch (const c10::Error& e) {
    throw InputError(source + ": \"cpu\" is not a CPU generator's state (" + e.what_without_backtrace() + ")");
  }
  return states;
}

}  // namespace segtrain::trainer
