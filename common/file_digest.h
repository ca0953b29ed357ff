#pragma once
// A file's content digest: how segtrain records that a file it depends on is the one it
// was made from (a store's inputs, a trained model's base).
#include <filesystem>
#include <string>
#include <vector>

namespace segtrain {

// XXH3-64 (xxHash) hashes faster than a disk reads; FNV-1a 64, byte by byte (about 1 GB/s),
// is what the records of earlier versions hold, and what experiment stores still record.
enum class DigestKind { xxh3_64, fnv1a64 };

// The name records store it under ("xxh3_64", "fnv1a64").
const char* digest_name(DigestKind kind);

// 16 hex digits. InputError naming the file if it cannot be read (with the OS's reason).
std::string file_digest(const std::filesystem::path& file, DigestKind kind = DigestKind::xxh3_64);

// The digests of several files, read on up to `threads` threads at once (a sharded
// base's files); in the order given. The first failure is thrown.
std::vector<std::string> file_digests(const std::vector<std::filesystem::path>& files, DigestKind kind,
                                      unsigned threads);

}  // namespace segtrain
