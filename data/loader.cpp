#include "data/loader.h"

#include <numeric>

#include "common/error.h"
#include "common/log.h"
#include "data/rng.h"

namespace segtrain::data {

namespace {
constexpr uint64_t kPermutationStream = 0x7065726d75746521ULL;  // keeps shuffles apart from sample keys
}

Loader::Loader(const TokenStore& store, const DataConfig& config, const LoaderOptions& options)
    : split_(&store.split(options.split)), config_(config), options_(options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size)
    throw InputError("rank " + std::to_string(options.rank) + " is not in [0, world size " +
                     std::to_string(options.world_size) + ")");
  if (options.micro_batch_size < 1)
    throw InputError("micro batch size must be >= 1, got " + std::to_string(options.micro_batch_size));
  if (options.start.epoch < 0 || options.start.index < 0)
    throw InputError("data cursor must be non-negative, got epoch " + std::to_string(options.start.epoch) +
                     ", index " + std::to_string(options.start.index));
  windows_ = make_windows(*split_, config.extended_length);
  if (windows_.size() == 0)
    throw InputError(store.dir() + ": the " + split_name(options.split) + " split has no document of at least L_e = " +
                     std::to_string(config.extended_length) + " tokens (data.extended_length); " +
                     describe(windows_.stats, config.extended_length));
  sampler_ = std::make_unique<Sampler>(*split_, windows_, config_);
  first_sample_ = options.start.epoch * windows_.size() + options.start.index;
  log::debug("data: ", split_name(options.split), " split: ", describe(windows_.stats, config.extended_length));

  if (options.threads > 0) {
    capacity_ = std::max<int64_t>(config.prefetch, options.threads);
    slots_.resize(static_cast<size_t>(capacity_));
    for (int64_t t = 0; t < options.threads; ++t) threads_.emplace_back([this, t] { worker(t); });
  }
}

Loader::~Loader() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& t : threads_) t.join();
}

std::shared_ptr<const std::vector<int64_t>> Loader::permutation(int64_t epoch) const {
  std::lock_guard lock(perm_mutex_);
  auto it = perms_.find(epoch);
  if (it != perms_.end()) return it->second;
  auto perm = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(windows_.size()));
  std::iota(perm->begin(), perm->end(), int64_t{0});
  if (options_.shuffle) {
    Rng rng(mix(options_.seed ^ kPermutationStream, static_cast<uint64_t>(epoch)));
    for (size_t i = perm->size(); i > 1; --i) std::swap((*perm)[i - 1], (*perm)[rng.below(i)]);
  }
  // Builders work on at most a few neighbouring epochs at once.
  while (perms_.size() >= 4) perms_.erase(perms_.begin());
  perms_[epoch] = perm;
  return perm;
}

int64_t Loader::window_of(int64_t epoch, int64_t index) const { return (*permutation(epoch))[static_cast<size_t>(index)]; }

Sample Loader::sample(int64_t epoch, int64_t index) const {
  return sampler_->draw(window_of(epoch, index), mix(options_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index)));
}

Batch Loader::build(int64_t step) const {
  const int64_t B = options_.micro_batch_size, T = sampler_->length(), N = windows_.size();
  const int64_t step_samples = options_.world_size * B;
  const int64_t first = first_sample_ + step * step_samples + options_.rank * B;
  Batch batch;
  batch.batch_size = B;
  batch.length = T;
  const auto n = static_cast<size_t>(B * T);
  batch.tokens.resize(n);
  batch.positions.resize(n);
  batch.targets.resize(n);
  batch.loss_mask.resize(n);
  batch.docs.resize(static_cast<size_t>(B));
  batch.window_starts.resize(static_cast<size_t>(B));
  std::vector<int32_t> offsets(static_cast<size_t>(T));
  std::shared_ptr<const std::vector<int64_t>> perm;
  int64_t perm_epoch = -1;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = first + b, epoch = s / N, index = s % N;
    if (epoch != perm_epoch) perm = permutation(perm_epoch = epoch);
    const int64_t window = (*perm)[static_cast<size_t>(index)];
    const size_t at = static_cast<size_t>(b * T);
    sampler_->draw(window, mix(options_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index)),
                   {batch.tokens.data() + at, offsets.data(), batch.positions.data() + at, batch.targets.data() + at,
                    batch.loss_mask.data() + at});
    batch.docs[static_cast<size_t>(b)] = sampler_->window_doc(window);
    batch.window_starts[static_cast<size_t>(b)] = sampler_->window_start(window);
  }
  const int64_t after = first_sample_ + (step + 1) * step_samples;
  batch.cursor = {after / N, after % N};
  return batch;
}

void Loader::worker(int64_t id) {
  for (int64_t step = id;; step += options_.threads) {
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || step < consumed_ + capacity_; });
      if (stopping_) return;
    }
    try {
      auto batch = std::make_unique<Batch>(build(step));
      std::lock_guard lock(mutex_);
      slots_[static_cast<size_t>(step % capacity_)] = std::move(batch);
    } catch (...) {
      {
        std::lock_guard lock(mutex_);
        if (!failure_) failure_ = std::current_exception();
      }
      changed_.notify_all();
      return;
    }
    changed_.notify_all();
  }
}

Batch Loader::next() {
  if (threads_.empty()) return build(consumed_++);
  std::unique_lock lock(mutex_);
  auto& slot = slots_[static_cast<size_t>(consumed_ % capacity_)];
  changed_.wait(lock, [&] { return slot != nullptr || failure_ != nullptr; });
  if (!slot) std::rethrow_exception(failure_);
  Batch batch = std::move(*slot);
  slot.reset();
  ++consumed_;
  lock.unlock();
  changed_.notify_all();
  return batch;
}

}  // namespace segtrain::data
