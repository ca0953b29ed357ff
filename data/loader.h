#pragma once
// The training stream. Its sources are data.store alone, or the stores of data.mixture
// (data/mixture.h), each with its own windows and sampler. Global sample g of the stream
// comes from source i drawn with the key mix(seed, g) by the weights (always source 0 with one
// store); the k-th sample a source gives (epoch e = k / N, index j = k % N, N = its windows)
// is window perm_e[j] drawn with the key mix(seed_i, e, j): a pure function of the seed and the
// counts. Global micro-step s covers stream samples [s*W*B, (s+1)*W*B); rank r takes its
// B-long slice r, so ranks read disjoint shards and the union over ranks is what one rank with
// a W*B batch would read. Batches are built ahead on background threads and delivered in
// order; the thread count changes only speed, never contents.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/config.h"
#include "data/mixture.h"
#include "data/sampler.h"
#include "data/token_store.h"
#include "data/windows.h"

namespace segtrain::data {

// Where one source stands: its next sample is `index` of `epoch`.
struct Cursor {
  int64_t epoch = 0;
  int64_t index = 0;
  bool operator==(const Cursor&) const = default;
};

// Where the stream stands: one Cursor per source, in the sources' order (empty: every source at
// its start). The same for every rank, so one cursor in a checkpoint resumes all.
struct StreamCursor {
  std::vector<Cursor> sources;
  bool operator==(const StreamCursor&) const = default;
};

// One source of the stream: its resolved setting (data/mixture.h) and the store it reads,
// which must outlive the loader.
struct LoaderSource {
  SourceSetting setting;
  const TokenStore* store = nullptr;
};

// The stores of a data section's sources, each opened once (two sources may read one store).
class SourceStores {
 public:
  explicit SourceStores(const DataConfig& config);
  const std::vector<LoaderSource>& sources() const { return sources_; }

 private:
  std::map<std::string, std::unique_ptr<TokenStore>> stores_;
  std::vector<LoaderSource> sources_;
};

// One rank's micro-batch: B samples of T tokens, flat row-major [B*T].
struct Batch {
  int64_t batch_size = 0, length = 0;
  std::vector<int32_t> tokens, positions, targets;
  std::vector<uint8_t> loss_mask;
  std::vector<int64_t> docs, window_starts;  // per sample, for logs and tests
  std::vector<int32_t> sources;              // per sample: the source it came from
  std::vector<int64_t> step_samples;         // per source: samples of this micro-step over all ranks
  StreamCursor cursor;  // where the stream continues after this step (checkpoint this)
};

struct LoaderOptions {
  uint64_t seed = 1234;
  int64_t rank = 0, world_size = 1;
  int64_t micro_batch_size = 8;
  StreamCursor start;
  Split split = Split::train;
  bool shuffle = true;  // per-epoch permutation of the windows; off keeps store order
  int64_t threads = 1;  // background builders; 0 builds on the caller's thread
};

// The seed of source `source`'s stream: the run's for the first (a mixture's first source draws
// what the single store would), a key of its own for each other.
uint64_t source_seed(uint64_t seed, std::size_t source);

// One source's windows, sampler and seed: sample (epoch, index) of it is a pure function of them.
class SourceStream {
 public:
  // Throws InputError naming the source by `key` (empty: a single store) when its split has no window.
  SourceStream(const LoaderSource& source, const std::string& key, Split split, uint64_t seed, bool shuffle);
  const SourceSetting& setting() const { return setting_; }
  int64_t samples_per_epoch() const { return windows_.size(); }
  const Windows& windows() const { return windows_; }
  const Sampler& sampler() const { return *sampler_; }
  int64_t window_of(int64_t epoch, int64_t index) const;
  uint64_t key(int64_t epoch, int64_t index) const;
  std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch) const;

 private:
  SourceSetting setting_;
  uint64_t seed_;
  bool shuffle_;
  Windows windows_;
  std::unique_ptr<Sampler> sampler_;
  mutable std::mutex perm_mutex_;
  mutable std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> perms_;
};

class Loader {
 public:
  // A single store: data.store with data's L_e and sampler.
  Loader(const TokenStore& store, const DataConfig& config, const LoaderOptions& options);
  // The sources of data_sources(config), in that order (SourceStores opens them).
  Loader(const std::vector<LoaderSource>& sources, const DataConfig& config, const LoaderOptions& options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  Batch next();  // the next micro-batch of this rank; rethrows a builder's failure

  // Source 0's (the single store's).
  int64_t samples_per_epoch() const { return streams_[0]->samples_per_epoch(); }
  int64_t sample_length() const { return streams_[0]->sampler().length(); }
  const Windows& windows() const { return streams_[0]->windows(); }
  const Sampler& sampler() const { return streams_[0]->sampler(); }
  const std::vector<std::unique_ptr<SourceStream>>& streams() const { return streams_; }

  // Sample `index` of `epoch` of `source` (index < its samples_per_epoch()).
  Sample sample(int64_t epoch, int64_t index, std::size_t source = 0) const;
  // The window that `index` of `epoch` of source 0 reads.
  int64_t window_of(int64_t epoch, int64_t index) const { return streams_[0]->window_of(epoch, index); }
  // Sample g of the stream from the loader's start cursor, and its source, for a loader of one
  // sample a step on one rank (segtrain sample), asked for in order g = 0, 1, ... each once: the
  // step plan's draw, as training takes it.
  struct StreamSample {
    Sample sample;
    std::size_t source = 0;
  };
  StreamSample stream_sample(int64_t g) const;

 private:
  // The source global sample `g` of the stream comes from.
  std::size_t source_of(int64_t g) const;
  // One sample of a step: its source and that source's sample number.
  struct Draw {
    int32_t source = 0;
    int64_t sample = 0;
  };
  struct StepPlan {
    std::vector<Draw> draws;        // the step's W*B samples over all ranks
    std::vector<int64_t> drawn_after;  // per source, after the step
  };
  StepPlan plan(int64_t step) const;
  Batch build(int64_t step) const;
  void worker(int64_t id);

  LoaderOptions options_;
  std::vector<std::unique_ptr<SourceStream>> streams_;
  std::vector<double> cumulative_;  // the weights' running sums, normalised to end at 1

  // Steps are planned in order (a step's draws depend on the counts before it), each once.
  mutable std::mutex plan_mutex_;
  mutable int64_t planned_ = 0;             // steps planned so far
  mutable std::vector<int64_t> drawn_;      // per source, after the planned steps
  mutable std::map<int64_t, StepPlan> plans_;  // planned and not yet built

  // Step k is built by worker k % threads into slot k % capacity.
  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t capacity_ = 1;
  int64_t consumed_ = 0;  // steps handed out by next()
  std::vector<std::unique_ptr<Batch>> slots_;
  std::exception_ptr failure_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace segtrain::data
