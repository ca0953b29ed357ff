#include "trainer/train/run_checkpoint.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>

#include "common/atomic_write.h"
#include "common/error.h"
#include "common/file_io.h"
#include "common/log.h"
#include "models/modules/safetensors.h"
#include "trainer/config/model_ref.h"
#include "trainer/config/yaml_text.h"

namespace segtrain::trainer {
namespace {

using nlohmann::json;

std::optional<int64_t> step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.rfind("step-", 0) != 0 || is_incomplete_write(dir)) return std::nullopt;
  try {
    size_t used = 0;
    int64_t step = std::stoll(name.substr(5), &used);
    if (used == name.size() - 5) return step;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

namespace {

json cursor_json(const data::Cursor& c) { return {{"epoch", c.epoch}, {"index", c.index}}; }

// One store: {"epoch", "index"} (as before mixtures); a mixture: {"sources": [{"epoch", "index"}, ...]}.
json stream_cursor_json(const data::StreamCursor& c) {
  if (c.sources.size() <= 1) return cursor_json(c.sources.empty() ? data::Cursor{} : c.sources[0]);
  json sources = json::array();
  for (const auto& source : c.sources) sources.push_back(cursor_json(source));
  return {{"sources", sources}};
}

// data.mixture's YAML with each source's store as an absolute folder.
std::string comparable_mixture(const std::string& text) {
  try {
    YAML::Node list = YAML::Load(text);
    if (!list.IsSequence()) return text;
    for (auto item : list)
      if (item.IsMap() && item["store"] && item["store"].IsScalar())
        item["store"] = absolute_folder(item["store"].Scalar());
    YAML::Emitter out;
    out << YAML::Flow << list;
    return out.c_str();
  } catch (const YAML::Exception&) {
    return text;
  }
}

}  // namespace

std::string state_to_json(const TrainerState& s) {
  json j = {{"step", s.step},
            {"tokens", s.tokens},
            {"loss_tokens", s.loss_tokens},
            {"total_steps", s.total_steps},
            {"world_size", s.world_size},
            {"skipped_steps", s.skipped_steps},
            {"consecutive_bad_steps", s.consecutive_bad_steps},
            {"data_cursor", stream_cursor_json(s.cursor)},
            // The data stream is a pure function of (seed, epoch, index): the cursor is its
            // whole state. Dropout's generators are rng_state.json's (random_state.h).
            {"rng", "data keyed by (run.seed, epoch, index); dropout's generators in rng_state.json"}};
  if (s.train_seconds) j["train_seconds"] = *s.train_seconds;
  if (!s.source_tokens.empty()) {
    json sources = json::array();
    for (const auto& [name, tokens] : s.source_tokens) sources.push_back({{"name", name}, {"tokens", tokens}});
    j["source_tokens"] = sources;
  }
  if (!s.cpu_matmul.empty()) j["cpu_matmul"] = s.cpu_matmul;
  return j.dump(2) + "\n";
}

TrainerState state_from_json(const std::string& text, const std::string& source) {
  try {
    json j = json::parse(text);
    // Each count must be a JSON integer: nlohmann casts a float such as 1e300 to
    // int64_t, which is undefined (UBSan, fuzz_trainer_state); and none is negative.
    auto count = [&](const json& object, const char* key, std::optional<int64_t> fallback, int64_t least) {
      if (!object.contains(key) && fallback) return *fallback;
      const json& value = object.at(key);
      if (!value.is_number_integer() || value.get<int64_t>() < least)
        throw InputError(source + ": not a valid trainer state: \"" + key + "\" must be an integer >= " +
                         std::to_string(least) + ", got " + value.dump());
      return value.get<int64_t>();
    };
    TrainerState s;
    s.step = count(j, "step", std::nullopt, 0);
    s.tokens = count(j, "tokens", std::nullopt, 0);
    s.loss_tokens = count(j, "loss_tokens", 0, 0);
    s.total_steps = count(j, "total_steps", std::nullopt, 0);
    s.world_size = count(j, "world_size", 1, 1);
    s.skipped_steps = count(j, "skipped_steps", 0, 0);
    s.consecutive_bad_steps = count(j, "consecutive_bad_steps", 0, 0);
    s.train_seconds = std::nullopt;  // absent in checkpoints written before it existed
    if (j.contains("train_seconds")) {
      const json& seconds = j.at("train_seconds");
      if (!seconds.is_number() || !std::isfinite(seconds.get<double>()) || seconds.get<double>() < 0)
        throw InputError(source + ": not a valid trainer state: \"train_seconds\" must be a number >= 0, got " +
                         seconds.dump());
      s.train_seconds = seconds.get<double>();
    }
    const json& cursor = j.at("data_cursor");
    if (cursor.contains("sources")) {
      if (!cursor.at("sources").is_array())
        throw InputError(source + ": not a valid trainer state: \"data_cursor.sources\" must be a list");
      for (const json& c : cursor.at("sources"))
        s.cursor.sources.push_back({count(c, "epoch", std::nullopt, 0), count(c, "index", std::nullopt, 0)});
    } else {
      s.cursor.sources.push_back({count(cursor, "epoch", std::nullopt, 0), count(cursor, "index", std::nullopt, 0)});
    }
    if (j.contains("source_tokens")) {
      if (!j.at("source_tokens").is_array())
        throw InputError(source + ": not a valid trainer state: \"source_tokens\" must be a list");
      for (const json& t : j.at("source_tokens")) {
        if (!t.is_object() || !t.contains("name") || !t.at("name").is_string())
          throw InputError(source + ": not a valid trainer state: each of \"source_tokens\" needs a \"name\"");
        s.source_tokens.emplace_back(t.at("name").get<std::string>(), count(t, "tokens", std::nullopt, 0));
      }
    }
    if (j.contains("cpu_matmul")) {
      const json& matmul = j.at("cpu_matmul");
      if (!matmul.is_string() || (matmul != "bf16" && matmul != "fp32"))
        throw InputError(source + ": not a valid trainer state: \"cpu_matmul\" must be \"bf16\" or \"fp32\", got " +
                         matmul.dump());
      s.cpu_matmul = matmul.get<std::string>();
    }
    return s;
  } catch (const json::exception& e) {
    throw InputError(source + ": not a valid trainer state: " + e.what());
  }
}

void copy_to_host(CheckpointContent& content) {
  for (auto& part : content) part->copy_to_host();
}

fs::path shared_temp_dir(const fs::path& dir) { return dir.parent_path() / (dir.filename().string() + ".tmp-ranks"); }

void write_checkpoint_part(const fs::path& temp_dir, const fs::path& dir, const CheckpointContent& content) {
  try {
    for (const auto& part : content) part->write(temp_dir);
  } catch (const InputError&) {
    throw;
  } catch (const Interrupted&) {
    throw;
  } catch (const std::runtime_error& e) {  // a full disk, a quota: say which checkpoint and that none is lost
    throw std::runtime_error("checkpoint '" + dir.string() + "' not saved (earlier checkpoints are intact): " +
                             e.what());
  }
}

void commit_checkpoint(const fs::path& temp_dir, const fs::path& dir) {
  try {
    AtomicDir::adopt(temp_dir, dir).commit();
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("checkpoint '" + dir.string() + "' not saved (earlier checkpoints are intact): " +
                             e.what());
  }
}

std::optional<CheckpointRef> newest_checkpoint(const fs::path& run_dir) {
  std::vector<fs::path> candidates;
  if (fs::is_directory(run_dir / "checkpoints"))
    for (const auto& e : fs::directory_iterator(run_dir / "checkpoints"))
      if (e.is_directory() && step_of(e.path())) candidates.push_back(e.path());
  if (fs::exists(run_dir / "final" / "trainer_state.json")) candidates.push_back(run_dir / "final");
  std::optional<CheckpointRef> best;
  for (const auto& dir : candidates) {
    const fs::path state_file = dir / "trainer_state.json";
    if (!fs::exists(state_file)) continue;
    TrainerState state = state_from_json(read_file(state_file, "trainer state"), state_file.string());
    if (!best || state.step > best->state.step) best = CheckpointRef{dir, state};
  }
  return best;
}

void check_resume_compatible(const fs::path& checkpoint_dir, const Config& config, int64_t world_size,
                             const std::vector<std::string>& extra_keys) {
  const fs::path saved_config = checkpoint_dir / "config.yaml";
  YAML::Node saved;
  try {
    saved = YAML::Load(read_file(saved_config, "checkpoint config"));
  } catch (const YAML::Exception& e) {
    throw InputError(saved_config.string() + ": " + e.what());
  }
  const YAML::Node current = YAML::Load(to_yaml(config));
  std::vector<std::string> differences;
  // Optimizer hyperparameters, logging and evaluation settings may change on resume.
  std::vector<std::string> keys = keys_with(KeyRole::resume);
  keys.insert(keys.end(), extra_keys.begin(), extra_keys.end());
  // A run records its folders absolute (trainer_setup.cpp); the config may name them relative: the
  // folders are compared, not their spellings.
  auto comparable = [](const std::string& key, const std::string& text) {
    if (key == "data.mixture") return comparable_mixture(text);
    if (key != "data.store" && key != "model.init") return text;
    std::string value = text;  // key_text is YAML: a path that YAML quotes is read back first
    try {
      if (const YAML::Node node = YAML::Load(text); node.IsScalar()) value = node.Scalar();
    } catch (const YAML::Exception&) {
    }
    return key == "data.store" ? absolute_folder(value) : with_absolute_folder(value);
  };
  // A key the checkpoint's segtrain did not have yet (train.freeze) had its default then.
  const YAML::Node defaults = YAML::Load(to_yaml(Config{}));
  for (const auto& key : keys) {
    std::string then = key_text(saved, key);
    if (then == "(missing)") then = key_text(defaults, key);
    const std::string now = key_text(current, key);
    if (comparable(key, then) != comparable(key, now))
      differences.push_back(key + ": checkpoint has " + then + ", config has " + now);
  }
  const TrainerState state =
      state_from_json(read_file(checkpoint_dir / "trainer_state.json", "trainer state"), (checkpoint_dir / "trainer_state.json").string());
  // Sequences per optimizer step over all ranks; the loader's cursor counts them.
  auto count = [&](const YAML::Node& c, const std::string& key) {
    const std::string text = key_text(c, key);
    try {
      size_t used = 0;
      const int64_t v = std::stoll(text, &used);
      if (used == text.size() && v >= 1) return v;
    } catch (const std::exception&) {
    }
    throw InputError(saved_config.string() + ": " + key + " is " + text + ", expected an integer >= 1");
  };
  // train.global_batch_size where set (micro_batch_size may be auto then), else the product.
  auto global_batch = [&](const YAML::Node& c, int64_t ranks) {
    if (const std::string global = key_text(c, "train.global_batch_size");
        global != "(missing)" && global != "null" && global != "~" && !global.empty())
      return std::make_pair(count(c, "train.global_batch_size"), "global_batch_size " + global);
    const int64_t micro = count(c, "train.micro_batch_size"), accum = count(c, "train.grad_accum");
    return std::make_pair(micro * accum * ranks, "micro_batch_size " + std::to_string(micro) + " x grad_accum " +
                                                     std::to_string(accum) + " x " + std::to_string(ranks) +
                                                     (ranks == 1 ? " rank" : " ranks"));
  };
  const auto then = global_batch(saved, state.world_size), now = global_batch(current, world_size);
  if (then.first != now.first)
    differences.push_back("global batch: checkpoint has " + std::to_string(then.first) + " sequences a step (" +
                          then.second + "), this run has " + std::to_string(now.first) + " (" + now.second +
                          "); with another number of ranks, set train.grad_accum or train.micro_batch_size so the "
                          "product stays the same, or train.global_batch_size");
  if (!differences.empty()) {
    std::string message = "cannot resume from " + checkpoint_dir.string() + ": its config differs:";
    for (const auto& d : differences) message += "\n  " + d;
    throw InputError(message);
  }
}

std::optional<SavedOptimizerState> read_optimizer_state(const fs::path& dir) {
  const fs::path index_path = dir / kOptimizerIndex;
  if (fs::exists(index_path)) {
    const std::string expected = index_path.string() +
                                 ": expected {\"steps\": an integer >= 0, \"files\": [file names]}";
    json index;
    try {
      index = json::parse(read_file(index_path, "optimizer index"));
    } catch (const json::exception& e) {
      throw InputError(expected + ", not valid JSON (" + e.what() + ")");
    }
    const bool valid = index.is_object() && index.contains("steps") && index["steps"].is_number_integer() &&
                       index["steps"].get<int64_t>() >= 0 && index.contains("files") && index["files"].is_array() &&
                       std::all_of(index["files"].begin(), index["files"].end(), [](const json& f) { return f.is_string(); });
    if (!valid) throw InputError(expected);
    SavedOptimizerState saved(index["steps"].get<int64_t>(), dir.string());
    for (const auto& file : index["files"]) {
      const fs::path shard = path_inside(dir, file.get<std::string>(), index_path.string(), "files");
      saved.add(models::MappedSafetensors(shard.string()).tensors());
    }
    return saved;
  }
  const fs::path single = dir / "optimizer.safetensors";  // checkpoints saved before one file a rank
  if (!fs::exists(single)) return std::nullopt;
  const models::MappedSafetensors file(single.string());
  int64_t steps = 0;
  for (const auto& [key, t] : file.tensors())
    if (key.rfind("step.", 0) == 0 && t.numel() == 1) {
      steps = static_cast<int64_t>(t.to(at::kDouble).item<double>());
      break;
    }
  SavedOptimizerState saved(steps, single.string());
  saved.add(file.tensors());
  return saved;
}

void prune_checkpoints(const fs::path& run_dir, int64_t keep_last) {
  try {
    if (fs::is_directory(run_dir))
      for (const auto& e : fs::directory_iterator(run_dir))
        if (e.path().filename().string().rfind("final.tmp-", 0) == 0) {
          std::error_code ec;
          fs::remove_all(e.path(), ec);
        }
    const fs::path dir = run_dir / "checkpoints";
    if (!fs::is_directory(dir)) return;
    std::vector<std::pair<int64_t, fs::path>> steps;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (is_incomplete_write(e.path())) {
        std::error_code ec;
        fs::remove_all(e.path(), ec);
      } else if (auto step = step_of(e.path())) {
        steps.emplace_back(*step, e.path());
      }
    }
    if (keep_last <= 0 || static_cast<int64_t>(steps.size()) <= keep_last) return;
    std::sort(steps.begin(), steps.end());
    for (size_t i = 0; i + static_cast<size_t>(keep_last) < steps.size(); ++i) fs::remove_all(steps[i].second);
  } catch (const std::exception& e) {  // the checkpoints are saved; an old one left behind costs disk only
    log::warn("could not remove old checkpoints in ", run_dir.string(), ": ", e.what());
  }
}

}  // namespace segtrain::trainer
