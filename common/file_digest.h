#pragma once
// FNV-1a (64-bit) of a file's bytes: how segtrain records that a file it depends on
// is the one it was made from (a store's inputs, a trained model's base).
#include <filesystem>
#include <string>

namespace segtrain {

// 16 hex digits. InputError naming the file if it cannot be read (with the OS's reason).
std::string file_digest(const std::filesystem::path& file);

}  // namespace segtrain
