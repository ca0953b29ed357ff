#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <regex>
#include <thread>
#include <unordered_map>

#include "common/error.h"
#include "data/corpus.h"

namespace segtrain::data {

namespace {

// Feeds documents to the trainer as lines no longer than its sentence limit:
// whole documents would be skipped by sentencepiece as too long. Documents are
// pulled one at a time, so the corpus is never held whole.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  static constexpr size_t kMaxBytes = 2048;
  explicit LineIterator(const std::function<bool(std::string&)>& next_document) : next_document_(next_document) {
    advance();
  }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    for (;;) {
      const std::string& d = doc_;
      while (pos_ < d.size() && (d[pos_] == '\n' || d[pos_] == '\r')) ++pos_;
      if (pos_ >= d.size()) {
        pos_ = 0;
        if (!next_document_(doc_)) break;
        continue;
      }
      size_t end = d.find('\n', pos_);
      if (end == std::string::npos) end = d.size();
      if (end - pos_ > kMaxBytes) {
        // Cut at the last space before the limit, or at a UTF-8 boundary.
        size_t cut = d.rfind(' ', pos_ + kMaxBytes);
        if (cut == std::string::npos || cut <= pos_) {
          cut = pos_ + kMaxBytes;
          while (cut > pos_ && (static_cast<unsigned char>(d[cut]) & 0xC0) == 0x80) --cut;
        }
        end = cut;
      }
      value_.assign(d, pos_, end - pos_);
      pos_ = end < d.size() && d[end] == ' ' ? end + 1 : end;
      return;
    }
    done_ = true;
  }
  const std::function<bool(std::string&)>& next_document_;
  std::string doc_;
  size_t pos_ = 0;
  std::string value_;
  bool done_ = false;
};

}  // namespace

int64_t default_threads(int64_t requested) {
  if (requested > 0) return requested;
  return std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
}

Tokenizer::Tokenizer() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& model_path) {
  if (!std::filesystem::is_regular_file(model_path)) throw InputError(model_path + ": no such tokenizer model file");
  return from_serialized(read_text_file(model_path), model_path);
}

Tokenizer Tokenizer::from_serialized(std::string proto, const std::string& name) {
  Tokenizer t;
  t.proto_ = std::move(proto);
  auto status = t.sp_->LoadFromSerializedProto(t.proto_);
  if (!status.ok()) throw InputError(name + ": not a sentencepiece model (" + status.ToString() + ")");
  if (t.sp_->eos_id() < 0) throw InputError(name + ": the sentencepiece model has no EOS piece");
  return t;
}


// sentencepiece's own advice names its flags (vocab_size, --character_coverage); a too small
// vocabulary gets segtrain's flags and the size it needs, anything else a general hint.
static std::string training_failure(const std::string& why, int64_t vocab_size) {
  std::smatch m;
  if (std::regex_search(why, m, std::regex("smaller than required_chars\\. *[0-9]+ vs ([0-9]+)")))
    return "--vocab-size " + std::to_string(vocab_size) + " is smaller than the " + m[1].str() +
           " pieces this corpus needs at least (its characters and the special pieces): give --vocab-size " +
           m[1].str() + " or more, or a lower --character-coverage";
  return "sentencepiece training failed: " + why + " (try a smaller --vocab-size or more text)";
}

Tokenizer Tokenizer::train(const std::vector<std::string>& documents, const TokenizerTrainOptions& o) {
  size_t next = 0;
  return train([&](std::string& doc) {
    if (next >= documents.size()) return false;
    doc = documents[next++];
    return true;
  }, o);
}

Tokenizer Tokenizer::train(const std::function<bool(std::string&)>& next_document, const TokenizerTrainOptions& o) {
  if (o.model_type != "unigram" && o.model_type != "bpe")
    throw InputError("--model-type: expected unigram or bpe, got '" + o.model_type + "'");
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(o.seed));
  std::unordered_map<std::string, std::string> args = {
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"input_sentence_size", std::to_string(o.sample_size)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(default_threads(o.threads))},
      {"max_sentence_length", std::to_string(LineIterator::kMaxBytes * 2)},
      // A small corpus may not support the requested vocabulary exactly.
      {"hard_vocab_limit", o.model_type == "unigram" ? "false" : "true"},
      {"minloglevel", "1"},
  };
  LineIterator lines(next_document);
  if (lines.done()) throw InputError("no documents to train a tokenizer on");
  Tokenizer t;
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &t.proto_);
  if (!status.ok()) throw InputError(training_failure(status.ToString(), o.vocab_size));
  status = t.sp_->LoadFromSerializedProto(t.proto_);
  if (!status.ok()) throw std::runtime_error("cannot load the trained tokenizer: " + status.ToString());
  return t;
}

int64_t Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }
int32_t Tokenizer::eos_id() const { return sp_->eos_id(); }
int32_t Tokenizer::bos_id() const { return sp_->bos_id(); }
int32_t Tokenizer::piece_id(std::string_view piece) const {
  const int id = sp_->PieceToId(piece);
  return id >= 0 && sp_->IdToPiece(id) == piece ? id : -1;
}

void Tokenizer::encode_ids(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<int> ids;
  auto status = sp_->Encode(text, &ids);
  if (!status.ok()) throw std::runtime_error("sentencepiece encoding failed: " + status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  out.clear();
  encode_ids(text, out);
  out.push_back(eos_id());
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text).IgnoreError();
  return text;
}

std::vector<std::vector<int32_t>> encode_documents(const Tokenizer& tokenizer, std::span<const std::string> documents,
                                                   int64_t threads, EncodeStats& stats) {
  return encode_documents([&](std::string_view text, std::vector<int32_t>& out) { tokenizer.encode(text, out); },
                          documents, threads, stats);
}

std::vector<std::vector<int32_t>> encode_documents(const EncodeFn& encode, std::span<const std::string> documents,
                                                   int64_t threads, EncodeStats& stats) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> out(documents.size());
  const int64_t n = default_threads(threads);
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&] {
    try {
      for (size_t d; (d = next.fetch_add(1)) < documents.size();) encode(documents[d], out[d]);
    } catch (...) {
      std::lock_guard lock(failure_mutex);
      failure = std::current_exception();
      next = documents.size();
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  stats.documents = static_cast<int64_t>(documents.size());
  stats.threads = n;
  stats.bytes = stats.tokens = 0;
  for (size_t d = 0; d < documents.size(); ++d) {
    stats.bytes += static_cast<int64_t>(documents[d].size());
    stats.tokens += static_cast<int64_t>(out[d].size());
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace segtrain::data
