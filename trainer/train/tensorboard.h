#pragma once
// TensorBoard scalars without protobuf: the event file is a TFRecord stream of
// hand-encoded `Event` messages (wall_time, step, summary{value{tag, simple_value}}).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

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

// A resumed run repeats the steps after its checkpoint: every event file in
// `dir` keeps only the events up to `step` (and its file_version record), so
// TensorBoard shows no duplicate points. A torn record at a file's end (a killed
// run) is dropped with what follows it. Files are rewritten atomically.
void keep_events_up_to(const std::filesystem::path& dir, int64_t step);

// The steps of the events in one file, in order (the file_version record is step 0); for tests.
std::vector<int64_t> event_steps(const std::filesystem::path& file);

// CRC-32C (Castagnoli), as TFRecord framing uses it; exposed for tests.
uint32_t crc32c(const void* data, size_t size);

}  // namespace segtrain::trainer
