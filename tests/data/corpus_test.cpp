// Corpus readers and the sentencepiece wrapper: every input form, skipped
// documents counted, malformed JSON named by file:line, EOS after every
// document, parallel encoding equal to sequential, and the streaming pipeline
// (data/encode_pipeline.h) handing documents over in order whatever its threads.
#include <gtest/gtest.h>
#include <zlib.h>

#include <atomic>
#include <stdexcept>

#include "common/error.h"
#include "data/corpus.h"
#include "data/encode_pipeline.h"
#include "data/synth.h"
#include "data/tokenizer.h"
#include "test_util.h"

namespace segtrain::data {
namespace {

using test::TempDir;
using test::write_file;
namespace fs = std::filesystem;

void write_gz(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  gzclose(gz);
}

TEST(Utf8, AcceptsValidAndRejectsMalformedSequences) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii text that is longer than eight bytes"));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xff"));
  EXPECT_FALSE(is_valid_utf8("abc\xc3"));                 // truncated
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));                // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));            // surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));        // beyond U+10FFFF
  EXPECT_FALSE(is_valid_utf8("abcdefgh\x80ijklmnop"));    // stray continuation after the fast path
}

TEST(Corpus, DirectoryTreesOfTextAndGzipInSortedOrderWithOtherFilesSkipped) {
  TempDir dir;
  write_file(dir.path() / "b" / "two.md", "second");
  write_file(dir.path() / "a.txt", "first");
  write_gz(dir.path() / "b" / "three.rst.gz", "third, compressed");
  write_file(dir.path() / "c" / "empty.txt", "  \n\t ");
  write_file(dir.path() / "c" / "latin1.txt", "caf\xe9");
  write_file(dir.path() / "c" / "image.png", "\x89PNG");
  CorpusStats stats;
  auto docs = read_corpus({dir.path().string()}, {}, stats);
  EXPECT_EQ(docs, (std::vector<std::string>{"first", "third, compressed", "second"}));  // a.txt, b/three, b/two
  EXPECT_EQ(stats.documents, 3);
  EXPECT_EQ(stats.empty, 1);
  EXPECT_EQ(stats.invalid_utf8, 1);
  EXPECT_EQ(stats.skipped_files, 1);
  EXPECT_EQ(stats.files, 5);
  EXPECT_EQ(stats.bytes, 5 + 6 + 17);
}

TEST(Corpus, JsonlWithAConfigurableFieldOneDocumentPerLine) {
  TempDir dir;
  write_file(dir.path() / "d.jsonl", "{\"body\": \"one\", \"id\": 1}\n\n{\"body\": \"two\\nlines\"}\n{\"body\": \"\"}\n");
  write_gz(dir.path() / "e.jsonl.gz", "{\"body\": \"three\"}\n{\"body\": \"bad \xff byte\"}\n");
  CorpusStats stats;
  auto docs = read_corpus({dir / "d.jsonl", dir / "e.jsonl.gz"}, {"body"}, stats);
  EXPECT_EQ(docs, (std::vector<std::string>{"one", "two\nlines", "three"}));
  EXPECT_EQ(stats.empty, 1);
  EXPECT_EQ(stats.invalid_utf8, 1);
}

TEST(Corpus, JsonlLinesLongerThanTheReadBufferCrlfAndNoFinalNewline) {
  TempDir dir;
  const std::string long_text(300000, 'x');  // spans several 64 KB reads
  write_file(dir.path() / "l.jsonl", "{\"text\": \"a\"}\r\n{\"text\": \"" + long_text + "\"}\r\n{\"text\": \"z\"}");
  write_gz(dir.path() / "l.jsonl.gz", "{\"text\": \"" + long_text + "\"}\n{\"text\": \"end\"}");
  CorpusStats stats;
  auto docs = read_corpus({dir / "l.jsonl", dir / "l.jsonl.gz"}, {}, stats);
  EXPECT_EQ(docs, (std::vector<std::string>{"a", long_text, "z", long_text, "end"}));
}

TEST(Corpus, MalformedInputsNameFileAndLine) {
  TempDir dir;
  write_file(dir.path() / "bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": oops}\n");
  write_file(dir.path() / "field.jsonl", "{\"text\": \"ok\"}\n{\"content\": \"x\"}\n");
  write_file(dir.path() / "data.csv", "a,b\n");
  write_file(dir.path() / "broken.txt.gz", "not gzip at all");
  auto message = [&](const std::string& input, const std::string& field = "text") {
    CorpusStats stats;
    try {
      read_corpus({input}, {field}, stats);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(dir / "bad.jsonl").find("bad.jsonl:2: not valid JSON"), std::string::npos);
  EXPECT_NE(message(dir / "field.jsonl").find("field.jsonl:2: expected a JSON object with a string field 'text'"),
            std::string::npos);
  EXPECT_NE(message(dir / "data.csv").find("data.csv: unsupported input"), std::string::npos);
  EXPECT_NE(message(dir / "missing").find("missing: no such file or directory"), std::string::npos);
  // gzip falls back to reading a plain file as-is; that is zlib's documented behaviour.
  EXPECT_EQ(message(dir / "broken.txt.gz"), "no error");
}

TEST(Tokenizer, TrainsEncodesWithEosAndParallelEqualsSequential) {
  SynthOptions so;
  so.documents = 30;
  so.min_words = 200;
  so.max_words = 600;
  std::vector<std::string> docs;
  for (int64_t i = 0; i < so.documents; ++i) docs.push_back(synth_document(so, SynthSplit::train, i));
  for (const char* type : {"unigram", "bpe"}) {
    TokenizerTrainOptions to;
    to.vocab_size = 300;
    to.model_type = type;
    to.threads = 2;
    auto tok = Tokenizer::train(docs, to);
    EXPECT_LE(tok.vocab_size(), 300) << type;
    EXPECT_GE(tok.eos_id(), 0);
    EncodeStats one, many;
    auto a = encode_documents(tok, docs, 1, one);
    auto b = encode_documents(tok, docs, 3, many);
    EXPECT_EQ(a, b) << type;
    EXPECT_EQ(many.threads, 3);
    int64_t tokens = 0;
    for (size_t d = 0; d < docs.size(); ++d) {
      ASSERT_FALSE(a[d].empty());
      EXPECT_EQ(a[d].back(), tok.eos_id()) << "EOS ends every document";
      EXPECT_EQ(std::count(a[d].begin(), a[d].end(), tok.eos_id()), 1);
      std::vector<int32_t> body(a[d].begin(), a[d].end() - 1);
      // The default nmt_nfkc normalisation turns newlines into spaces.
      std::string flat = docs[d];
      std::replace(flat.begin(), flat.end(), '\n', ' ');
      EXPECT_EQ(tok.decode(body), flat) << "sentencepiece round trip";
      tokens += static_cast<int64_t>(a[d].size());
    }
    EXPECT_EQ(one.tokens, tokens);
    // Reload from the serialized model: same ids.
    TempDir dir;
    write_file(dir.path() / "m.model", tok.serialized());
    auto again = Tokenizer::load(dir / "m.model");
    std::vector<int32_t> ids;
    again.encode(docs[0], ids);
    EXPECT_EQ(ids, a[0]);
  }
}

TEST(Tokenizer, LoadingSomethingElseIsAnInputError) {
  TempDir dir;
  write_file(dir.path() / "x.model", "not a model");
  EXPECT_THROW(Tokenizer::load(dir / "x.model"), InputError);
  EXPECT_THROW(Tokenizer::load(dir / "none.model"), InputError);
}

TEST(Synth, DocumentsAreDeterministicWithinBoundsAndRecallEarlierFacts) {
  SynthOptions o;
  o.min_words = 500;
  o.max_words = 900;
  for (int64_t i = 0; i < 10; ++i) {
    const auto text = synth_document(o, SynthSplit::train, i);
    EXPECT_EQ(text, synth_document(o, SynthSplit::train, i));
    EXPECT_NE(text, synth_document(o, SynthSplit::valid, i));
    const auto words = std::count(text.begin(), text.end(), ' ') + std::count(text.begin(), text.end(), '\n') + 1;
    EXPECT_GE(words, 500);
    EXPECT_LE(words, 900 + 20);  // the closing recall may overshoot
    // Every recalled fact was defined earlier, and the last one reaches back to
    // the first definition.
    size_t at = 0;
    int recalls = 0;
    while ((at = text.find("recall : ", at)) != std::string::npos) {
      const auto end = text.find(" .", at);
      const std::string fact = text.substr(at + 9, end - at - 9);
      const auto defined = text.find(fact);
      EXPECT_LT(defined, at) << fact;
      ++recalls;
      at = end;
    }
    EXPECT_GT(recalls, 5);
    const auto last = text.rfind("recall : ");
    const std::string final_fact = text.substr(last + 9, text.find(" .", last) - last - 9);
    EXPECT_LT(text.find(final_fact), text.size() / 5);
  }
}

// A deterministic stand-in for a tokenizer: one id per byte, the document's index last.
void byte_ids(std::string_view text, std::vector<int32_t>& out) {
  out.assign(text.begin(), text.end());
  out.push_back(static_cast<int32_t>(text.size()));
}

std::vector<std::string> numbered_documents(int count) {
  std::vector<std::string> docs;
  for (int i = 0; i < count; ++i) docs.push_back(std::string(static_cast<size_t>(1 + i % 37), static_cast<char>('a' + i % 26)));
  return docs;
}

// Documents come out in the order they were read, each encoded as alone, for any thread count
// and chunk size (chunks of a few documents: many chunks in flight and out of order).
TEST(EncodePipeline, HandsDocumentsOverInTheirOrderWhateverItsThreads) {
  const auto docs = numbered_documents(500);
  for (const int64_t threads : {1, 2, 5})
    for (const size_t chunk_bytes : {size_t{1}, size_t{40}, size_t{1} << 20}) {
      size_t next = 0;
      EncodePipeline pipeline([&](std::string& doc) {
        if (next >= docs.size()) return false;
        doc = docs[next++];
        return true;
      }, byte_ids, threads, chunk_bytes);
      int64_t bytes = 0;
      for (size_t d = 0; d < docs.size(); ++d) {
        const std::vector<int32_t>* ids = pipeline.next();
        ASSERT_NE(ids, nullptr) << d;
        std::vector<int32_t> expected;
        byte_ids(docs[d], expected);
        ASSERT_EQ(*ids, expected) << "document " << d << ", " << threads << " threads, chunks of " << chunk_bytes;
        bytes += static_cast<int64_t>(docs[d].size());
      }
      EXPECT_EQ(pipeline.next(), nullptr);
      EXPECT_EQ(pipeline.next(), nullptr) << "the end stays the end";
      const EncodeStats stats = pipeline.stats();
      EXPECT_EQ(stats.documents, 500);
      EXPECT_EQ(stats.bytes, bytes);
      EXPECT_EQ(stats.tokens, bytes + 500);
      EXPECT_EQ(stats.threads, threads);
    }
}

// What the reader or an encoder throws reaches the caller, after the documents before it; a
// pipeline left mid-way stops and joins its threads (the test would hang otherwise).
TEST(EncodePipeline, RethrowsTheReadersAndTheEncodersErrorsAndStopsWhenLeftMidway) {
  for (const int64_t threads : {1, 3}) {
    int read = 0;
    EncodePipeline reader_fails([&](std::string& doc) {
      if (read == 50) throw InputError("corpus.jsonl:51: not valid JSON");
      doc = std::to_string(read++);
      return true;
    }, byte_ids, threads, 8);
    int handed = 0;
    try {
      while (reader_fails.next()) ++handed;
      ADD_FAILURE() << "the reader's error was lost";
    } catch (const InputError& e) {
      EXPECT_STREQ(e.what(), "corpus.jsonl:51: not valid JSON");
    }
    EXPECT_LE(handed, 50);

    std::atomic<int> encoded = 0;
    EncodePipeline encoder_fails([n = 0](std::string& doc) mutable {
      doc = "d" + std::to_string(n++);
      return n <= 1000;
    }, [&](std::string_view text, std::vector<int32_t>& out) {
      if (text == "d700") throw std::runtime_error("encoding failed at d700");
      byte_ids(text, out);
      ++encoded;
    }, threads, 16);
    EXPECT_THROW(
        {
          while (encoder_fails.next()) {
          }
        },
        std::runtime_error);

    EncodePipeline endless([](std::string& doc) {
      doc = "more";
      return true;
    }, byte_ids, threads, 64);
    for (int i = 0; i < 10; ++i) ASSERT_NE(endless.next(), nullptr);
  }  // each pipeline stops here, its reader on an endless corpus included
}

// The reader streams what read_corpus returns whole, and says how far into its input it is.
TEST(CorpusReader, StreamsTheDocumentsReadCorpusReturnsAndCountsItsBytes) {
  TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 300; ++i) jsonl += "{\"text\": \"document " + std::to_string(i) + "\"}\n";
  write_file(dir.path() / "in" / "a.jsonl", jsonl);
  write_file(dir.path() / "in" / "b.txt", "a text file");
  CorpusStats whole_stats;
  const auto whole = read_corpus({(dir.path() / "in").string()}, {}, whole_stats);
  CorpusReader reader({(dir.path() / "in").string()}, {});
  EXPECT_EQ(reader.total_bytes(), static_cast<int64_t>(jsonl.size() + 11));
  std::vector<std::string> streamed;
  int64_t last = 0;
  for (std::string doc; reader.next(doc);) {
    streamed.push_back(doc);
    EXPECT_GE(reader.bytes_read(), last);
    last = reader.bytes_read();
  }
  EXPECT_EQ(streamed, whole);
  ASSERT_EQ(streamed.size(), 301u);
  EXPECT_EQ(streamed.front(), "document 0");
  EXPECT_EQ(streamed.back(), "a text file");
  EXPECT_EQ(reader.bytes_read(), reader.total_bytes());
  EXPECT_EQ(reader.stats().documents, 301);
  EXPECT_EQ(reader.stats().files, 2);
}

}  // namespace
}  // namespace segtrain::data
