#pragma once
// Documents encoded on every core while they are read and written (`segtrain prepare`): a
// reader thread pulls documents from the corpus into chunks of about `chunk_bytes`, `threads`
// encoder threads turn each chunk into token ids, and the caller takes the documents' ids in
// the corpus's order, so the store is the same byte for byte whatever the thread count. At
// most 2 x threads + 2 chunks exist at once (read, encoding, waiting, being written): memory is
// bounded by the chunk size, not by the corpus.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace segtrain::data {

class EncodePipeline {
 public:
  using NextDocument = std::function<bool(std::string&)>;
  // Starts the reader and the encoders at once. `next` runs on the reader thread alone;
  // `encode` (thread-safe) on the encoders; threads 0: all cores.
  EncodePipeline(NextDocument next, EncodeFn encode, int64_t threads, size_t chunk_bytes = size_t{4} << 20);
  // Stops the threads (a reader inside `next` finishes that document first) and joins them.
  ~EncodePipeline();
  EncodePipeline(const EncodePipeline&) = delete;
  EncodePipeline& operator=(const EncodePipeline&) = delete;

  // The next document's ids, valid until the following call; nullptr after the last. Rethrows
  // what `next` or `encode` threw, on the caller's thread.
  const std::vector<int32_t>* next();
  // Documents, text bytes and tokens handed to the caller so far, the seconds since the start
  // and the encoder threads.
  EncodeStats stats() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace segtrain::data
