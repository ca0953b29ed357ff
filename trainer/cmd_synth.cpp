// `segtrain synth`: the embedded default corpus (data/synth.h).
#include "common/log.h"
#include "data/synth.h"
#include "trainer/commands.h"

namespace segtrain::trainer {

int cmd_synth(const SynthOptions& options) {
  data::SynthOptions o;
  o.documents = options.docs;
  o.min_words = options.min_tokens;
  o.max_words = options.max_tokens;
  o.seed = static_cast<uint64_t>(options.seed);
  const auto r = data::write_synth_corpus(options.out, o);
  log::info("synth: wrote ", r.train_documents, " train and ", r.valid_documents, " valid documents (", r.words,
            " words, ", r.bytes, " bytes) to ", options.out, "/{train,valid}.jsonl");
  return 0;
}

}  // namespace segtrain::trainer
