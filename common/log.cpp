#include "common/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <memory>
#include <mutex>

#include "common/error.h"

namespace segtrain::log {
namespace {

constexpr std::array<const char*, 6> kNames = {"trace", "debug", "info", "warn", "error", "off"};

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::trace: return spdlog::level::trace;
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::error: return spdlog::level::err;
    case Level::off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

std::mutex g_mutex;
std::shared_ptr<spdlog::logger> g_logger;
Level g_level = Level::info;
// Files runs add and remove (ScopedFile); dist_sink makes that safe while logging.
std::shared_ptr<spdlog::sinks::dist_sink_mt> g_files = std::make_shared<spdlog::sinks::dist_sink_mt>();
std::string g_rank_tag = "[rank 0] ";

std::shared_ptr<spdlog::sinks::basic_file_sink_mt> open_file(const std::string& path) {
  std::shared_ptr<spdlog::sinks::basic_file_sink_mt> file;
  try {
    file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  } catch (const spdlog::spdlog_ex& e) {
    throw InputError("cannot open log file '" + path + "': " + e.what());
  }
  file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] " + g_rank_tag + "%v");
  return file;
}

std::shared_ptr<spdlog::logger> make_logger(const Options& options) {
  std::vector<spdlog::sink_ptr> sinks;
  const std::string rank_tag = "[rank " + std::to_string(options.rank) + "] ";
  if (options.rank == 0 || options.console_all_ranks) {
    // Logs go to stderr so that a command's own output on stdout stays parseable.
    auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    console->set_pattern(options.console_all_ranks ? "[%H:%M:%S] [%^%l%$] " + rank_tag + "%v"
                                                   : "[%H:%M:%S] [%^%l%$] %v");
    sinks.push_back(console);
  }
  if (!options.file.empty()) sinks.push_back(open_file(options.file));
  sinks.push_back(g_files);
  auto logger = std::make_shared<spdlog::logger>("segtrain", sinks.begin(), sinks.end());
  logger->set_level(to_spdlog(options.level));
  // Every line reaches the files at once: a user tails train.log or experiment.log
  // during hours of work, and a killed process keeps what it logged.
  logger->flush_on(spdlog::level::trace);
  return logger;
}

std::shared_ptr<spdlog::logger> current() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_logger) g_logger = make_logger(Options{});
  return g_logger;
}

}  // namespace

Level parse_level(const std::string& name, const std::string& what) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (name == kNames[i]) return static_cast<Level>(i);
  throw InputError(what + ": unknown log level '" + name +
                   "'; expected one of trace, debug, info, warn, error, off");
}

const char* level_name(Level level) { return kNames[static_cast<size_t>(level)]; }

void init(const Options& options) {
  g_rank_tag = "[rank " + std::to_string(options.rank) + "] ";
  auto logger = make_logger(options);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_logger) g_logger->flush();
  g_logger = std::move(logger);
  g_level = options.level;
}

struct ScopedFile::Sink {
  std::shared_ptr<spdlog::sinks::basic_file_sink_mt> file;
};

ScopedFile::ScopedFile(const std::string& path) : sink_(std::make_unique<Sink>(Sink{open_file(path)})) {
  current();  // the logger exists before its first file
  g_files->add_sink(sink_->file);
}

ScopedFile::~ScopedFile() {
  try {
    sink_->file->flush();
  } catch (const std::exception&) {  // the error that unwinds us says what went wrong
  }
  g_files->remove_sink(sink_->file);
}

bool enabled(Level level) { return level >= g_level && level != Level::off; }

void write(Level level, const std::string& message) { current()->log(to_spdlog(level), message); }

void flush() { current()->flush(); }

std::string backend_versions() {
  return "spdlog " + std::to_string(SPDLOG_VER_MAJOR) + "." + std::to_string(SPDLOG_VER_MINOR) + "." +
         std::to_string(SPDLOG_VER_PATCH) + ", fmt " + std::to_string(FMT_VERSION);
}

}  // namespace segtrain::log
