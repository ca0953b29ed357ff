#pragma once
// The default random generators a run draws from: the CPU's and its device's. LoRA's dropout
// draws from them (the data stream draws nothing: it is keyed by run.seed, epoch and index). A
// checkpoint keeps them (rng_state.json, RandomStatePart), so a resumed run draws what the
// uninterrupted one would; micro_batch_size auto's measuring passes put them back as they found
// them (batch_size.h).
#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include <string>

namespace segtrain::trainer {

struct GeneratorStates {
  at::Tensor cpu;     // the CPU generator's state (uint8)
  at::Tensor device;  // the CUDA device's generator's; undefined on the CPU
};

GeneratorStates capture_generators(const c10::Device& device);
// The device's state is set only on a device of the kind it was captured on (a CUDA run
// resumed on the CPU takes the CPU's alone).
void restore_generators(const GeneratorStates& states, const c10::Device& device);

// {"cpu": "<hex>", "cuda": "<hex>"}.
std::string generators_to_json(const GeneratorStates& states);
// InputError naming `source` when it is not such a file.
GeneratorStates generators_from_json(const std::string& text, const std::string& source);

// Captures the generators and puts them back when it goes out of scope.
class KeptGenerators {
 public:
  explicit KeptGenerators(const c10::Device& device) : device_(device), states_(capture_generators(device)) {}
  ~KeptGenerators();  // never throws: a generator that refuses its own state is logged
  KeptGenerators(const KeptGenerators&) = delete;
  KeptGenerators& operator=(const KeptGenerators&) = delete;

 private:
  c10::Device device_;
  GeneratorStates states_;
};

}  // namespace segtrain::trainer
