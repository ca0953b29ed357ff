// A converted run's record of its base (models/spec/base_record.h) and the digest it keeps
// (common/file_digest.h): XXH3-64 against values the Python xxhash package computes,
// FNV-1a records of earlier versions still checked, a changed base named.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "common/error.h"
#include "common/file_digest.h"
#include "models/spec/base_record.h"
#include "test_util.h"

namespace segtrain::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// 9 MiB + 7 bytes of a fixed pattern: longer than one 8 MiB read of file_digest.
std::string pattern() {
  std::string bytes(size_t{9} * 1024 * 1024 + 7, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131 + (i >> 11)) & 0xff);
  return bytes;
}

TEST(FileDigest, MatchesXxh3AndFnv1aOfAnIndependentImplementation) {
  test::TempDir dir;
  test::write_file(dir / "empty", "");
  test::write_file(dir / "pattern", pattern());
  // xxhash.xxh3_64_hexdigest (PyPI xxhash 4.1) of b"" and of the pattern; FNV-1a 64 in Python.
  EXPECT_EQ(file_digest(dir / "empty"), "2d06800538d394c2");
  EXPECT_EQ(file_digest(dir / "pattern"), "3cdde226adaf1ae7");
  EXPECT_EQ(file_digest(dir / "pattern", DigestKind::fnv1a64), "bd10cde0b7f11972");
  EXPECT_EQ(file_digests({dir / "pattern", dir / "empty", dir / "pattern"}, DigestKind::xxh3_64, 2),
            (std::vector<std::string>{"3cdde226adaf1ae7", "2d06800538d394c2", "3cdde226adaf1ae7"}));
  EXPECT_THROW(file_digests({dir / "empty", dir / "missing"}, DigestKind::xxh3_64, 2), InputError);
}

TEST(BaseRecord, RecordsXxh3ChecksEarlierFnvRecordsAndNamesAChangedFile) {
  test::TempDir dir;
  const fs::path base = dir / "base", model = dir / "model";
  fs::create_directories(model);
  test::write_file(base / "config.json", "{}");
  test::write_file(base / "model-00001-of-00002.safetensors", pattern());
  test::write_file(base / "model-00002-of-00002.safetensors", "shard two");
  test::write_file(base / "README.md", "not read by loading");
  const BaseRecord record = record_base(base.string());
  ASSERT_EQ(record.files.size(), 3u) << "weights and config, not the README";
  EXPECT_EQ(record.files[1].name, "model-00001-of-00002.safetensors");
  EXPECT_EQ(record.files[1].digest, "3cdde226adaf1ae7");
  const json written = json::parse(base_record_to_json(record));
  EXPECT_TRUE(written["files"][1].contains("xxh3_64")) << written.dump();
  test::write_file(model / kBaseFile, written.dump());
  EXPECT_EQ(read_base_record(model.string())->files.size(), 3u);

  // A base.json of an earlier version: FNV-1a digests, checked as FNV-1a.
  json earlier = written;
  for (auto& f : earlier["files"]) {
    f.erase("xxh3_64");
    f["fnv1a64"] = file_digest(base / f["name"].get<std::string>(), DigestKind::fnv1a64);
  }
  test::write_file(model / kBaseFile, earlier.dump());
  const auto read = read_base_record(model.string());
  ASSERT_TRUE(read);
  EXPECT_EQ(read->digest, DigestKind::fnv1a64);
  EXPECT_EQ(read->files[1].digest, "bd10cde0b7f11972");

  // The same size, other bytes: refused under either kind, naming the file.
  std::string changed = pattern();
  changed[12345] ^= 1;
  test::write_file(base / "model-00001-of-00002.safetensors", changed);
  for (const json& text : {written, earlier}) {
    test::write_file(model / kBaseFile, text.dump());
    try {
      read_base_record(model.string());
      ADD_FAILURE() << "a changed base was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("whose model-00001-of-00002.safetensors changed since (another digest)"),
                std::string::npos) << e.what();
    }
  }
}

// A record's sizes are integers: a float (1e300 would be an undefined cast to int64_t, which UBSan
// stops on; fuzz_base_record) or a string is refused in one line naming the file and the key.
TEST(BaseRecord, ASizeThatIsNotAnIntegerIsAnInputError) {
  for (const std::string bytes : {"1e300", "12.5", "\"12\""}) {
    const std::string text = "{\"folder\": \"x\", \"files\": [{\"name\": \"a\", \"bytes\": " + bytes +
                             ", \"xxh3_64\": \"0\"}]}";
    try {
      base_record_from_json(text, "base.json");
      ADD_FAILURE() << bytes << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("base.json: expected {"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("\"bytes\" must be an integer, got "), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(base_record_from_json("{\"folder\": \"x\", \"files\": [{\"name\": \"a\", \"bytes\": 12, "
                                  "\"xxh3_64\": \"0\"}]}",
                                  "base.json")
                .files.at(0)
                .bytes,
            12);
}

}  // namespace
}  // namespace segtrain::models
