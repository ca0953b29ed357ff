// Our protobuf-free event files, read back by TensorBoard's own reader.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"
#include "trainer/train/tensorboard.h"

namespace segtrain::trainer {
namespace {

TEST(TensorBoard, Crc32cKnownAnswer) {
  // RFC 3720, B.4: CRC-32C of 32 bytes of zeros and of "123456789".
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
}

TEST(TensorBoard, EventsAreReadByTensorBoard) {
  test::TempDir dir;
  {
    TensorBoardWriter writer(dir.path() / "tb");
    for (int step = 1; step <= 3; ++step) {
      writer.scalar("train/loss", 4.0 / step, step);
      writer.scalar("train/lr", 1e-3 * step, step);
    }
    writer.flush();
  }
  const std::string script =
      "import sys\n"
      "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
      "acc = EventAccumulator(sys.argv[1]); acc.Reload()\n"
      "for tag in sorted(acc.Tags()['scalars']):\n"
      "    for e in acc.Scalars(tag): print(tag, e.step, repr(e.value))\n";
  test::write_file(dir.path() / "read.py", script);
  auto r = test::run(SEGTRAIN_PYTHON, {dir / "read.py", dir / "tb"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("train/loss 1 4.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("train/loss 3 1.3333333"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("train/lr 2 0.0020000"), std::string::npos) << r.out;
}

// Resuming at step 4 of a run that logged up to step 6 (then died mid-record):
// the events of steps 5 and 6 and the torn record go; TensorBoard's reader then
// sees each step once after the resumed run logs 5..7 in a new file.
TEST(TensorBoard, ResumeDropsTheEventsOfStepsThatRunAgain) {
  test::TempDir dir;
  const auto tb = dir.path() / "tb";
  std::filesystem::path first;
  {
    TensorBoardWriter writer(tb);
    first = writer.file();
    for (int step = 1; step <= 6; ++step) writer.scalar("train/loss", 10.0 + step, step);
    writer.flush();
  }
  {
    std::ofstream torn(first, std::ios::binary | std::ios::app);
    torn << std::string("\x20\x00\x00\x00\x00\x00\x00\x00garbage", 15);
  }
  keep_events_up_to(tb, 4);
  EXPECT_EQ(event_steps(first), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  keep_events_up_to(tb, 4);  // nothing more to drop: unchanged
  EXPECT_EQ(event_steps(first), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  std::filesystem::rename(first, tb / "events.out.tfevents.1.host");  // the resumed writer's file sorts after it
  {
    TensorBoardWriter writer(tb);
    for (int step = 5; step <= 7; ++step) writer.scalar("train/loss", 20.0 + step, step);
    writer.flush();
  }
  const std::string script =
      "import sys\n"
      "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
      "acc = EventAccumulator(sys.argv[1]); acc.Reload()\n"
      "print(' '.join(f'{e.step}:{e.value:g}' for e in acc.Scalars('train/loss')))\n";
  test::write_file(dir.path() / "read.py", script);
  auto r = test::run(SEGTRAIN_PYTHON, {dir / "read.py", tb.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1:11 2:12 3:13 4:14 5:25 6:26 7:27\n");
}

}  // namespace
}  // namespace segtrain::trainer
