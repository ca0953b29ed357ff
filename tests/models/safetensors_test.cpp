#include <gtest/gtest.h>

#include "common/error.h"
#include "models/modules/safetensors.h"
#include "reference.h"

namespace segtrain::models {
namespace {

namespace fs = std::filesystem;

TEST(Safetensors, RoundTripsEveryDtypeAndShape) {
  test::TempDir dir;
  TensorMap tensors = {{"a.f32", at::randn({3, 4})},
                       {"b.f16", at::randn({5}).to(at::kHalf)},
                       {"c.bf16", at::randn({2, 2, 2}).to(at::kBFloat16)},
                       {"d.i64", at::arange(7, at::kLong)},
                       {"e.scalar", at::full({}, 3.5, at::kDouble)},
                       {"f.empty", at::zeros({0, 3})},
                       {"g.transposed", at::randn({4, 3}).t()}};
  write_safetensors(dir / "x.safetensors", tensors, {{"format", "pt"}});
  std::map<std::string, std::string> meta;
  auto back = read_safetensors(dir / "x.safetensors", &meta);
  EXPECT_EQ(meta["format"], "pt");
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    EXPECT_EQ(back[name].scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(at::equal(back[name], t)) << name;
  }
  // The header is padded so the data starts 8-byte aligned.
  const std::string raw = test::read_file(dir / "x.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[i]);
  EXPECT_EQ(n % 8, 0u);
}

TEST(Safetensors, ShardedDirectoryWithIndexRoundTrips) {
  test::TempDir dir;
  TensorMap tensors;
  for (int i = 0; i < 6; ++i) tensors["layer." + std::to_string(i)] = at::randn({64});
  write_safetensors_dir(dir.path().string(), tensors, 600);
  EXPECT_TRUE(fs::exists(dir.path() / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir.path() / "model.safetensors"));
  auto back = read_safetensors_dir(dir.path().string());
  ASSERT_EQ(back.size(), 6u);
  for (const auto& [name, t] : tensors) EXPECT_TRUE(at::equal(back[name], t)) << name;
}

// An index names its shards; a name that is absolute or leaves the folder is refused,
// naming the index and the entry, before anything outside the folder is read.
TEST(Safetensors, AnIndexNamingAShardOutsideItsFolderIsRefused) {
  test::TempDir dir;
  const fs::path model = dir.path() / "model";
  write_safetensors_dir(model.string(), {{"w", at::randn({4})}}, 1);
  write_safetensors_dir((dir.path() / "outside").string(), {{"w", at::randn({4})}}, 1);
  std::string shard;
  for (const auto& e : fs::directory_iterator(dir.path() / "outside"))
    if (e.path().extension() == ".safetensors") shard = e.path().filename().string();
  ASSERT_FALSE(shard.empty());
  const fs::path index = model / "model.safetensors.index.json";
  for (const auto& [name, why] : std::vector<std::pair<std::string, std::string>>{
           {"../outside/" + shard, "it leaves the folder"},
           {(dir.path() / "outside" / shard).string(), "it is absolute"},
           {"sub/../../outside/" + shard, "it leaves the folder"}}) {
    test::write_file(index, R"({"metadata": {}, "weight_map": {"w": ")" + name + R"("}})");
    try {
      read_safetensors_dir(model.string());
      ADD_FAILURE() << name << ": read from outside the folder";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), index.string() + ": weight_map[\"w\"] is '" + name +
                                           "': expected the name of a file inside '" + model.string() + "' (" + why + ")");
    }
  }
  // A shard in a subfolder stays allowed.
  fs::create_directories(model / "shards");
  fs::copy_file(dir.path() / "outside" / shard, model / "shards" / shard);
  test::write_file(index, R"({"metadata": {}, "weight_map": {"w": "shards/)" + shard + R"("}})");
  EXPECT_EQ(read_safetensors_dir(model.string()).size(), 1u);
}

TEST(Safetensors, CorruptFilesAreInputErrorsNamingTheFile) {
  test::TempDir dir;
  const std::string path = dir / "bad.safetensors";
  auto expect_input_error = [&](const std::string& content, const std::string& what) {
    test::write_file(path, content);
    try {
      read_safetensors(path);
      ADD_FAILURE() << what << ": no error";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << what << ": " << e.what();
    }
  };
  expect_input_error("abc", "too short");
  expect_input_error(std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}", "header longer than file");
  const std::string bad_json = "{not json";
  expect_input_error(std::string(1, char(bad_json.size())) + std::string(7, '\0') + bad_json, "bad JSON");
  const std::string out_of_range = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  expect_input_error(std::string(1, char(out_of_range.size())) + std::string(7, '\0') + out_of_range + "1234",
                     "offsets past the data");
  const std::string bad_dtype = R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})";
  expect_input_error(std::string(1, char(bad_dtype.size())) + std::string(7, '\0') + bad_dtype + "x", "dtype");
  EXPECT_THROW(read_safetensors(dir / "missing.safetensors"), InputError);
  EXPECT_THROW(read_safetensors_dir(dir.path().string()), InputError);
}

}  // namespace
}  // namespace segtrain::models
