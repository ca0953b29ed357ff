// A sharded HF folder: the input is model.safetensors.index.json, beside the
// real shards transformers wrote for a tiny GPT-NeoX (corpus/../fixtures), read
// with read_hf_tensors (read_safetensors_dir + the family's name table, the family
// from config.json's model_type), as
// `segtrain eval/export --model hf-folder` and `model.init: hf:DIR` do.
#include "common/log.h"
#include "models/modules/hf.h"
#include "tests/fuzz/fuzz_target.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(safetensors_index) {
  static const fuzz::fs::path dir = [] {
    log::Options options;  // unknown tensors are warned about: not once per input
    options.level = log::Level::error;
    log::init(options);
    const auto folder = fuzz::scratch_dir() / "sharded";
    fuzz::fs::create_directories(folder);
    for (const auto& e : fuzz::fs::directory_iterator(fuzz::source_dir() / "fixtures" / "sharded_gpt_neox"))
      if (e.path().extension() == ".safetensors") fuzz::fs::copy_file(e.path(), folder / e.path().filename());
    fuzz::write_file(folder / "config.json", "{\"model_type\": \"gpt_neox\"}");
    return folder;
  }();
  fuzz::write_file(dir / "model.safetensors.index.json", fuzz::as_text(data, size));
  (void)models::read_hf_tensors(dir.string());
}
