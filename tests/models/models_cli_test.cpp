#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "models/model_io.h"
#include "models/positions.h"
#include "models/safetensors.h"
#include "reference.h"

namespace segtrain::models {
namespace {

using nlohmann::json;
using test::run;
const std::string kBin = SEGTRAIN_BIN;

json run_json(const std::vector<std::string>& args) {
  auto r = run(kBin, args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? json::parse(r.out) : json();
}

std::vector<double> values(const at::Tensor& t) {
  auto c = t.to(at::kDouble).contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

void expect_close(const json& got, const std::vector<double>& want, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i].get<double>(), want[i], rtol * std::abs(want[i])) << what << " " << i;
}

TEST(InspectAlibiPrecision, ReproducesSeed002Table2) {
  // Seed 002, Table 2: distinct ALiBi values of head 0 of 32 per 1000 positions.
  const int64_t table[9][3] = {{1000, 1000, 491}, {1000, 876, 129}, {1000, 604, 77}, {1000, 421, 53}, {1000, 394, 50},
                               {1000, 211, 28},   {1000, 211, 27},  {1000, 211, 27}, {192, 41, 6}};
  auto out = run_json({"inspect", "alibi-precision", "--heads", "32", "--head", "0", "--length", "8192", "--bucket", "1000"});
  ASSERT_EQ(out["per_head"].size(), 1u);
  const auto& buckets = out["per_head"][0]["buckets"];
  ASSERT_EQ(buckets.size(), 9u);
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(buckets[i]["start"], int64_t(i) * 1000);
    EXPECT_EQ(buckets[i]["fp32"], table[i][0]) << "bucket " << i;
    EXPECT_EQ(buckets[i]["fp16"], table[i][1]) << "bucket " << i;
    EXPECT_EQ(buckets[i]["bf16"], table[i][2]) << "bucket " << i;
  }
  EXPECT_EQ(run(kBin, {"inspect", "alibi-precision", "--heads", "4", "--head", "4", "--length", "10"}).exit_code, 2);
}

TEST(InspectPositions, ModelFolderWithExtensionOverrides) {
  const auto ref = test::reference_dir();
  const auto positions = json::parse(test::read_file(ref + "/positions.json"));
  auto bloom = run_json({"inspect", "positions", "--model", ref + "/bloom"});
  EXPECT_EQ(bloom["scheme"], "alibi");
  EXPECT_EQ(bloom["slopes"], positions["alibi"]["bloom_slopes"]["6"]);
  auto ntk = run_json({"inspect", "positions", "--model", ref + "/bloom", "--set", "model.extension.method=ntk_alibi",
                       "--set", "model.extension.factor=4"});
  expect_close(ntk["slopes"], values(ntk_alibi_slopes(6, 4.0)), 1e-6, "ntk_alibi");
  auto dynamic = run_json({"inspect", "positions", "--model", ref + "/bloom", "--length", "8192", "--set",
                           "model.extension.method=dynamic_interpolate", "--set", "model.extension.factor=4"});
  expect_close(dynamic["slopes"], values(alibi_slopes(6) * 0.25), 1e-6, "dynamic_interpolate at 4x the 2048 BLOOM length");

  auto yarn = run_json({"inspect", "positions", "--model", ref + "/gpt_neox", "--set", "model.extension.method=yarn",
                        "--set", "model.extension.factor=4"});
  EXPECT_EQ(yarn["scheme"], "rope");
  EXPECT_EQ(yarn["length"], 128);
  EXPECT_NEAR(yarn["attention_scale"].get<double>(), 0.1 * std::log(4.0) + 1, 1e-12);
  EXPECT_EQ(yarn["inv_freq"].size(), 3u);

  auto ape = run_json({"inspect", "positions", "--model", ref + "/gpt2", "--length", "5", "--set",
                       "model.extension.method=interpolate", "--set", "model.extension.factor=2"});
  EXPECT_EQ(ape["table_rows"], 64);
  EXPECT_EQ(ape["source_positions"], json({0.0, 0.5, 1.0, 1.5, 2.0}));
  auto model = load_model(ref + "/gpt2");
  auto wpe = model->wpe->weight.detach();
  expect_close(ape["rows"][1], values((wpe[0] + wpe[1]) / 2), 1e-5, "row 1 = mean of original rows 0 and 1");
  expect_close(ape["rows"][2], values(wpe[1]), 1e-6, "row 2 = original row 1");
}

TEST(InspectPositions, RunConfigResolvesAutoFromDataLengths) {
  test::TempDir dir;
  test::write_file(dir / "c.yaml",
                   "model: {arch: gpt_neox, d_model: 64, n_heads: 4, rope: {rotary_pct: 0.5},\n"
                   "        extension: {method: interpolate}}\n"
                   "data: {store: x, train_length: 64, extended_length: 256}\n");
  auto out = run_json({"inspect", "positions", "--config", dir / "c.yaml"});
  EXPECT_EQ(out["length"], 256);
  EXPECT_EQ(out["extension"]["factor"], 4.0);
  // head_dim 16, 8 rotary dims: theta^(-2i/8) / 4.
  std::vector<double> want;
  for (int i = 0; i < 4; ++i) want.push_back(std::pow(10000.0, -2.0 * i / 8) / 4);
  expect_close(out["inv_freq"], want, 1e-6, "linear PI");
  auto ntk = run_json({"inspect", "positions", "--config", dir / "c.yaml", "--set", "model.extension.method=ntk"});
  EXPECT_NEAR(ntk["base"].get<double>(), 10000.0 * std::pow(4.0, 8.0 / 6.0), 1e-6);
}

TEST(InspectPositions, RunConfigStartingFromAnHfFolderTakesItsArchitecture) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  test::write_file(dir / "c.yaml", "model: {init: \"hf:" + ref + "/bloom\", arch: bloom, extension: {method: ntk_alibi}}\n"
                   "data: {store: x, train_length: 32, extended_length: 64}\n");
  auto out = run_json({"inspect", "positions", "--config", dir / "c.yaml"});
  EXPECT_EQ(out["length"], 64);
  expect_close(out["slopes"], values(ntk_alibi_slopes(6, 2.0)), 1e-6, "6 heads from the folder, a = 64/32");
}

TEST(Export, FromHfFolderAndModelDirWithOverrides) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  auto r = run(kBin, {"export", "--model", ref + "/gpt2", "--out", dir / "gpt2x2", "--set",
                      "model.extension.method=interpolate", "--set", "model.extension.factor=2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto cfg = json::parse(test::read_file(dir / "gpt2x2/config.json"));
  EXPECT_EQ(cfg["n_positions"], 64);
  EXPECT_EQ(read_safetensors(dir / "gpt2x2/model.safetensors").at("transformer.wpe.weight").size(0), 64);

  auto model = load_model(ref + "/bloom");
  save_model_dir(model, dir / "run/final");
  r = run(kBin, {"export", "--model", dir / "run", "--out", dir / "bloom_hf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(test::read_file(dir / "bloom_hf/config.json"))["model_type"], "bloom");
}

TEST(Export, BadInputExitsTwoWithAMessage) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"export", "--model", dir / "none", "--out", dir / "o"}, "not a model directory"},
      {{"export", "--model", ref + "/gpt2", "--out", dir / "o", "--set", "model.d_model=8"}, "model.d_model"},
      {{"export", "--model", ref + "/bloom", "--out", dir / "o", "--set", "model.extension.method=yarn", "--set",
        "model.extension.factor=2"}, "does not apply"},
      {{"export", "--model", ref + "/gpt_neox", "--out", dir / "o", "--set", "model.extension.method=ntk"},
       "model.extension.factor"},
      {{"inspect", "positions", "--model", ref + "/gpt2", "--length", "40"}, "interpolate"},
  };
  for (const auto& [args, needle] : cases) {
    auto r = run(kBin, args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << needle << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace segtrain::models
