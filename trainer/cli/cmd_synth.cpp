// `segtrain synth`: the embedded synthetic corpus (data/synth.h).
#include "common/log.h"
#include "data/synth.h"
#include "trainer/cli/command.h"

namespace segtrain::trainer::cli {

void add_synth(CLI::App& app, Chosen& chosen) {
  auto o = std::make_shared<data::SynthOptions>();
  auto out = std::make_shared<std::string>();
  auto* s = app.add_subcommand("synth", "Write a synthetic long-document corpus with long-range dependencies");
  s->add_option("--out", *out, "Output directory (train.jsonl, valid.jsonl)")->required();
  s->add_option("--docs", o->documents, "Number of documents")->check(integer_at_least(1));
  s->add_option("--min-tokens", o->min_words, "Shortest document, in words")->check(integer_at_least(1));
  s->add_option("--max-tokens", o->max_words, "Longest document, in words")->check(integer_at_least(1));
  s->add_option("--seed", o->seed, "Random seed")->check(integer_at_least(0));
  choose_on(s, chosen, "synth", OnSignal::exit_now, [o, out] {
    const auto r = data::write_synth_corpus(*out, *o);
    log::info("synth: wrote ", r.train_documents, " train and ", r.valid_documents, " valid documents (", r.words,
              " words, ", r.bytes, " bytes) to ", *out, "/{train,valid}.jsonl");
    return 0;
  });
}

}  // namespace segtrain::trainer::cli
