#pragma once
// What a command may write over, checked before it spends any work (README,
// "What segtrain writes"): a folder it fills is new, empty, or already its own
// (recognised by content); a file it writes goes into a folder that exists and
// is writable; a file is never replaced by a folder nor a folder by a file.
// Every refusal is one InputError naming the flag or key, the path and what to do.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace segtrain {

// `what` names the flag or key ("--out", "run.output_dir"); `whose` says what
// the folder is for ("a token store"). `ours(entry)` tells an entry this command
// wrote there before; a folder holding any other entry is refused, naming up to
// three of them. A folder that does not exist yet needs a writable nearest
// existing ancestor.
void check_output_folder(const std::filesystem::path& dir, const std::string& what, const std::string& whose,
                         const std::function<bool(const std::filesystem::path& entry)>& ours);

// A file to be written (replaced when it exists): not a folder, and its folder
// exists and is writable.
void check_output_file(const std::filesystem::path& file, const std::string& what);

// A file or folder to be created or replaced at `path` (written beside it and renamed
// in): the nearest existing folder above it is writable (a read-only mount is refused
// here, not by the write).
void check_can_create(const std::filesystem::path& path, const std::string& what);

// Something a command reads: a file, or a folder and everything in it. `what`
// names it as the user gave it ("--data", "data.store", "the config").
struct CommandInput {
  std::filesystem::path path;
  std::string what;
};

// No command writes what it reads: an output (a file it writes, or a folder it
// fills) is refused when it is one of `inputs`, lies inside an input folder, or is
// a folder that holds an input. Compared by identity (device and inode) of what
// exists along each path, so links, `..` and hard links cannot slip past. Inputs
// that do not exist are left to their own checks.
void check_output_is_no_input(const std::filesystem::path& out, const std::string& what,
                              const std::vector<CommandInput>& inputs);

}  // namespace segtrain
