// A corpus's token store for the grid (experiment/corpus_store.h), and the fingerprint
// that tells a store made from today's corpus from a stale one.
#include "trainer/experiment/corpus_store.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/file_digest.h"
#include "common/file_io.h"
#include "common/log.h"
#include "data/corpus.h"
#include "data/prepare.h"
#include "data/synth.h"
#include "trainer/config/model_ref.h"
#include "trainer/experiment/plan.h"

namespace segtrain::trainer {

namespace {

// The folder whose tokenizer makes the store of a corpus with text and an hf: base;
// "" when the grid trains a sentencepiece model on the text.
std::string base_tokenizer(const CorpusSpec& corpus) {
  const auto ref = parse_model_ref(corpus.base);
  return ref && ref->kind == ModelRef::Kind::hf && corpus.store.empty() ? ref->dir : "";
}

// The corpus settings a store was made from, and for text inputs every file's
// size and content digest; a store made from others (an edited file) is stale.
// FNV-1a, as the stores of published grids recorded it: another digest would make them stale.
nlohmann::json corpus_fingerprint(const CorpusSpec& corpus) {
  nlohmann::json j = {{"vocab_size", corpus.vocab_size}, {"valid_fraction", corpus.valid_fraction}};
  if (const std::string tokenizer = base_tokenizer(corpus); !tokenizer.empty()) {
    // The base's tokenizer replaces a trained one: its files are part of what the store is made from.
    j.erase("vocab_size");
    j["tokenizer"] = {{"base", tokenizer}, {"files", nlohmann::json::array()}};
    for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"})
      if (const fs::path file = fs::path(tokenizer) / name; fs::exists(file))
        j["tokenizer"]["files"].push_back({{"name", name}, {"fnv1a64", file_digest(file, DigestKind::fnv1a64)}});
  }
  if (corpus.synthetic)
    j["synthetic"] = {{"docs", corpus.synthetic->documents},
                      {"min_tokens", corpus.synthetic->min_words},
                      {"max_tokens", corpus.synthetic->max_words},
                      {"seed", static_cast<int64_t>(corpus.synthetic->seed)}};
  else {
    j["inputs"] = corpus.inputs;
    j["files"] = nlohmann::json::array();
    for (const auto& file : data::corpus_files(corpus.inputs))
      j["files"].push_back({{"path", file.path.string()},
                            {"bytes", static_cast<int64_t>(fs::file_size(file.path))},
                            {"fnv1a64", file_digest(file.path, DigestKind::fnv1a64)}});
  }
  // A path that is not UTF-8 (a Linux file name may be any bytes) would make dump() throw once the
  // store is built; as written to corpus.json (U+FFFD for each bad byte), it compares with what is read back.
  return nlohmann::json::parse(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// What changed between a recorded corpus fingerprint and today's, in a few words.
std::string first_difference(const nlohmann::json& recorded, const nlohmann::json& now) {
  for (const auto& [key, value] : now.items()) {
    if (!recorded.contains(key)) return key + " was not recorded";
    if (recorded[key] == value) continue;
    if (key != "files" || !recorded[key].is_array()) return key + " was " + recorded[key].dump() + ", is " + value.dump();
    std::map<std::string, nlohmann::json> before;
    for (const auto& f : recorded[key])  // a hand-edited record: an entry without a path string is skipped
      if (f.is_object() && f.contains("path") && f["path"].is_string()) before[f["path"].get<std::string>()] = f;
    for (const auto& f : value) {
      const auto it = before.find(f["path"].get<std::string>());
      if (it == before.end()) return f["path"].get<std::string>() + " is new";
      if (it->second != f) return f["path"].get<std::string>() + " changed";
      before.erase(it);
    }
    if (!before.empty()) return before.begin()->first + " is gone";
  }
  return "recorded with other settings";
}

}  // namespace

void ensure_store(const ExperimentConfig& x, const CorpusSpec& corpus, const LoadedConfig& base_template) {
  if (!corpus.store.empty()) return;
  const fs::path dir = corpus_dir(x, corpus);
  const fs::path store = store_dir(x, corpus), made_from = dir / "corpus.json";
  const nlohmann::json fingerprint = corpus_fingerprint(corpus);
  if (fs::exists(store / "meta.json") && fs::exists(made_from)) {
    // A damaged record (not JSON: "discarded", which compares equal to nothing, not even unequal) is a stale one.
    const auto recorded = nlohmann::json::parse(read_file(made_from, "corpus record"), nullptr, false);
    if (recorded.is_discarded() || recorded != fingerprint)
      throw InputError(corpus.origin + ": experiment.corpora '" + corpus.name + "' differs from the corpus " +
                       store.string() + " was made from (" + made_from.string() + ": " +
                       (recorded.is_discarded() ? "not valid JSON" : first_difference(recorded, fingerprint)) +
                       "); every run of it would be stale: delete " + dir.string() +
                       " or choose another experiment.output_dir");
    return;
  }
  // The corpus text and the store are built beside their places and renamed in
  // (AtomicDir); what a killed build leaves is a .tmp- sibling, removed here. A
  // stop requested meanwhile takes effect once the store is in place (sentencepiece's
  // training included: data::PrepareOptions::stop_exits_tokenizer_training stays off).
  fs::create_directories(dir);
  std::vector<fs::path> leftovers;
  for (const auto& entry : fs::directory_iterator(dir))
    if (is_incomplete_write(entry.path())) leftovers.push_back(entry.path());
  for (const auto& path : leftovers) fs::remove_all(path);
  std::vector<std::string> inputs = corpus.inputs;
  if (corpus.synthetic) {
    // Written afresh with the store (it takes seconds), so it always matches the fingerprint.
    AtomicDir text(dir / "corpus");
    log::info("experiment ", corpus.name, ": writing the synthetic corpus");
    data::write_synth_corpus(text.path().string(), *corpus.synthetic);
    text.commit();
    inputs = {(text.final_path() / "train.jsonl").string(), (text.final_path() / "valid.jsonl").string()};
  }
  AtomicDir staged_store(store);
  data::PrepareOptions p;
  p.inputs = inputs;
  p.out = staged_store.path().string();
  p.vocab_size = corpus.vocab_size;
  p.tokenizer = base_tokenizer(corpus);
  p.valid_fraction = corpus.valid_fraction;
  p.seed = base_template.config.run.seed;
  log::info("experiment ", corpus.name, ": tokenizing into ", store.string());
  data::prepare_store(p);
  staged_store.commit();
  write_file_atomic(made_from, fingerprint.dump(2) + "\n");
}

}  // namespace segtrain::trainer
