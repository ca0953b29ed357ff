// The generators dropout draws from, as a checkpoint keeps them (trainer/train/random_state.h):
// what is drawn after restoring equals what was drawn after capturing, through rng_state.json,
// and a file that is not such a state is refused naming it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "trainer/train/random_state.h"

namespace segtrain::trainer {
namespace {

const c10::Device kCpu(c10::kCPU);

TEST(RandomState, DrawsAfterARestoreThroughJsonEqualTheDrawsAfterTheCapture) {
  at::manual_seed(7);
  at::rand({100});  // somewhere in the stream, not at a seed
  const std::string saved = generators_to_json(capture_generators(kCpu));
  const at::Tensor expected = at::bernoulli(at::full({1000}, 0.9));
  at::rand({12345});  // the run goes on, then stops
  restore_generators(generators_from_json(saved, "rng_state.json"), kCpu);
  EXPECT_TRUE(at::equal(at::bernoulli(at::full({1000}, 0.9)), expected));
  {
    const KeptGenerators kept(kCpu);
    at::rand({77});
  }
  const at::Tensor after_kept = at::rand({10});
  restore_generators(generators_from_json(saved, "rng_state.json"), kCpu);
  at::bernoulli(at::full({1000}, 0.9));
  EXPECT_TRUE(at::equal(at::rand({10}), after_kept)) << "KeptGenerators puts the stream back where it was";
}

TEST(RandomState, AFileThatIsNotAGeneratorStateIsRefusedNamingIt) {
  const std::string good = generators_to_json(capture_generators(kCpu));
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"{", "not valid JSON"},
           {"[]", "expected {\"cpu\": hex bytes"},
           {"{\"cpu\": 3}", "expected {\"cpu\": hex bytes"},
           {"{\"cpu\": \"0g\"}", "\"cpu\" is not hex bytes"},
           {"{\"cpu\": \"abc\"}", "\"cpu\" is not hex bytes"},
           {"{\"cpu\": \"00ff\"}", "\"cpu\" is not a CPU generator's state"},
           {good.substr(0, good.size() - 2) + ", \"cuda\": \"xyz\"}", "\"cuda\" is not hex bytes"},
           {good.substr(0, good.size() - 2) + ", \"cuda\": \"00ff\"}", "\"cuda\" holds 2 bytes, a CUDA generator's state 16"}}) {
    try {
      generators_from_json(text, "ck/rng_state.json");
      ADD_FAILURE() << text;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("ck/rng_state.json: ", 0), 0u) << what;
      EXPECT_NE(what.find(says), std::string::npos) << text << " -> " << what;
    }
  }
}

}  // namespace
}  // namespace segtrain::trainer
