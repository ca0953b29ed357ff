// `segtrain prepare`: text (or Megatron datasets) -> sentencepiece or a base's own HF tokenizer -> token store
// (data/prepare.h, data/document_tokenizer.h).
#include "data/prepare.h"
#include "trainer/cli/command.h"

namespace segtrain::trainer::cli {

void add_prepare(CLI::App& app, Chosen& chosen) {
  auto o = std::make_shared<data::PrepareOptions>();
  auto* p = app.add_subcommand("prepare", "Tokenize a corpus (sentencepiece, or a base's HF tokenizer) into a Megatron token store");
  p->add_option("--input", o->inputs, "Text directories, .txt/.md/.rst(.gz) files, .jsonl files or Megatron .bin/.idx")
      ->required()
      ->expected(1, -1);
  p->add_option("--out", o->out, "Store directory")->required();
  auto* tokenizer = p->add_option("--tokenizer", o->tokenizer, "Existing sentencepiece .model, or a Hugging Face tokenizer folder (tokenizer.model or a byte-level BPE tokenizer.json)");
  p->add_option("--vocab-size", o->vocab_size,
                "Vocabulary of a newly trained tokenizer (default " + std::to_string(data::kTrainedVocabSize) +
                    "); of Megatron inputs without --tokenizer (default: their store's, else their largest id + 1)")
      ->check(integer_at_least(8, int64_t{1} << 31))
      ->excludes(tokenizer);
  p->add_option("--model-type", o->model_type, "sentencepiece model type")->check(CLI::IsMember({"unigram", "bpe"}));
  p->add_option("--character-coverage", o->character_coverage, "sentencepiece character coverage")
      ->check(number_between(0.5, 1.0));
  p->add_option("--sample-size", o->sample_size, "Sentences sampled to train the tokenizer")->check(integer_at_least(1));
  p->add_option("--text-field", o->text_field, "The text's JSONL field, or Parquet / datasets column (The Stack's: content)");
  p->add_option("--valid-fraction", o->valid_fraction, "Fraction of documents held out")->check(number_between(0.0, 0.9));
  p->add_option("--seed", o->seed, "Seed of the train/valid split")->check(integer_at_least(0));
  p->add_option("--threads", o->threads, "Encoding threads; 0: all cores")->check(integer_at_least(0));
  // A stop leaves any store already in --out as it was, and no temporary file (write_store).
  choose_on(p, chosen, "prepare", OnSignal::stop_at_checkpoint, [o] {
    o->stop_exits_tokenizer_training = true;
    data::prepare_store(*o);
    return 0;
  });
}

}  // namespace segtrain::trainer::cli
