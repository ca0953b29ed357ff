#include "trainer/train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "common/atomic_write.h"
#include "common/file_io.h"

namespace segtrain::trainer {
namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

uint32_t masked_crc(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Protobuf wire format, only what Event needs.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
template <class T>
void put_fixed(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // little-endian hosts only, as TensorBoard itself
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_varint(out, (field << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string event_header(int64_t step) {
  std::string e;
  put_varint(e, (1 << 3) | 1);  // wall_time: double
  put_fixed(e, now_seconds());
  put_varint(e, (2 << 3) | 0);  // step: int64
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

// Reads a varint at `pos`; false past the end.
bool get_varint(const std::string& in, size_t& pos, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && pos < in.size(); shift += 7) {
    const auto byte = static_cast<unsigned char>(in[pos++]);
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

// An Event's step (field 2); 0 when absent, as protobuf defaults it.
int64_t step_of_event(const std::string& event) {
  size_t pos = 0;
  while (pos < event.size()) {
    uint64_t tag = 0, value = 0;
    if (!get_varint(event, pos, tag)) break;
    switch (tag & 7) {
      case 0:
        if (!get_varint(event, pos, value)) return 0;
        if ((tag >> 3) == 2) return static_cast<int64_t>(value);
        break;
      case 1: pos += 8; break;
      case 5: pos += 4; break;
      case 2:
        if (!get_varint(event, pos, value)) return 0;
        pos += value;
        break;
      default: return 0;
    }
  }
  return 0;
}

// The complete, checksummed records of a TFRecord file, as (event bytes, whole frame).
std::vector<std::pair<std::string, std::string>> read_records(const std::filesystem::path& file) {
  const std::string in = read_file(file, "TensorBoard events");
  std::vector<std::pair<std::string, std::string>> records;
  size_t pos = 0;
  while (in.size() - pos >= 12) {
    uint64_t length = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, in.data() + pos, 8);
    std::memcpy(&length_crc, in.data() + pos + 8, 4);
    if (length_crc != masked_crc(&length, sizeof(length)) || length > in.size() - pos - 12 ||
        in.size() - pos - 12 - length < 4)
      break;
    const std::string event = in.substr(pos + 12, length);
    std::memcpy(&data_crc, in.data() + pos + 12 + length, 4);
    if (data_crc != masked_crc(event.data(), event.size())) break;
    records.emplace_back(event, in.substr(pos, 16 + length));
    pos += 16 + length;
  }
  return records;
}

bool is_event_file(const std::filesystem::path& p) {
  return p.filename().string().rfind("events.out.tfevents.", 0) == 0 && std::filesystem::is_regular_file(p);
}

}  // namespace

void keep_events_up_to(const std::filesystem::path& dir, int64_t step) {
  if (!std::filesystem::is_directory(dir)) return;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!is_event_file(entry.path())) continue;
    std::string kept;
    bool dropped = false;
    const auto records = read_records(entry.path());
    for (const auto& [event, frame] : records) {
      if (step_of_event(event) <= step) kept += frame;
      else dropped = true;
    }
    if (dropped || kept.size() != std::filesystem::file_size(entry.path())) write_file_atomic(entry.path(), kept);
  }
}

std::vector<int64_t> event_steps(const std::filesystem::path& file) {
  std::vector<int64_t> steps;
  for (const auto& record : read_records(file)) steps.push_back(step_of_event(record.first));
  return steps;
}

uint32_t crc32c(const void* data, size_t size) {
  static const auto table = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  file_ = dir / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) + "." + host);
  out_.open(file_, std::ios::binary | std::ios::app);
  if (!out_) throw std::runtime_error("cannot write '" + file_.string() + "': " + std::strerror(errno));
  std::string e = event_header(0);
  put_bytes(e, 3, "brain.Event:2");  // file_version
  record(e);
}

void TensorBoardWriter::scalar(const std::string& tag, double value, int64_t step) {
  std::string v;
  put_bytes(v, 1, tag);
  put_varint(v, (2 << 3) | 5);  // simple_value: float
  put_fixed(v, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_header(step);
  put_bytes(e, 5, summary);
  record(e);
}

void TensorBoardWriter::record(const std::string& event) {
  std::string frame;
  const uint64_t length = event.size();
  put_fixed(frame, length);
  put_fixed(frame, masked_crc(&length, sizeof(length)));
  frame += event;
  put_fixed(frame, masked_crc(event.data(), event.size()));
  out_.write(frame.data(), static_cast<std::streamsize>(frame.size()));
}

void TensorBoardWriter::flush() {
  out_.flush();
  if (!out_) throw std::runtime_error("cannot write '" + file_.string() + "': " + std::strerror(errno));
}

}  // namespace segtrain::trainer
