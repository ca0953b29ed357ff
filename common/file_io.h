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

}  // namespace segtrain
