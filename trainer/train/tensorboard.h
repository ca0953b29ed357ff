#pragma once
// TensorBoard scalars without protobuf: the event file is a TFRecord stream of
// hand-encoded `Event` messages (wall_time, step, summary{value{tag, simple_value}}).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace segtrain::trainer {

class TensorBoardWriter {
 public:
  // Creates DIR/events.out.tfevents.<unix time>.<host>.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  void scalar(const std::string& tag, double value, int64_t step);
  void flush();
  const std::filesystem::path& file() const { return file_; }

 private:
  void record(const std::string& event);
  std::filesystem::path file_;
  std::ofstream out_;
};

// CRC-32C (Castagnoli), as TFRecord framing uses it; exposed for tests.
uint32_t crc32c(const void* data, size_t size);

}  // namespace segtrain::trainer
