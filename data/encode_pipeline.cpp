#include "data/encode_pipeline.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace segtrain::data {

namespace {

struct Chunk {
  int64_t index = 0;
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
  std::vector<int64_t> bytes;  // each document's text, for the caller's counts
};

}  // namespace

struct EncodePipeline::State {
  NextDocument next_document;
  EncodeFn encode;
  size_t chunk_bytes;
  int64_t capacity;  // chunks read and not yet handed over whole
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::shared_ptr<Chunk>> to_encode;         // read, waiting for an encoder
  std::map<int64_t, std::shared_ptr<Chunk>> encoded;    // waiting for the caller, by index
  int64_t in_flight = 0, chunks_read = 0;
  bool reading_done = false, stopping = false;
  std::exception_ptr failure;

  std::shared_ptr<Chunk> current;  // the caller's
  size_t position = 0;
  int64_t next_index = 0;
  EncodeStats handed;

  std::vector<std::thread> threads;

  void fail(std::exception_ptr e) {
    const std::lock_guard lock(mutex);
    if (!failure) failure = std::move(e);
    stopping = true;
    changed.notify_all();
  }

  void read() {
    try {
      for (;;) {
        auto chunk = std::make_shared<Chunk>();
        size_t bytes = 0;
        for (std::string text; bytes < chunk_bytes && next_document(text);) {
          bytes += text.size();
          chunk->texts.push_back(std::move(text));
        }
        std::unique_lock lock(mutex);
        if (chunk->texts.empty()) {
          reading_done = true;
          changed.notify_all();
          return;
        }
        // Bounded: wait until the caller has taken a chunk whole.
        changed.wait(lock, [&] { return stopping || in_flight < capacity; });
        if (stopping) return;
        chunk->index = chunks_read++;
        ++in_flight;
        to_encode.push_back(std::move(chunk));
        changed.notify_all();
      }
    } catch (...) {
      fail(std::current_exception());
    }
  }

  void encode_chunks() {
    try {
      for (;;) {
        std::shared_ptr<Chunk> chunk;
        {
          std::unique_lock lock(mutex);
          changed.wait(lock, [&] { return stopping || !to_encode.empty() || reading_done; });
          if (stopping || to_encode.empty()) return;
          chunk = std::move(to_encode.front());
          to_encode.pop_front();
        }
        chunk->ids.resize(chunk->texts.size());
        chunk->bytes.resize(chunk->texts.size());
        for (size_t d = 0; d < chunk->texts.size(); ++d) {
          encode(chunk->texts[d], chunk->ids[d]);
          chunk->bytes[d] = static_cast<int64_t>(chunk->texts[d].size());
          std::string().swap(chunk->texts[d]);  // its ids take its place
        }
        const std::lock_guard lock(mutex);
        encoded.emplace(chunk->index, std::move(chunk));
        changed.notify_all();
      }
    } catch (...) {
      fail(std::current_exception());
    }
  }
};

EncodePipeline::EncodePipeline(NextDocument next, EncodeFn encode, int64_t threads, size_t chunk_bytes)
    : state_(std::make_unique<State>()) {
  const int64_t encoders = default_threads(threads);
  state_->next_document = std::move(next);
  state_->encode = std::move(encode);
  state_->chunk_bytes = std::max<size_t>(chunk_bytes, 1);
  state_->capacity = 2 * encoders + 1;
  state_->handed.threads = encoders;
  try {
    state_->threads.emplace_back([s = state_.get()] { s->read(); });
    for (int64_t t = 0; t < encoders; ++t) state_->threads.emplace_back([s = state_.get()] { s->encode_chunks(); });
  } catch (const std::system_error& e) {
    // The threads already started are stopped and joined: a joinable thread destroyed would terminate.
    {
      const std::lock_guard lock(state_->mutex);
      state_->stopping = true;
      state_->changed.notify_all();
    }
    for (auto& thread : state_->threads) thread.join();
    throw std::runtime_error("cannot start " + std::to_string(encoders + 1) + " threads (a reader and " +
                             std::to_string(encoders) + " encoders; --threads sets them): " + e.what());
  }
}

EncodePipeline::~EncodePipeline() {
  {
    const std::lock_guard lock(state_->mutex);
    state_->stopping = true;
    state_->changed.notify_all();
  }
  for (auto& thread : state_->threads) thread.join();
}

const std::vector<int32_t>* EncodePipeline::next() {
  State& s = *state_;
  if (!s.current || s.position >= s.current->ids.size()) {
    std::unique_lock lock(s.mutex);
    if (s.current) {  // taken whole: the reader may read another
      s.current.reset();
      --s.in_flight;
      s.changed.notify_all();
    }
    s.changed.wait(lock, [&] {
      return s.failure || s.encoded.count(s.next_index) || (s.reading_done && s.next_index == s.chunks_read);
    });
    if (s.failure) std::rethrow_exception(s.failure);
    const auto found = s.encoded.find(s.next_index);
    if (found == s.encoded.end()) return nullptr;  // every chunk handed over
    s.current = std::move(found->second);
    s.encoded.erase(found);
    ++s.next_index;
    s.position = 0;
  }
  const size_t d = s.position++;
  ++s.handed.documents;
  s.handed.bytes += s.current->bytes[d];
  s.handed.tokens += static_cast<int64_t>(s.current->ids[d].size());
  return &s.current->ids[d];
}

EncodeStats EncodePipeline::stats() const {
  EncodeStats out = state_->handed;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - state_->start).count();
  return out;
}

}  // namespace segtrain::data
