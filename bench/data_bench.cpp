// Data layer throughput, as JSON on stdout (bench/run.sh collects it):
//  - sampler tokens/s on one core for every method (L_t = 1024, L_e = 4096, a = 0.25)
//    and the loader's delivered tokens/s with one background builder;
//  - sentencepiece encoding MB/s per core through data::encode_documents and
//    through Debian's `spm_encode` on the same text, in the same run.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "data/loader.h"
#include "data/rng.h"
#include "data/sampler.h"
#include "data/synth.h"
#include "data/token_store.h"
#include "data/tokenizer.h"
#include "data/windows.h"
#include "common/enum_names.h"

namespace fs = std::filesystem;
using namespace segtrain::data;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("segtrain-bench-" + std::to_string(std::random_device{}()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

std::string sampler_json(const fs::path& dir) {
  // 256 documents of 16k random tokens: 1024 windows of L_e = 4096.
  StoreMeta meta;
  meta.vocab_size = 32000;
  meta.eos_id = 2;
  std::vector<int32_t> doc(16384);
  Rng fill(1);
  write_store((dir / "store").string(), 256,
              [&](int64_t) {
                for (auto& t : doc) t = static_cast<int32_t>(fill.below(32000));
                return std::span<const int32_t>(doc);
              },
              meta, 0.0, 1);
  const auto store = TokenStore::open((dir / "store").string());
  std::ostringstream out;
  for (const std::string& method : sampler_names()) {
    for (auto targets : {TargetMode::sequence, TargetMode::document}) {
      if (targets == TargetMode::document && method != "chunk") continue;
      DataConfig config;
      config.train_length = 1024;
      config.extended_length = 4096;
      config.sampler = {method, 0.25, targets};
      const auto windows = make_windows(store.split(Split::train), 4096);
      const Sampler sampler(store.split(Split::train), windows, config);
      const auto T = static_cast<size_t>(sampler.length());
      std::vector<int32_t> tokens(T), offsets(T), positions(T), target(T);
      std::vector<uint8_t> mask(T);
      const SampleOut slots{tokens.data(), offsets.data(), positions.data(), target.data(), mask.data()};
      int64_t samples = 0;
      uint64_t sink = 0;
      const auto start = Clock::now();
      double elapsed = 0;
      while (elapsed < 0.5) {
        for (int i = 0; i < 256; ++i, ++samples) {
          sampler.draw(samples % windows.size(), mix(7, static_cast<uint64_t>(samples)), slots);
          sink += static_cast<uint64_t>(tokens[T / 2]);
        }
        elapsed = seconds_since(start);
      }
      if (sink == 42) std::cerr << "";  // keeps the draws observable
      out << "{\"measure\": \"sampler\", \"method\": \"" << method << "\", \"targets\": \""
          << segtrain::enum_name(kTargetModes, targets) << "\", \"tokens_per_s_1_core\": "
          << static_cast<double>(samples) * static_cast<double>(T) / elapsed << "},\n";
    }
  }
  // The loader as the trainer sees it: batches of 8 from one background thread.
  DataConfig config;
  config.train_length = 1024;
  config.extended_length = 4096;
  config.sampler = {"chunk", 0.25, TargetMode::sequence};
  LoaderOptions lo;
  lo.micro_batch_size = 8;
  lo.threads = 1;
  Loader loader(store, config, lo);
  int64_t tokens = 0;
  const auto start = Clock::now();
  while (seconds_since(start) < 0.5) tokens += static_cast<int64_t>(loader.next().tokens.size());
  out << "{\"measure\": \"loader, batch 8, 1 builder thread\", \"method\": \"chunk\", \"targets\": \"sequence\", "
      << "\"tokens_per_s_1_core\": " << static_cast<double>(tokens) / seconds_since(start) << "},\n";
  return out.str();
}

std::string tokenizer_json(const fs::path& dir) {
  SynthOptions so;
  so.documents = 300;
  so.min_words = 2000;
  so.max_words = 4000;
  std::vector<std::string> docs;
  std::ofstream text(dir / "text.txt");
  for (int64_t i = 0; i < so.documents; ++i) {
    std::string d = synth_document(so, SynthSplit::train, i);
    std::replace(d.begin(), d.end(), '\n', ' ');  // one document per line for spm_encode
    text << d << "\n";
    docs.push_back(std::move(d));
  }
  text.close();
  TokenizerTrainOptions to;
  to.vocab_size = 4000;
  to.sample_size = 200000;
  const auto tok = Tokenizer::train(docs, to);
  std::ofstream(dir / "m.model", std::ios::binary) << tok.serialized();
  int64_t bytes = 0;
  for (const auto& d : docs) bytes += static_cast<int64_t>(d.size()) + 1;

  auto ours = [&](int64_t threads) {
    EncodeStats stats;
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
      encode_documents(tok, docs, threads, stats);
      best = std::max(best, stats.mb_per_s());
    }
    return best;
  };
  const double ours_1 = ours(1);
  const int64_t cores = default_threads(0);
  const double ours_all = ours(cores);

  double spm = 0;
  const std::string command = "spm_encode --model=" + (dir / "m.model").string() + " --output_format=id < " +
                              (dir / "text.txt").string() + " > /dev/null 2>&1";
  bool spm_ok = true;
  for (int rep = 0; rep < 3 && spm_ok; ++rep) {
    const auto start = Clock::now();
    spm_ok = std::system(command.c_str()) == 0;
    spm = std::max(spm, static_cast<double>(bytes) / 1e6 / seconds_since(start));
  }
  const double mb = static_cast<double>(bytes) / 1e6;
  std::ostringstream out;
  out << "{\"measure\": \"tokenize " << mb << " MB, unigram 4000\", \"method\": \"segtrain, 1 thread\", "
      << "\"mb_per_s\": " << ours_1 << ", \"mb_per_s_per_core\": " << ours_1 << "},\n";
  out << "{\"measure\": \"tokenize " << mb << " MB, unigram 4000\", \"method\": \"segtrain, " << cores
      << " threads\", \"mb_per_s\": " << ours_all << ", \"mb_per_s_per_core\": " << ours_all / static_cast<double>(cores)
      << "},\n";
  if (spm_ok)
    out << "{\"measure\": \"tokenize " << mb << " MB, unigram 4000\", \"method\": \"spm_encode\", \"mb_per_s\": " << spm
        << ", \"mb_per_s_per_core\": " << spm << ", \"segtrain_1_thread_over_spm_encode\": " << ours_1 / spm << "}";
  else
    out << "{\"measure\": \"tokenize\", \"method\": \"spm_encode\", \"note\": \"not installed (Debian package sentencepiece)\"}";
  return out.str();
}

}  // namespace

int main() {
  TempDir dir;
  const std::string samplers = sampler_json(dir.path);
  const std::string tokenizer = tokenizer_json(dir.path);
  // One flat row per measurement, the shape bench/summarize.py tabulates.
  std::cout << "{\"benchmark\": \"data\", \"results\": [\n" << samplers << tokenizer << "]}" << std::endl;
  return 0;
}
