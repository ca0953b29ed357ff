#pragma once
// What a command may write over, checked before it spends any work (README,
// "What segtrain writes"): a folder it fills is new, empty, or already its own
// (recognised by content); a file it writes goes into a folder that exists and
// is writable; a file is never replaced by a folder nor a folder by a file.
// Every refusal is one InputError naming the flag or key, the path and what to do.
#include <filesystem>
#include <functional>
#include <string>

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

}  // namespace segtrain
