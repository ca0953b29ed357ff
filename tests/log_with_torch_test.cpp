// Build test for the fmt clash: this translation unit sees LibTorch's bundled fmt
// headers and links the logger built on Debian's spdlog/fmt 9. It must compile,
// link and log correctly; if common/log.h ever leaked spdlog or fmt, this file
// would pick up the wrong fmt and fail to build or link.
#include <gtest/gtest.h>
#include <fmt/core.h>  // resolves to the fmt bundled with torch, as in every torch TU
#include <torch/torch.h>

#include "common/error.h"
#include "common/log.h"
#include "test_util.h"

namespace segtrain {
namespace {

TEST(LogWithTorch, TorchFmtAndSpdlogFmtCoexist) {
  // The two fmt versions really differ, which is the clash being guarded.
  const std::string backends = log::backend_versions();
  EXPECT_NE(backends.find("spdlog 1."), std::string::npos) << backends;
  EXPECT_EQ(backends.find("fmt " + std::to_string(FMT_VERSION)), std::string::npos)
      << "torch's fmt " << FMT_VERSION << " equals the logger's: " << backends;

  test::TempDir dir;
  log::Options options;
  options.level = log::Level::debug;
  options.rank = 3;
  options.file = dir / "rank-3.log";
  log::init(options);
  torch::Tensor t = torch::arange(1, 5, torch::kFloat32);
  log::info("sum=", t.sum().item<float>(), " shape=", t.sizes());
  log::debug("debug line");
  log::trace("trace line is below the level");
  log::flush();
  const std::string text = test::read_file(dir / "rank-3.log");
  EXPECT_NE(text.find("[info] [rank 3] sum=10 shape=[4]"), std::string::npos) << text;
  EXPECT_NE(text.find("[debug] [rank 3] debug line"), std::string::npos) << text;
  EXPECT_EQ(text.find("trace line"), std::string::npos) << text;
  log::init(log::Options{});
}

TEST(LogWithTorch, UnwritableLogFileIsAnInputError) {
  log::Options options;
  options.file = "/dev/null/x.log";  // a directory cannot be made under a device file
  EXPECT_THROW(log::init(options), InputError);
}

}  // namespace
}  // namespace segtrain
