#include <gtest/gtest.h>

#include <cmath>

#include "trainer/train/lr_schedule.h"

namespace segtrain::trainer {
namespace {

TEST(LrSchedule, WarmupThenCosineReachesTheFloorAtTheLastStep) {
  LrSchedule s{Schedule::cosine, 1e-3, 1e-4, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);   // 1/10 of the peak
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);   // warmup ends at the peak
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);  // decay starts from the peak
  // Halfway through the decay the cosine is at the midpoint.
  const double mid = s.at(10 + 99 / 2);
  EXPECT_NEAR(mid, 1e-4 + 0.9e-3 * 0.5 * (1 + std::cos(M_PI * (49.0 / 99.0))), 1e-12);
  EXPECT_DOUBLE_EQ(s.at(109), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(500), 1e-4);  // past the end it stays at the floor
  for (int64_t i = 10; i < 109; ++i) EXPECT_GE(s.at(i), s.at(i + 1));
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule linear{Schedule::linear, 2.0, 0.0, 0, 11};
  EXPECT_DOUBLE_EQ(linear.at(0), 2.0);
  EXPECT_DOUBLE_EQ(linear.at(5), 1.0);
  EXPECT_DOUBLE_EQ(linear.at(10), 0.0);
  LrSchedule constant{Schedule::constant, 0.5, 0.1, 4, 100};
  EXPECT_DOUBLE_EQ(constant.at(1), 0.25);
  EXPECT_DOUBLE_EQ(constant.at(50), 0.5);
}

}  // namespace
}  // namespace segtrain::trainer
