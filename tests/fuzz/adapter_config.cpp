// A PEFT adapter folder's adapter_config.json as `model.init: peft:DIR` reads it: first
// read_peft_base_model (model.init's parser, to find the base), then read_peft_adapter_config
// on a tiny base of each block kind (a Llama with grouped-query attention, GPT-NeoX's fused
// qkv, GPT-2's transposed Conv1D). Property: what the reader accepts, the LoRA converter
// accepts on that base (lora_config.h's rules and its size bound).
#include "models/spec/converters/lora_config.h"
#include "models/spec/families/peft_config.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

namespace {

models::ModelConfig tiny_base(models::Arch arch) {
  models::ModelConfig c;
  c.arch = arch;
  c.vocab_size = 16;
  c.d_model = 8;
  c.n_layers = arch == models::Arch::gpt_neox ? 1 : 2;  // as the seeds' bases: make_seeds.sh's run, PEFT's
  c.n_heads = 2;
  c.d_ff = 16;
  c.max_positions = 16;
  if (arch == models::Arch::llama) c.n_kv_heads = 1;
  return c;
}

}  // namespace

SEGTRAIN_FUZZ_TARGET(adapter_config) {
  const auto dir = fuzz::scratch_dir() / "adapter";
  fuzz::write_file(dir / "adapter_config.json", fuzz::as_text(data, size));
  try {
    (void)models::read_peft_base_model(dir.string());
  } catch (const InputError&) {
  }
  for (const auto arch : {models::Arch::llama, models::Arch::gpt_neox, models::Arch::gpt2}) {
    const models::ModelConfig base = tiny_base(arch);
    models::PeftAdapterConfig config;
    try {
      config = models::read_peft_adapter_config(dir.string(), base);
    } catch (const InputError&) {
      continue;
    }
    if (const auto rules = models::lora_problems(config.lora, arch, false); !rules.empty())
      fuzz::violated("an adapter read is refused by the converter: " + rules.front().key + ": " + rules.front().message);
    if (const auto sizes = models::lora_size_problems(config.lora, base); !sizes.empty())
      fuzz::violated("an adapter read is too large for its base: " + sizes.front().message);
  }
}
