#pragma once
// L_e windows (Karypis et al. 2024, 4.1): every document of at least L_e tokens is cut into
// floor(len / L_e) non-overlapping windows; remainders and shorter documents are
// discarded, so each window holds text of exactly one document. Eval uses the
// same cut with L = the evaluated length.
#include <cstdint>
#include <string>
#include <vector>

namespace segtrain::data {

class IndexedDataset;

struct Window {
  int64_t doc = 0;
  int64_t start = 0;  // token offset of the window in the document
};

struct WindowStats {
  int64_t documents = 0;          // in the split
  int64_t used_documents = 0;     // with at least one window
  int64_t short_documents = 0;    // shorter than L_e, discarded
  int64_t windows = 0;
  int64_t window_tokens = 0;      // windows * L_e
  int64_t discarded_tokens = 0;   // in short documents and remainders
};

struct Windows {
  int64_t length = 0;  // L_e
  std::vector<Window> items;
  WindowStats stats;
  int64_t size() const { return static_cast<int64_t>(items.size()); }
  const Window& operator[](int64_t i) const { return items[static_cast<size_t>(i)]; }
};

Windows make_windows(const IndexedDataset& split, int64_t length);

// "1234 windows of 512 tokens from 80 of 100 documents; 20 shorter documents and
// 3.1% of tokens discarded", for logs.
std::string describe(const WindowStats& stats, int64_t length);

}  // namespace segtrain::data
