#include "data/windows.h"

#include <sstream>

#include "common/error.h"
#include "data/token_store.h"

namespace segtrain::data {

Windows make_windows(const IndexedDataset& split, int64_t length) {
  if (length < 1) throw InputError("window length must be >= 1, got " + std::to_string(length));
  Windows w;
  w.length = length;
  auto& s = w.stats;
  s.documents = split.documents();
  for (int64_t d = 0; d < split.documents(); ++d) {
    const int64_t n = split.length(d), count = n / length;
    if (count == 0) ++s.short_documents;
    else ++s.used_documents;
    for (int64_t k = 0; k < count; ++k) w.items.push_back({d, k * length});
    s.windows += count;
    s.discarded_tokens += n - count * length;
  }
  s.window_tokens = s.windows * length;
  return w;
}

std::string describe(const WindowStats& s, int64_t length) {
  std::ostringstream out;
  const int64_t total = s.window_tokens + s.discarded_tokens;
  out << s.windows << " windows of " << length << " tokens from " << s.used_documents << " of " << s.documents
      << " documents; " << s.short_documents << " shorter documents and "
      << (total ? 100.0 * static_cast<double>(s.discarded_tokens) / static_cast<double>(total) : 0.0)
      << "% of tokens discarded";
  return out.str();
}

}  // namespace segtrain::data
