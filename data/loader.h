#pragma once
// The training stream. Sample n of the infinite stream (epoch e = n / N, index
// i = n % N, N = windows in the split) is window perm_e[i] drawn with the key
// mix(seed, e, i): a pure function of (seed, epoch, index). Global micro-step k
// covers stream samples [k*W*B, (k+1)*W*B); rank r takes its B-long slice r, so
// ranks read disjoint shards and the union over ranks is what one rank with a
// W*B batch would read. Batches are built ahead on background threads and
// delivered in order; the thread count changes only speed, never contents.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "data/config.h"
#include "data/sampler.h"
#include "data/token_store.h"
#include "data/windows.h"

namespace segtrain::data {

// Position in the stream: the next global step starts at sample `index` of
// `epoch`. The same for every rank, so one cursor in a checkpoint resumes all.
struct Cursor {
  int64_t epoch = 0;
  int64_t index = 0;
  bool operator==(const Cursor&) const = default;
};

// One rank's micro-batch: B samples of T tokens, flat row-major [B*T].
struct Batch {
  int64_t batch_size = 0, length = 0;
  std::vector<int32_t> tokens, positions, targets;
  std::vector<uint8_t> loss_mask;
  std::vector<int64_t> docs, window_starts;  // per sample, for logs and tests
  Cursor cursor;  // where the stream continues after this step (checkpoint this)
};

struct LoaderOptions {
  uint64_t seed = 1234;
  int64_t rank = 0, world_size = 1;
  int64_t micro_batch_size = 8;
  Cursor start;
  Split split = Split::train;
  bool shuffle = true;  // per-epoch permutation of the windows; off keeps store order
  int64_t threads = 1;  // background builders; 0 builds on the caller's thread
};

class Loader {
 public:
  Loader(const TokenStore& store, const DataConfig& config, const LoaderOptions& options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  Batch next();  // the next micro-batch of this rank; rethrows a builder's failure

  int64_t samples_per_epoch() const { return windows_.size(); }
  int64_t sample_length() const { return sampler_->length(); }
  const Windows& windows() const { return windows_; }
  const Sampler& sampler() const { return *sampler_; }

  // Stream sample `index` of `epoch` (index < samples_per_epoch()).
  Sample sample(int64_t epoch, int64_t index) const;
  // The window that `index` of `epoch` reads.
  int64_t window_of(int64_t epoch, int64_t index) const;

 private:
  Batch build(int64_t step) const;
  void worker(int64_t id);
  std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch) const;

  const IndexedDataset* split_;
  DataConfig config_;
  LoaderOptions options_;
  Windows windows_;
  std::unique_ptr<Sampler> sampler_;
  int64_t first_sample_ = 0;  // stream position of options_.start

  mutable std::mutex perm_mutex_;
  mutable std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> perms_;

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
