#pragma once
// Checked reads of whole files. Every reader of outside input (configs, JSON
// records, model folders) goes through here so a missing or unreadable file is
// always one InputError naming the path and the OS's reason.
#include <filesystem>
#include <string>

namespace segtrain {

// The whole file as bytes. `what` says what the file was expected to be
// ("config file", "trainer state"); the message names the path and the cause
// (errno's text, or that it is a directory).
std::string read_file(const std::filesystem::path& path, const std::string& what = "file");

// `folder / name` for a file name that a file inside `folder` gives (a shard of a
// safetensors index, the tokenizer a store's meta.json names). InputError naming
// `file` and `entry` when the name is empty, absolute, or leaves the folder by
// "..": a file may only point within its own folder. (Symbolic links inside the
// folder are followed as usual: HF caches link their blobs so.)
std::filesystem::path path_inside(const std::filesystem::path& folder, const std::string& name,
                                  const std::string& file, const std::string& entry);

}  // namespace segtrain
