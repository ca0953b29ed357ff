#include "data/loader.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "common/error.h"
#include "common/log.h"
#include "data/rng.h"

namespace segtrain::data {

namespace {
constexpr uint64_t kPermutationStream = 0x7065726d75746521ULL;  // keeps shuffles apart from sample keys
constexpr uint64_t kSourceStream = 0x736f757263657321ULL;       // the mixture's draws of a source
constexpr uint64_t kSourceSeedStream = 0x736565646f667321ULL;   // the seeds of sources after the first

std::vector<LoaderSource> single_source(const TokenStore& store, const DataConfig& config) {
  return {{data_sources(config).front(), &store}};
}

}  // namespace

uint64_t source_seed(uint64_t seed, std::size_t source) {
  return source == 0 ? seed : mix(seed ^ kSourceSeedStream, static_cast<uint64_t>(source));
}

SourceStores::SourceStores(const DataConfig& config) {
  for (auto& setting : data_sources(config)) {
    auto& store = stores_[setting.data.store];
    if (!store) store = std::make_unique<TokenStore>(TokenStore::open(setting.data.store));
    sources_.push_back({std::move(setting), store.get()});
  }
}

SourceStream::SourceStream(const LoaderSource& source, const std::string& key, Split split, uint64_t seed,
                           bool shuffle)
    : setting_(source.setting), seed_(seed), shuffle_(shuffle) {
  const DataConfig& c = setting_.data;
  const IndexedDataset& data = source.store->split(split);
  windows_ = make_windows(data, c.extended_length);
  if (windows_.size() == 0)
    throw InputError((key.empty() ? "" : key + ": ") + source.store->dir() + ": the " + split_name(split) +
                     " split has no document of at least L_e = " + std::to_string(c.extended_length) +
                     " tokens (data.extended_length); " + describe(windows_.stats, c.extended_length));
  sampler_ = std::make_unique<Sampler>(data, windows_, c);
}

std::shared_ptr<const std::vector<int64_t>> SourceStream::permutation(int64_t epoch) const {
  std::lock_guard lock(perm_mutex_);
  auto it = perms_.find(epoch);
  if (it != perms_.end()) return it->second;
  auto perm = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(windows_.size()));
  std::iota(perm->begin(), perm->end(), int64_t{0});
  if (shuffle_) {
    Rng rng(mix(seed_ ^ kPermutationStream, static_cast<uint64_t>(epoch)));
    for (size_t i = perm->size(); i > 1; --i) std::swap((*perm)[i - 1], (*perm)[rng.below(i)]);
  }
  // Builders work on at most a few neighbouring epochs at once.
  while (perms_.size() >= 4) perms_.erase(perms_.begin());
  perms_[epoch] = perm;
  return perm;
}

int64_t SourceStream::window_of(int64_t epoch, int64_t index) const {
  return (*permutation(epoch))[static_cast<size_t>(index)];
}

uint64_t SourceStream::key(int64_t epoch, int64_t index) const {
  return mix(seed_, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index));
}

Loader::Loader(const TokenStore& store, const DataConfig& config, const LoaderOptions& options)
    : Loader(single_source(store, config), config, options) {}

Loader::Loader(const std::vector<LoaderSource>& sources, const DataConfig& config, const LoaderOptions& options)
    : options_(options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size)
    throw InputError("rank " + std::to_string(options.rank) + " is not in [0, world size " +
                     std::to_string(options.world_size) + ")");
  if (options.micro_batch_size < 1)
    throw InputError("micro batch size must be >= 1, got " + std::to_string(options.micro_batch_size));
  if (sources.empty()) throw InputError("data: no source to read");
  throw_first(mixture_problems(config));  // data/mixture.h: validated before, refused here too
  const auto& start = options.start.sources;
  if (!start.empty() && start.size() != sources.size())
    throw InputError("the data cursor has " + std::to_string(start.size()) + " source" + (start.size() == 1 ? "" : "s") +
                     " and the data section " + std::to_string(sources.size()) +
                     "; resume with the data section that wrote it");
  double total = 0;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const Cursor at = start.empty() ? Cursor{} : start[i];
    if (at.epoch < 0 || at.index < 0)
      throw InputError("data cursor must be non-negative, got epoch " + std::to_string(at.epoch) + ", index " +
                       std::to_string(at.index));
    const std::string key = config.mixture.empty() ? "" : source_key(config, i);  // a single store's messages as ever
    streams_.push_back(std::make_unique<SourceStream>(sources[i], key, options.split,
                                                      source_seed(options.seed, i), options.shuffle));
    drawn_.push_back(at.epoch * streams_.back()->samples_per_epoch() + at.index);
    total += sources[i].setting.weight;
    cumulative_.push_back(total);
    log::debug("data: ", streams_.back()->setting().name, ": ", split_name(options.split), " split: ",
               describe(streams_.back()->windows().stats, sources[i].setting.data.extended_length));
  }
  for (double& c : cumulative_) c /= total;

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

Sample Loader::sample(int64_t epoch, int64_t index, std::size_t source) const {
  const SourceStream& s = *streams_.at(source);
  return s.sampler().draw(s.window_of(epoch, index), s.key(epoch, index));
}

std::size_t Loader::source_of(int64_t g) const {
  if (streams_.size() == 1) return 0;
  const double u = Rng(mix(options_.seed ^ kSourceStream, static_cast<uint64_t>(g))).uniform();
  std::size_t last = 0;
  for (std::size_t i = 0; i < cumulative_.size(); ++i) {
    const bool weighted = cumulative_[i] > (i == 0 ? 0.0 : cumulative_[i - 1]);
    if (!weighted) continue;
    if (u < cumulative_[i]) return i;
    last = i;  // rounding left u past the last sum: the last weighted source
  }
  return last;
}

Loader::StreamSample Loader::stream_sample(int64_t g) const {
  if (options_.world_size * options_.micro_batch_size != 1)
    throw std::logic_error("Loader::stream_sample needs one sample a step on one rank");
  const Draw d = plan(g).draws.front();
  const int64_t n = streams_[static_cast<size_t>(d.source)]->samples_per_epoch();
  return {sample(d.sample / n, d.sample % n, static_cast<size_t>(d.source)), static_cast<size_t>(d.source)};
}

Loader::StepPlan Loader::plan(int64_t step) const {
  std::lock_guard lock(plan_mutex_);
  const int64_t step_samples = options_.world_size * options_.micro_batch_size;
  for (; planned_ <= step; ++planned_) {
    StepPlan p;
    // The stream's position is the number of samples drawn from every source so far.
    int64_t g = std::accumulate(drawn_.begin(), drawn_.end(), int64_t{0});
    for (int64_t k = 0; k < step_samples; ++k, ++g) {
      const std::size_t source = source_of(g);
      p.draws.push_back({static_cast<int32_t>(source), drawn_[source]++});
    }
    p.drawn_after = drawn_;
    plans_.emplace(planned_, std::move(p));
  }
  auto it = plans_.find(step);
  if (it == plans_.end()) throw std::logic_error("Loader::plan: step " + std::to_string(step) + " was taken before");
  StepPlan p = std::move(it->second);
  plans_.erase(it);
  return p;
}

Batch Loader::build(int64_t step) const {
  const int64_t B = options_.micro_batch_size, T = sample_length();
  const StepPlan p = plan(step);
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
  batch.sources.resize(static_cast<size_t>(B));
  batch.step_samples.assign(streams_.size(), 0);
  for (const Draw& d : p.draws) ++batch.step_samples[static_cast<size_t>(d.source)];
  std::vector<int32_t> offsets(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    const Draw& d = p.draws[static_cast<size_t>(options_.rank * B + b)];
    const SourceStream& s = *streams_[static_cast<size_t>(d.source)];
    const int64_t N = s.samples_per_epoch(), epoch = d.sample / N, index = d.sample % N;
    const int64_t window = s.window_of(epoch, index);
    const size_t at = static_cast<size_t>(b * T);
    s.sampler().draw(window, s.key(epoch, index),
                     {batch.tokens.data() + at, offsets.data(), batch.positions.data() + at,
                      batch.targets.data() + at, batch.loss_mask.data() + at});
    batch.docs[static_cast<size_t>(b)] = s.sampler().window_doc(window);
    batch.window_starts[static_cast<size_t>(b)] = s.sampler().window_start(window);
    batch.sources[static_cast<size_t>(b)] = d.source;
  }
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    const int64_t N = streams_[i]->samples_per_epoch();
    batch.cursor.sources.push_back({p.drawn_after[i] / N, p.drawn_after[i] % N});
  }
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
