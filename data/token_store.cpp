#include "data/token_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/atomic_write.h"
#include "data/rng.h"

namespace segtrain::data {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr int64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

[[noreturn]] void fault(const std::string& file, const std::string& what) { throw InputError(file + ": " + what); }

template <class T>
T read_le(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // x86/ARM hosts are little endian like the format
  return v;
}

}  // namespace

// A read-only mmap of a whole file; an empty file maps to nothing.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fault(path, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) fault(path, "not a regular file");
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
      if (p == MAP_FAILED) fault(path, std::string("cannot mmap: ") + std::strerror(errno));
      data_ = static_cast<const unsigned char*>(p);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
    if (fd_ >= 0) ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::string path_;
  int fd_ = -1;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

TokenDtype dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < kUint16VocabLimit ? TokenDtype::uint16 : TokenDtype::int32;
}
int64_t dtype_bytes(TokenDtype dtype) { return dtype == TokenDtype::uint16 ? 2 : 4; }
const char* dtype_name(TokenDtype dtype) { return dtype == TokenDtype::uint16 ? "uint16" : "int32"; }

IndexedDataset::IndexedDataset() = default;
IndexedDataset::IndexedDataset(IndexedDataset&&) noexcept = default;
IndexedDataset& IndexedDataset::operator=(IndexedDataset&&) noexcept = default;
IndexedDataset::~IndexedDataset() = default;

namespace {

// A Megatron .idx laid out: its token type and where its three arrays start.
struct IdxLayout {
  TokenDtype dtype = TokenDtype::uint16;
  int64_t sequences = 0, doc_indices = 0;
  const unsigned char* sizes = nullptr;     // int32 per sequence, in tokens
  const unsigned char* pointers = nullptr;  // int64 per sequence, in bytes of .bin
  const unsigned char* docs = nullptr;      // int64 per document boundary, in sequences
};

// The header, and that the file holds exactly what it declares (every count is
// bounded by the file length before it is multiplied: a garbage header cannot overflow).
IdxLayout read_idx_layout(const std::string& idx_path, const unsigned char* p, int64_t idx_size) {
  if (idx_size < kHeaderBytes)
    fault(idx_path, "truncated header: " + std::to_string(idx_size) + " bytes, a Megatron .idx has at least " +
                        std::to_string(kHeaderBytes));
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0)
    fault(idx_path, "bad magic: not a Megatron indexed dataset (expected \"MMIDIDX\\0\\0\")");
  const auto version = read_le<uint64_t>(p + 9);
  if (version != 1) fault(idx_path, "unsupported version " + std::to_string(version) + " (expected 1)");
  const uint8_t code = p[17];
  if (code != static_cast<uint8_t>(TokenDtype::uint16) && code != static_cast<uint8_t>(TokenDtype::int32))
    fault(idx_path, "unsupported dtype code " + std::to_string(code) + " (expected 8 = uint16 or 4 = int32)");
  const auto sequences = read_le<uint64_t>(p + 18);
  const auto doc_indices = read_le<uint64_t>(p + 26);
  const uint64_t limit = static_cast<uint64_t>(idx_size);
  const std::string declared = "the header declares " + std::to_string(sequences) + " sequences and " +
                               std::to_string(doc_indices) + " document indices";
  if (sequences > limit || doc_indices > limit)
    fault(idx_path, "sizes beyond the file length: " + declared + ", more than " + std::to_string(idx_size) +
                        " bytes can hold");
  if (const int64_t need = kHeaderBytes + 12 * static_cast<int64_t>(sequences) + 8 * static_cast<int64_t>(doc_indices);
      need > idx_size)
    fault(idx_path, "sizes beyond the file length: " + declared + ", which need " + std::to_string(need) +
                        " bytes, but the file has " + std::to_string(idx_size));
  IdxLayout l;
  l.dtype = static_cast<TokenDtype>(code);
  l.sequences = static_cast<int64_t>(sequences);
  l.doc_indices = static_cast<int64_t>(doc_indices);
  const int64_t needed = kHeaderBytes + 12 * l.sequences + 8 * l.doc_indices;
  // Newer Megatron-Core may append one mode byte per sequence; anything else is damage.
  if (idx_size != needed && idx_size != needed + l.sequences)
    fault(idx_path, std::to_string(idx_size - needed) + " unexpected bytes after the document index (expected " +
                        std::to_string(needed) + " bytes in all)");
  l.sizes = p + kHeaderBytes;
  l.pointers = l.sizes + 4 * l.sequences;
  l.docs = l.pointers + 8 * l.sequences;
  return l;
}

// Each sequence's first token and size, checked against the .bin: sizes not negative,
// pointers monotonic, aligned to the item and inside the file.
void read_sequences(const IdxLayout& l, const std::string& idx_path, const std::string& bin_path, int64_t bin_size,
                    std::vector<int64_t>& seq_begin, std::vector<int64_t>& seq_size) {
  const int64_t item = dtype_bytes(l.dtype);
  int64_t previous_end = 0;
  seq_begin.assign(static_cast<size_t>(l.sequences), 0);
  seq_size.assign(static_cast<size_t>(l.sequences), 0);
  for (int64_t i = 0; i < l.sequences; ++i) {
    const int64_t size = read_le<int32_t>(l.sizes + 4 * i);
    const int64_t ptr = read_le<int64_t>(l.pointers + 8 * i);
    if (size < 0) fault(idx_path, "sequence " + std::to_string(i) + " has negative size " + std::to_string(size));
    if (ptr < previous_end)
      fault(idx_path, "non-monotonic pointers: sequence " + std::to_string(i) + " starts at byte " +
                          std::to_string(ptr) + ", before the end of the previous sequence at byte " +
                          std::to_string(previous_end));
    if (ptr % item != 0)
      fault(idx_path, "pointer of sequence " + std::to_string(i) + " (" + std::to_string(ptr) +
                          ") is not a multiple of the " + dtype_name(l.dtype) + " item size");
    // ptr > bin_size - bytes rather than ptr + bytes > bin_size: a pointer near 2^63
    // made the sum overflow (UBSan, fuzz_megatron_idx).
    if (ptr > bin_size)  // not even its start is in the .bin: the index does not describe this file
      fault(idx_path, "sequence " + std::to_string(i) + " starts at byte " + std::to_string(ptr) +
                          ", past the end of " + fs::path(bin_path).filename().string() + " (" +
                          std::to_string(bin_size) + " bytes): the index does not describe its .bin (a damaged "
                          ".idx, or one of another dataset)");
    if (ptr > bin_size - size * item)
      fault(bin_path, "truncated: sequence " + std::to_string(i) + " of " + std::to_string(size * item) +
                          " bytes starts at byte " + std::to_string(ptr) + " but the file has " +
                          std::to_string(bin_size) + " bytes");
    seq_begin[static_cast<size_t>(i)] = ptr / item;
    seq_size[static_cast<size_t>(i)] = size;
    previous_end = ptr + size * item;
  }
}

// Documents from the document index: each a contiguous run of sequences (first token, length).
void read_documents(const IdxLayout& l, const std::string& idx_path, const std::vector<int64_t>& seq_begin,
                    const std::vector<int64_t>& seq_size, std::vector<int64_t>& doc_begin,
                    std::vector<int64_t>& doc_length) {
  const int64_t S = l.sequences, D = l.doc_indices;
  if (D < 1 || read_le<int64_t>(l.docs) != 0)
    fault(idx_path, "the document index must start with 0 (one entry per document boundary)");
  for (int64_t d = 1; d < D; ++d) {
    const int64_t first = read_le<int64_t>(l.docs + 8 * (d - 1)), last = read_le<int64_t>(l.docs + 8 * d);
    if (last < first || last > S)
      fault(idx_path, "document index entry " + std::to_string(d) + " (" + std::to_string(last) +
                          ") is not in [" + std::to_string(first) + ", " + std::to_string(S) + "]");
    if (last == first) continue;  // Megatron writes no empty documents, but they are harmless
    int64_t length = 0;
    for (int64_t s = first; s < last; ++s) {
      const auto i = static_cast<size_t>(s);
      if (s > first && seq_begin[i] != seq_begin[i - 1] + seq_size[i - 1])
        fault(idx_path, "document " + std::to_string(d - 1) + " is not contiguous in the .bin");
      length += seq_size[i];
    }
    doc_begin.push_back(seq_begin[static_cast<size_t>(first)]);
    doc_length.push_back(length);
  }
  if (read_le<int64_t>(l.docs + 8 * (D - 1)) != S)
    fault(idx_path, "the document index ends at sequence " + std::to_string(read_le<int64_t>(l.docs + 8 * (D - 1))) +
                        ", expected the sequence count " + std::to_string(S));
}

// The largest token id, after one pass over every token: ids outside the vocabulary
// (vocab_size > 0) would index past the embedding table much later, far from the cause.
int32_t check_token_range(const IndexedDataset& ds, int64_t vocab_size, const std::string& bin_path) {
  int64_t lo = 0, hi = -1;
  for (int64_t d = 0; d < ds.documents(); ++d) {
    const int64_t n = ds.length(d);
    if (n == 0) continue;
    if (ds.dtype() == TokenDtype::uint16) {
      const uint16_t* t = ds.data<uint16_t>(d);
      hi = std::max<int64_t>(hi, *std::max_element(t, t + n));
    } else {
      const int32_t* t = ds.data<int32_t>(d);
      auto [mn, mx] = std::minmax_element(t, t + n);
      lo = std::min<int64_t>(lo, *mn);
      hi = std::max<int64_t>(hi, *mx);
    }
  }
  if (lo < 0 || (vocab_size > 0 && hi >= vocab_size)) {
    for (int64_t d = 0; d < ds.documents(); ++d)
      for (int64_t i = 0; i < ds.length(d); ++i) {
        const int32_t t = ds.token(d, i);
        if (t < 0 || (vocab_size > 0 && t >= vocab_size))
          fault(bin_path, "token id " + std::to_string(t) + " at document " + std::to_string(d) + ", offset " +
                              std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
      }
  }
  return static_cast<int32_t>(hi);
}

}  // namespace

IndexedDataset IndexedDataset::open(const std::string& prefix, int64_t vocab_size) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  IndexedDataset ds;
  ds.prefix_ = prefix;
  MappedFile idx(idx_path);
  const IdxLayout layout = read_idx_layout(idx_path, idx.data(), static_cast<int64_t>(idx.size()));
  ds.dtype_ = layout.dtype;
  auto bin = std::make_unique<MappedFile>(bin_path);
  std::vector<int64_t> seq_begin, seq_size;
  read_sequences(layout, idx_path, bin_path, static_cast<int64_t>(bin->size()), seq_begin, seq_size);
  read_documents(layout, idx_path, seq_begin, seq_size, ds.doc_begin_, ds.doc_length_);
  for (int64_t length : ds.doc_length_) ds.total_tokens_ += length;
  ds.base_ = bin->data();
  ds.bin_ = std::move(bin);
  ds.max_token_ = check_token_range(ds, vocab_size, bin_path);
  return ds;
}

void IndexedDataset::copy(int64_t doc, int64_t start, int64_t count, int32_t* out) const {
  if (dtype_ == TokenDtype::uint16) {
    const uint16_t* t = data<uint16_t>(doc) + start;
    std::copy(t, t + count, out);
  } else {
    const int32_t* t = data<int32_t>(doc) + start;
    std::copy(t, t + count, out);
  }
}

std::vector<int32_t> IndexedDataset::document(int64_t doc) const {
  std::vector<int32_t> out(static_cast<size_t>(length(doc)));
  copy(doc, 0, length(doc), out.data());
  return out;
}

// --- writer -------------------------------------------------------------------

struct IndexedDatasetWriter::Impl {
  explicit Impl(const std::string& prefix) : bin(prefix + ".bin") {}
  AtomicFile bin;
};

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDtype dtype)
    : prefix_(prefix), dtype_(dtype), impl_(std::make_unique<Impl>(prefix)) {}
IndexedDatasetWriter::~IndexedDatasetWriter() = default;

void IndexedDatasetWriter::add_document(std::span<const int32_t> tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    throw InputError(prefix_ + ".bin: a document of " + std::to_string(tokens.size()) +
                     " tokens exceeds the format's int32 sequence size");
  sizes_.push_back(static_cast<int32_t>(tokens.size()));
  pointers_.push_back(bytes_);
  if (dtype_ == TokenDtype::uint16) {
    narrow_.assign(tokens.begin(), tokens.end());
    impl_->bin.write(narrow_.data(), narrow_.size() * 2);
  } else {
    impl_->bin.write(tokens.data(), tokens.size() * 4);
  }
  bytes_ += static_cast<int64_t>(tokens.size()) * dtype_bytes(dtype_);
  tokens_ += static_cast<int64_t>(tokens.size());
}

void IndexedDatasetWriter::finish() {
  impl_->bin.commit();
  AtomicFile idx(prefix_ + ".idx");
  const uint64_t version = 1, S = sizes_.size(), D = sizes_.size() + 1;
  const auto code = static_cast<uint8_t>(dtype_);
  idx.write(kMagic, sizeof kMagic);
  idx.write(&version, 8);
  idx.write(&code, 1);
  idx.write(&S, 8);
  idx.write(&D, 8);
  idx.write(sizes_.data(), sizes_.size() * 4);
  idx.write(pointers_.data(), pointers_.size() * 8);
  std::vector<int64_t> doc_index(D);
  std::iota(doc_index.begin(), doc_index.end(), int64_t{0});
  idx.write(doc_index.data(), doc_index.size() * 8);
  idx.commit();
}

// --- store --------------------------------------------------------------------

Split parse_split(const std::string& name) {
  if (name == "train") return Split::train;
  if (name == "valid") return Split::valid;
  throw InputError("unknown split '" + name + "' (expected train or valid)");
}
const char* split_name(Split split) { return split == Split::train ? "train" : "valid"; }

std::string meta_json(const StoreMeta& m) {
  nlohmann::ordered_json j;
  j["vocab_size"] = m.vocab_size;
  j["tokenizer"] = m.tokenizer;
  j["eos_id"] = m.eos_id;
  j["bos_id"] = m.bos_id;
  j["add_bos"] = m.add_bos;
  if (!m.tokenizer_kind.empty()) j["tokenizer_kind"] = m.tokenizer_kind;
  j["documents"] = m.documents;
  j["tokens"] = m.tokens;
  j["dtype"] = dtype_name(m.dtype);
  j["splits"] = {{"train", {{"documents", m.train_documents}, {"tokens", m.train_tokens}}},
                 {"valid", {{"documents", m.valid_documents}, {"tokens", m.valid_tokens}}}};
  j["valid_fraction"] = m.valid_fraction;
  j["seed"] = m.seed;
  j["format"] = "megatron-indexed-dataset-v1";
  return j.dump(2) + "\n";
}

StoreMeta read_meta(const std::string& dir) {
  const std::string path = (fs::path(dir) / "meta.json").string();
  if (!fs::exists(path)) throw InputError(path + ": cannot open (is '" + dir + "' a store written by `segtrain prepare`?)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path, "store metadata"));
  } catch (const std::exception& e) {
    throw InputError(path + ": not valid JSON: " + e.what());
  }
  StoreMeta m;
  auto integer = [&](const char* key, bool required, int64_t fallback) -> int64_t {
    if (!j.is_object() || !j.contains(key)) {
      if (required) throw InputError(path + ": missing key '" + key + "' (expected an integer)");
      return fallback;
    }
    if (!j[key].is_number_integer()) throw InputError(path + ": key '" + key + "' must be an integer");
    return j[key].get<int64_t>();
  };
  m.vocab_size = integer("vocab_size", true, 0);
  if (m.vocab_size < 1) throw InputError(path + ": vocab_size must be >= 1, got " + std::to_string(m.vocab_size));
  m.eos_id = integer("eos_id", false, -1);
  if (m.eos_id >= m.vocab_size)
    throw InputError(path + ": eos_id " + std::to_string(m.eos_id) + " is outside the vocabulary");
  m.bos_id = integer("bos_id", false, -1);
  if (m.bos_id >= m.vocab_size)
    throw InputError(path + ": bos_id " + std::to_string(m.bos_id) + " is outside the vocabulary");
  if (j.contains("add_bos") && j["add_bos"].is_boolean()) m.add_bos = j["add_bos"].get<bool>() && m.bos_id >= 0;
  if (j.contains("tokenizer_kind") && j["tokenizer_kind"].is_string())
    m.tokenizer_kind = j["tokenizer_kind"].get<std::string>();
  m.documents = integer("documents", false, 0);
  m.tokens = integer("tokens", false, 0);
  m.seed = integer("seed", false, 0);
  if (j.contains("tokenizer") && j["tokenizer"].is_string()) m.tokenizer = j["tokenizer"].get<std::string>();
  if (j.contains("valid_fraction") && j["valid_fraction"].is_number()) m.valid_fraction = j["valid_fraction"].get<double>();
  m.dtype = dtype_for_vocab(m.vocab_size);
  return m;
}

TokenStore TokenStore::open(const std::string& dir) {
  TokenStore store;
  store.dir_ = dir;
  store.meta_ = read_meta(dir);
  store.train_ = IndexedDataset::open((fs::path(dir) / "train").string(), store.meta_.vocab_size);
  store.valid_ = IndexedDataset::open((fs::path(dir) / "valid").string(), store.meta_.vocab_size);
  auto& m = store.meta_;
  m.dtype = store.train_.dtype();
  m.train_documents = store.train_.documents();
  m.train_tokens = store.train_.tokens();
  m.valid_documents = store.valid_.documents();
  m.valid_tokens = store.valid_.tokens();
  m.documents = m.train_documents + m.valid_documents;
  m.tokens = m.train_tokens + m.valid_tokens;
  return store;
}

std::vector<uint8_t> choose_valid_documents(int64_t documents, double fraction, uint64_t seed) {
  std::vector<uint8_t> valid(static_cast<size_t>(documents), 0);
  if (documents < 2 || fraction <= 0) return valid;
  auto count = static_cast<int64_t>(std::llround(fraction * static_cast<double>(documents)));
  count = std::clamp<int64_t>(count, 1, documents - 1);
  std::vector<std::pair<uint64_t, int64_t>> keys(static_cast<size_t>(documents));
  for (int64_t d = 0; d < documents; ++d) keys[static_cast<size_t>(d)] = {mix(seed, static_cast<uint64_t>(d)), d};
  std::nth_element(keys.begin(), keys.begin() + count, keys.end());
  for (int64_t k = 0; k < count; ++k) valid[static_cast<size_t>(keys[static_cast<size_t>(k)].second)] = 1;
  return valid;
}

StoreMeta write_store(const std::string& dir, int64_t documents,
                      const std::function<std::span<const int32_t>(int64_t)>& document, StoreMeta meta,
                      double valid_fraction, uint64_t seed, const StoreFiles& files) {
  fs::create_directories(dir);
  meta.dtype = dtype_for_vocab(meta.vocab_size);
  const auto valid = choose_valid_documents(documents, valid_fraction, seed);
  IndexedDatasetWriter train((fs::path(dir) / "train").string(), meta.dtype);
  IndexedDatasetWriter held_out((fs::path(dir) / "valid").string(), meta.dtype);
  for (int64_t d = 0; d < documents; ++d) {
    auto tokens = document(d);
    for (int32_t t : tokens)
      if (t < 0 || t >= meta.vocab_size)
        throw InputError("document " + std::to_string(d) + " has token id " + std::to_string(t) +
                         " outside the vocabulary [0, " + std::to_string(meta.vocab_size) + ")");
    (valid[static_cast<size_t>(d)] ? held_out : train).add_document(tokens);
  }
  // Every document is written: from here a stale meta.json would vouch for half-replaced splits.
  fs::remove(fs::path(dir) / "meta.json");
  train.finish();
  held_out.finish();
  for (const auto& [name, bytes] : files) write_file_atomic(fs::path(dir) / name, bytes);
  meta.train_documents = train.documents();
  meta.train_tokens = train.tokens();
  meta.valid_documents = held_out.documents();
  meta.valid_tokens = held_out.tokens();
  meta.documents = documents;
  meta.tokens = meta.train_tokens + meta.valid_tokens;
  meta.valid_fraction = valid_fraction;
  meta.seed = static_cast<int64_t>(seed);
  write_file_atomic(fs::path(dir) / "meta.json", meta_json(meta));
  return meta;
}

}  // namespace segtrain::data
