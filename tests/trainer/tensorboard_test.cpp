// Our protobuf-free event files, read back by TensorBoard's own reader.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace segtrain::trainer
