#include "data/prepare.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <set>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/output_path.h"
#include "common/progress.h"
#include "common/signals.h"
#include "data/corpus.h"
#include "data/document_tokenizer.h"
#include "data/encode_pipeline.h"
#include "data/token_store.h"
#include "data/tokenizer.h"

namespace segtrain::data {

namespace {

std::string one_decimal(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

// Evaluation reads the valid split: without documents there every perplexity is nan.
void warn_if_no_validation(const StoreMeta& m, const PrepareOptions& o) {
  if (m.valid_documents > 0) return;
  log::warn("prepare: the validation split is empty (", m.train_documents + m.valid_documents, " documents x ",
            "--valid-fraction ", o.valid_fraction, "); train and eval evaluate on it: give more documents or a larger "
            "--valid-fraction");
}

namespace fs = std::filesystem;

// "x.bin", "x.idx" or the prefix "x" of a Megatron indexed dataset, else "".
std::string megatron_prefix(const std::string& input) {
  auto has = [](const std::string& p) { return fs::is_regular_file(p + ".idx") && fs::is_regular_file(p + ".bin"); };
  for (const char* ext : {".bin", ".idx"}) {
    const std::string e = ext;
    if (input.size() > e.size() && input.compare(input.size() - e.size(), e.size(), e) == 0) {
      const std::string prefix = input.substr(0, input.size() - e.size());
      if (!has(prefix)) throw InputError(input + ": a Megatron dataset needs both " + prefix + ".bin and " + prefix + ".idx");
      return prefix;
    }
  }
  return !fs::exists(input) && has(input) ? input : "";
}

// The files of a store besides its splits and meta.json: its tokenizer.
const std::set<std::string>& tokenizer_files() {
  static const std::set<std::string> kFiles = {"tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                                               "special_tokens_map.json"};
  return kFiles;
}

bool is_store_file(const fs::path& entry) {
  static const std::set<std::string> kSplits = {"meta.json", "train.bin", "train.idx", "valid.bin", "valid.idx"};
  const std::string name = entry.filename().string();
  return kSplits.count(name) > 0 || tokenizer_files().count(name) > 0;
}

// The store record of Megatron datasets without --tokenizer. --vocab-size when given. Else,
// when every one is a split of a segtrain store and the stores agree, their record (so a store
// re-split into another keeps its vocabulary, EOS and tokenizer, whose files are copied); else
// the largest token id + 1, said in a warning (a model with a larger vocabulary still fits).
StoreMeta megatron_meta(const PrepareOptions& o, const std::vector<std::string>& prefixes,
                        const std::vector<IndexedDataset>& inputs, StoreFiles& files) {
  StoreMeta meta;
  meta.tokenizer = "megatron";
  if (o.vocab_size) {
    meta.vocab_size = *o.vocab_size;
    return meta;
  }
  std::optional<StoreMeta> stored;
  bool all_stores = true;
  for (const auto& prefix : prefixes) {
    const fs::path dir = fs::path(prefix).parent_path().empty() ? fs::path(".") : fs::path(prefix).parent_path();
    const std::string split = fs::path(prefix).filename().string();
    if ((split != "train" && split != "valid") || !fs::is_regular_file(dir / "meta.json")) {
      all_stores = false;
      break;
    }
    const StoreMeta m = read_meta(dir.string());
    if (stored && (m.vocab_size != stored->vocab_size || m.tokenizer != stored->tokenizer || m.eos_id != stored->eos_id))
      throw InputError("--input " + prefix + ": its store's vocabulary or tokenizer differs from " + prefixes.front() +
                       "'s; prepare them separately, or give --vocab-size");
    stored = m;
  }
  if (all_stores && stored) {
    meta.vocab_size = stored->vocab_size;
    meta.tokenizer = stored->tokenizer;
    meta.tokenizer_kind = stored->tokenizer_kind;
    meta.eos_id = stored->eos_id;
    meta.bos_id = stored->bos_id;
    meta.add_bos = stored->add_bos;
    const fs::path dir = fs::path(prefixes.front()).parent_path();
    for (const auto& name : tokenizer_files())
      if (fs::is_regular_file(dir / name)) files.emplace_back(name, read_file(dir / name, "--input's tokenizer"));
    log::info("prepare: the inputs are splits of ", dir.string(), ": its vocabulary (", meta.vocab_size,
              ") and tokenizer record are kept");
    return meta;
  }
  int64_t largest = 0;
  for (const auto& input : inputs) largest = std::max<int64_t>(largest, input.max_token());
  meta.vocab_size = largest + 1;
  log::warn("prepare: Megatron datasets record no vocabulary: the store's is their largest token id + 1 = ",
            meta.vocab_size, "; give the model's with --vocab-size (or its --tokenizer)");
  return meta;
}

// A sentencepiece model trained on the documents `next` streams (sentencepiece samples
// o.sample_size of their lines as it reads them), as a store's tokenizer.
DocumentTokenizer trained_tokenizer(const PrepareOptions& o, const std::function<bool(std::string&)>& next) {
  TokenizerTrainOptions t;
  t.vocab_size = o.vocab_size.value_or(kTrainedVocabSize);
  t.model_type = o.model_type;
  t.character_coverage = o.character_coverage;
  t.sample_size = o.sample_size;
  t.seed = static_cast<uint64_t>(o.seed);
  // sentencepiece splits its work by num_threads, and its model depends on the split: a fixed count
  // (its own default) makes the tokenizer, and so the store, the same whatever --threads or the cores.
  t.threads = kTokenizerTrainingThreads;
  log::info("prepare: training a ", o.model_type, " sentencepiece model with ", t.vocab_size, " pieces");
  std::shared_ptr<Tokenizer> sp;
  {
    // sentencepiece trains without asking whether to stop, and nothing is written yet: a stop ends it.
    std::optional<ExitAtOnceOnSignal> stop_ends_training;
    if (o.stop_exits_tokenizer_training) stop_ends_training.emplace();
    sp = std::make_shared<Tokenizer>(Tokenizer::train(next, t));
  }
  if (sp->vocab_size() < t.vocab_size)
    log::warn("prepare: --vocab-size ", t.vocab_size, " asked, but this corpus yields ", sp->vocab_size(),
              " pieces (sentencepiece found no more); the store's vocabulary is ", sp->vocab_size());
  DocumentTokenizer tokenizer;
  tokenizer.kind = "sentencepiece";
  tokenizer.meta_name = "tokenizer.model";
  tokenizer.vocab_size = sp->vocab_size();
  tokenizer.eos_id = sp->eos_id();
  tokenizer.bos_id = sp->bos_id();
  tokenizer.encode = [sp](std::string_view text, std::vector<int32_t>& out) { sp->encode(text, out); };
  tokenizer.encode_text = [sp](std::string_view text, std::vector<int32_t>& out) { sp->encode_ids(text, out); };
  tokenizer.decode = [sp](const std::vector<int32_t>& ids) { return sp->decode(ids); };
  tokenizer.files.emplace_back("tokenizer.model", sp->serialized());
  return tokenizer;
}

// Re-splits existing Megatron datasets by document into a store: the vocabulary and
// EOS of --tokenizer when given, else megatron_meta's.
void prepare_from_megatron(const PrepareOptions& o, const std::vector<std::string>& prefixes) {
  std::vector<IndexedDataset> inputs;
  for (const auto& p : prefixes) inputs.push_back(IndexedDataset::open(p, 0));
  StoreMeta meta;
  StoreFiles files;
  if (!o.tokenizer.empty()) {
    auto tok = open_document_tokenizer(o.tokenizer);
    meta.vocab_size = tok.vocab_size;
    meta.eos_id = tok.eos_id;
    meta.bos_id = tok.bos_id;
    meta.add_bos = false;  // the documents are the datasets' as they are
    meta.tokenizer = tok.meta_name;
    meta.tokenizer_kind = tok.kind;
    files = tok.files;
  } else {
    meta = megatron_meta(o, prefixes, inputs, files);
  }
  std::vector<std::pair<size_t, int64_t>> docs;  // (input, document)
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].max_token() >= meta.vocab_size)
      throw InputError(prefixes[i] + ".bin: token id " + std::to_string(inputs[i].max_token()) +
                       " is outside the vocabulary [0, " + std::to_string(meta.vocab_size) +
                       "); give the model's vocabulary with --vocab-size (or its --tokenizer)");
    for (int64_t d = 0; d < inputs[i].documents(); ++d) docs.emplace_back(i, d);
    log::info("prepare: ", prefixes[i], ".{bin,idx}: ", inputs[i].documents(), " documents, ", inputs[i].tokens(),
              " tokens (", dtype_name(inputs[i].dtype()), ")");
  }
  std::vector<int32_t> scratch;
  auto m = write_store(
      o.out, static_cast<int64_t>(docs.size()),
      [&](int64_t i) {
        const auto [input, d] = docs[static_cast<size_t>(i)];
        throw_if_stopped();
        scratch = inputs[input].document(d);
        return std::span<const int32_t>(scratch);
      },
      meta, o.valid_fraction, static_cast<uint64_t>(o.seed), files);
  log::info("prepare: wrote ", o.out, ": ", m.train_documents, " train documents (", m.train_tokens, " tokens), ",
            m.valid_documents, " valid documents (", m.valid_tokens, " tokens), vocabulary ", m.vocab_size);
  warn_if_no_validation(m, o);
}

// The first reading of a text corpus: the documents the store will hold (the valid split is
// drawn from their count) and, without a given tokenizer, sentencepiece's sample of their lines
// (`given` is then the trained one).
CorpusStats first_reading(const PrepareOptions& o, const std::vector<std::string>& text,
                          std::optional<DocumentTokenizer>& given) {
  CorpusReader first(text, {o.text_field});
  Progress reading("prepare: reading", first.total_bytes() >> 20, "MiB of input");
  // A stop or a reading error ends the reading, thrown once it has (never through sentencepiece,
  // which pulls the documents when it trains a tokenizer).
  std::exception_ptr reading_failed;
  auto next_counted = [&](std::string& doc) {
    reading.update(first.bytes_read() >> 20);
    if (stop_signal() || reading_failed) return false;
    try {
      return first.next(doc);
    } catch (const InputError&) {
      reading_failed = std::current_exception();
      return false;
    }
  };
  const auto reading_ended = [&] {
    throw_if_stopped();
    if (reading_failed) std::rethrow_exception(reading_failed);
  };
  const auto no_documents = [&] { return InputError("no usable documents in --input (" + describe(first.stats()) + ")"); };
  if (!given) {
    try {
      given = trained_tokenizer(o, next_counted);
    } catch (const InputError&) {
      reading_ended();
      if (first.stats().documents == 0) throw no_documents();
      throw;
    }
  } else {
    for (std::string doc; next_counted(doc);) {
    }
  }
  reading_ended();
  log::info("prepare: read ", describe(first.stats()));
  if (first.stats().documents == 0) throw no_documents();
  return first.stats();
}

// The second reading, encoded on o.threads threads between the reader and the store's writer, in
// the corpus's order (data/encode_pipeline.h), into the store at o.out.
void encode_into_store(const PrepareOptions& o, const std::vector<std::string>& text, const DocumentTokenizer& tokenizer,
                       const CorpusStats& stats) {
  StoreMeta meta;
  meta.vocab_size = tokenizer.vocab_size;
  meta.eos_id = tokenizer.eos_id;
  meta.bos_id = tokenizer.bos_id;
  meta.add_bos = tokenizer.add_bos;
  meta.tokenizer = tokenizer.meta_name;
  meta.tokenizer_kind = tokenizer.kind;

  CorpusReader second(text, {o.text_field});
  EncodePipeline encoded([&](std::string& doc) { return second.next(doc); }, tokenizer.encode, o.threads);
  Progress progress("prepare: encoding", stats.documents, "documents");
  const auto changed = [&](const std::string& how) {
    return InputError("--input changed while it was prepared (" + how + "); nothing was written");
  };
  const std::string counted = " than the " + std::to_string(stats.documents) + " documents of the first reading";
  std::vector<int32_t> last;  // the last document's ids, kept while the reading is checked for its end
  auto document = [&](int64_t d) {
    throw_if_stopped();
    const std::vector<int32_t>* ids = encoded.next();
    if (!ids) throw changed("fewer documents" + counted);
    const EncodeStats so_far = encoded.stats();
    progress.update(so_far.documents, one_decimal(so_far.mb_per_s()) + " MB/s");
    if (d + 1 < stats.documents) return std::span<const int32_t>(*ids);
    // Checked before write_store commits anything: a corpus that grew, or changed its text,
    // between the readings must not replace the store in --out.
    last = *ids;
    if (encoded.next()) throw changed("more documents" + counted);
    if (encoded.stats().bytes != stats.bytes)
      throw changed("other text: " + std::to_string(encoded.stats().bytes) + " bytes against the first reading's " +
                    std::to_string(stats.bytes));
    return std::span<const int32_t>(last);
  };
  auto m = write_store(o.out, stats.documents, document, meta, o.valid_fraction, static_cast<uint64_t>(o.seed),
                       tokenizer.files);
  const EncodeStats total = encoded.stats();
  log::info("prepare: encoded ", total.documents, " documents, ", total.bytes, " bytes -> ", total.tokens,
            " tokens in ", one_decimal(total.seconds), " s on ", total.threads, " encoding threads (",
            one_decimal(total.mb_per_s()), " MB/s)");
  log::info("prepare: wrote ", o.out, ": ", m.train_documents, " train documents (", m.train_tokens, " tokens), ",
            m.valid_documents, " valid documents (", m.valid_tokens, " tokens), vocabulary ", m.vocab_size, ", ",
            dtype_name(m.dtype));
  warn_if_no_validation(m, o);
}

}  // namespace

void prepare_store(const PrepareOptions& o) {
  // A store replaces a store; any other folder's files are never written over.
  check_output_folder(o.out, "--out", "a token store", is_store_file);
  std::vector<std::string> megatron, text;
  std::vector<CommandInput> reads = {{o.tokenizer, "--tokenizer"}};
  for (const auto& input : o.inputs) {
    auto prefix = megatron_prefix(input);
    (prefix.empty() ? text : megatron).push_back(prefix.empty() ? input : prefix);
    for (const std::string& path : prefix.empty() ? std::vector{input} : std::vector{prefix + ".bin", prefix + ".idx"})
      reads.push_back({path, "--input"});
  }
  // A store is never made from itself, nor inside what it is made from.
  check_output_is_no_input(o.out, "--out", reads);
  if (!megatron.empty() && !text.empty())
    throw InputError("--input mixes Megatron datasets (" + megatron.front() + ") with text (" + text.front() +
                     "); prepare them separately");
  if (!megatron.empty()) return prepare_from_megatron(o, megatron);

  // A given tokenizer (a .model file or an HF folder) is checked before any text is read.
  std::optional<DocumentTokenizer> given;
  if (!o.tokenizer.empty()) {
    given = open_document_tokenizer(o.tokenizer);
    log::info("prepare: tokenizer ", o.tokenizer, " (", given->kind, "): vocabulary ", given->vocab_size, ", bos ",
              given->bos_id, given->add_bos ? " (first in every document)" : "", ", eos ", given->eos_id);
  }

  const CorpusStats stats = first_reading(o, text, given);
  encode_into_store(o, text, *given, stats);
}

}  // namespace segtrain::data
