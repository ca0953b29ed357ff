#include "models/modules/safetensors.h"

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/file_io.h"

namespace segtrain::models {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct DtypeName {
  const char* name;
  at::ScalarType type;
};
constexpr DtypeName kDtypes[] = {{"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},
                                 {"BF16", at::kBFloat16}, {"I64", at::kLong}, {"I32", at::kInt},
                                 {"I16", at::kShort},   {"I8", at::kChar},   {"U8", at::kByte},
                                 {"BOOL", at::kBool}};

at::ScalarType dtype_from(const std::string& name, const std::string& where) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.type;
  throw InputError(where + ": unsupported safetensors dtype " + name);
}

const char* dtype_name(at::ScalarType type) {
  for (const auto& d : kDtypes)
    if (type == d.type) return d.name;
  throw std::runtime_error(std::string("safetensors: cannot write dtype ") + c10::toString(type));
}

}  // namespace

// A read-only mapping of a whole file: weights are copied out tensor by tensor, so
// a large checkpoint never sits in memory twice.
struct MappedFile {
  explicit MappedFile(const std::string& path) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(path + ": cannot open safetensors file");
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw InputError(path + ": cannot stat safetensors file");
    size = static_cast<uint64_t>(st.st_size);
    if (size > 0) {
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) throw InputError(path + ": cannot map safetensors file");
      data = static_cast<const char*>(p);
    }
  }
  // Reads the mapped bytes at `at` into `out` with pread(2) rather than through the
  // mapping: one large read the kernel serves at the disk's speed (page faults on a cold
  // mapping come 4 KiB at a time), and nothing stays resident in this process but `out`.
  void read_into(const char* at, uint64_t bytes, void* out, const std::string& path) const {
    auto offset = static_cast<off_t>(at - data);
    auto* dst = static_cast<char*>(out);
    while (bytes > 0) {
      const ssize_t n = ::pread(fd, dst, std::min<uint64_t>(bytes, uint64_t{1} << 30), offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw InputError(path + ": read failed: " + (n < 0 ? std::strerror(errno) : "the file is shorter now"));
      dst += n, offset += n, bytes -= static_cast<uint64_t>(n);
    }
  }
  ~MappedFile() {
    if (data) ::munmap(const_cast<char*>(data), size);
    if (fd >= 0) ::close(fd);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  int fd = -1;
  const char* data = nullptr;
  uint64_t size = 0;
};

MappedSafetensors::MappedSafetensors(const std::string& path) : path_(path), file_(std::make_shared<MappedFile>(path)) {
  const uint64_t file_size = file_->size;
  if (file_size < 8) throw InputError(path + ": too short for a safetensors file (needs an 8-byte header length)");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<unsigned char>(file_->data[i]);
  if (header_size > file_size - 8 || header_size > (uint64_t{100} << 20))
    throw InputError(path + ": safetensors header length " + std::to_string(header_size) +
                     " exceeds the file size " + std::to_string(file_size));
  json header;
  try {
    header = json::parse(file_->data + 8, file_->data + 8 + header_size);
  } catch (const json::exception& e) {
    throw InputError(path + ": safetensors header is not valid JSON (" + e.what() + ")");
  }
  if (!header.is_object()) throw InputError(path + ": safetensors header must be a JSON object");
  const uint64_t data_size = file_size - 8 - header_size;
  // Read-only pages: the views below are copied out of, never written.
  char* data = const_cast<char*>(file_->data) + 8 + header_size;

  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (info.is_object())
        for (const auto& [k, v] : info.items()) metadata_[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    const std::string where = path + ": tensor " + name;
    try {
      const auto type = dtype_from(info.at("dtype").get<std::string>(), where);
      // Integers only: nlohmann converts 1e300 to int64_t by a cast, which is undefined.
      for (const char* key : {"shape", "data_offsets"})
        if (!info.at(key).is_array() ||
            !std::all_of(info.at(key).begin(), info.at(key).end(), [](const json& v) { return v.is_number_integer(); }))
          throw InputError(where + ": " + key + " must be a list of integers");
      const auto shape = info.at("shape").get<std::vector<int64_t>>();
      const auto offsets = info.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size)
        throw InputError(where + ": data_offsets out of the file's data section");
      // The element count may not overflow (UBSan, fuzz_safetensors) nor wrap around
      // to the byte count of the offsets.
      int64_t numel = 1;
      for (auto s : shape) {
        if (s < 0) throw InputError(where + ": negative dimension");
        if (__builtin_mul_overflow(numel, s, &numel))
          throw InputError(where + ": shape has more elements than a 64-bit count holds");
      }
      uint64_t bytes = 0;
      if (__builtin_mul_overflow(static_cast<uint64_t>(numel), c10::elementSize(type), &bytes))
        throw InputError(where + ": shape has more bytes than a 64-bit size holds");
      if (bytes != offsets[1] - offsets[0])
        throw InputError(where + ": " + std::to_string(offsets[1] - offsets[0]) + " bytes for shape of " +
                         std::to_string(bytes) + " bytes");
      // Each view keeps the mapping alive; an empty tensor gets memory of its own
      // (a view at the end of the mapping would point past it).
      tensors_[name] = bytes ? at::from_blob(data + offsets[0], shape, [keep = file_](void*) {},
                                             at::TensorOptions().dtype(type))
                             : at::empty(shape, at::TensorOptions().dtype(type));
    } catch (const json::exception& e) {
      throw InputError(where + ": malformed header entry (" + e.what() + ")");
    }
  }
}

TensorSources MappedSafetensors::sources() const {
  TensorSources out;
  for (const auto& [name, view] : tensors_)
    out[name] = [file = file_, view, path = path_] {
      auto copy = at::empty(view.sizes(), view.options());
      if (view.nbytes() > 0)
        file->read_into(static_cast<const char*>(view.const_data_ptr()), view.nbytes(), copy.data_ptr(), path);
      return copy;
    };
  return out;
}

TensorMap read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  const MappedSafetensors file(path);
  if (metadata) metadata->insert(file.metadata().begin(), file.metadata().end());
  TensorMap out;
  for (const auto& [name, read] : file.sources()) out[name] = read();
  return out;
}

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  // Streamed tensor by tensor (device tensors come to the CPU one at a time, so
  // saving never holds a second copy of the weights) into a file that appears
  // whole or not at all.
  AtomicFile file(path);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>((text.size() >> (8 * i)) & 0xff);
  file.write(length, sizeof length);
  file.write(text.data(), text.size());
  for (const auto& [name, t] : tensors) {
    const auto c = t.detach().to(at::kCPU).contiguous();
    file.write(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
  }
  file.commit();
}

TensorMap read_safetensors_dir(const std::string& dir) {
  TensorMap out;
  for (const auto& [name, read] : open_safetensors_dir(dir)) out[name] = read();
  return out;
}

TensorSources open_safetensors_dir(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(single)) return MappedSafetensors(single.string()).sources();
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  if (!fs::exists(index_path))
    throw InputError(dir + ": no model.safetensors or model.safetensors.index.json (pytorch_model.bin is not supported)");
  json index;
  try {
    index = json::parse(read_file(index_path, "safetensors index"));
  } catch (const json::exception& e) {
    throw InputError(index_path.string() + ": not valid JSON (" + e.what() + ")");
  }
  if (!index.contains("weight_map") || !index["weight_map"].is_object())
    throw InputError(index_path.string() + ": expected a \"weight_map\" object");
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw InputError(index_path.string() + ": weight_map[" + name + "] must be a file name");
    by_file[file.get<std::string>()].push_back(name);
  }
  TensorSources out;
  for (const auto& [file, names] : by_file) {
    const fs::path shard_path = path_inside(dir, file, index_path.string(), "weight_map[\"" + names.front() + "\"]");
    auto shard = MappedSafetensors(shard_path.string()).sources();
    for (const auto& name : names) {
      auto it = shard.find(name);
      if (it == shard.end()) throw InputError((fs::path(dir) / file).string() + ": missing tensor " + name +
                                              " listed in model.safetensors.index.json");
      out[name] = std::move(it->second);
    }
  }
  return out;
}

void write_safetensors_dir(const std::string& dir, const TensorMap& tensors, int64_t max_shard_bytes) {
  fs::create_directories(dir);
  int64_t total = 0;
  for (const auto& [name, t] : tensors) total += t.numel() * t.element_size();
  if (max_shard_bytes <= 0 || total <= max_shard_bytes) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
    return;
  }
  std::vector<TensorMap> shards(1);
  int64_t current = 0;
  for (const auto& [name, t] : tensors) {
    const int64_t bytes = t.numel() * t.element_size();
    if (current > 0 && current + bytes > max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back()[name] = t;
    current += bytes;
  }
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char file[64];
    std::snprintf(file, sizeof(file), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    write_safetensors((fs::path(dir) / file).string(), shards[i], {{"format", "pt"}});
    for (const auto& [name, t] : shards[i]) weight_map[name] = file;
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomic(fs::path(dir) / "model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace segtrain::models
