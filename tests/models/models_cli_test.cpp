#include <gtest/gtest.h>
#include <set>
#include <nlohmann/json.hpp>

#include "common/enum_names.h"
#include "models/modules/kv_cache.h"
#include "models/modules/model_io.h"
#include "models/modules/positions.h"
#include "models/modules/safetensors.h"
#include "reference.h"

namespace segtrain::models {
namespace {

using nlohmann::json;
using test::kBin;
using test::run;
namespace fs = std::filesystem;

json run_json(const std::vector<std::string>& args) {
  auto r = run(kBin, args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? json::parse(r.out) : json();
}

std::vector<double> values(const at::Tensor& t) {
  auto c = t.to(at::kDouble).contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

void expect_close(const json& got, const std::vector<double>& want, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i].get<double>(), want[i], rtol * std::abs(want[i])) << what << " " << i;
}

// `segtrain generate` writes what transformers' generate(do_sample=False) writes, with
// its own KV cache, on a tiny model of every architecture and family and every RoPE scaling:
// prompts within the base's context and, for the scalings, one whose continuation
// crosses the original 64 positions (dynamic NTK and LongRoPE switch frequencies
// mid-generation, their cached keys keeping the old ones, as transformers' do).
TEST(Generate, GreedyTokensEqualTransformersGenerateOnEveryArchitectureAndScaling) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  // The 97-token models have no tokenizer segtrain reads (a word-level one): prompts as ids.
  auto ids = [](int64_t n, int64_t seed) {
    std::string text;
    for (int64_t i = 0; i < n; ++i) text += (i ? "," : "") + std::to_string(3 + (seed * 31 + i * 17) % 94);
    return text;
  };
  struct Case {
    std::string folder;
    std::vector<int64_t> prompt_lengths;
  };
  std::vector<Case> cases = {{"gpt2", {3, 12}}, {"gpt_neox", {4, 14}}, {"bloom", {5, 30}},   {"llama", {6, 40}},
                             {"llama_bias", {7, 20}}, {"qwen2", {9, 33}}, {"mistral", {10, 25}},
                             {"qwen3", {11, 30}}, {"phi3", {6, 40}},
                             // Prompts that stay below 64 positions or start past them: at the 65th
                             // token transformers' Phi-3 (not its Llama) drops its cache and recomputes
                             // every key with the long factors, where segtrain keeps the cached keys.
                             {"phi3_longrope", {8, 70}}};
  for (const char* scaling : {"none", "linear", "dynamic", "yarn", "llama3", "longrope"})
    cases.push_back({std::string("llama_rope_") + scaling, {8, 56}});  // 56 + 16 new: crosses 64
  const int64_t new_tokens = 16;
  std::vector<std::string> folders;
  std::vector<std::vector<std::vector<int64_t>>> ours(cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    const fs::path folder = dir.path() / cases[c].folder;
    fs::copy(ref + "/" + cases[c].folder, folder, fs::copy_options::recursive);
    json request = {{"prompts", json::array()}, {"max_new_tokens", new_tokens}};
    for (const int64_t length : cases[c].prompt_lengths) {
      const std::string out = (dir.path() / (cases[c].folder + "-" + std::to_string(length) + ".json")).string();
      auto r = run(kBin, {"generate", "--model", folder.string(), "--prompt-ids", ids(length, static_cast<int64_t>(c)),
                          "--max-new-tokens", std::to_string(new_tokens), "--out", out});
      ASSERT_EQ(r.exit_code, 0) << cases[c].folder << ": " << r.err;
      const json j = json::parse(test::read_file(out));
      ASSERT_EQ(j["prompt_ids"].size(), static_cast<size_t>(length)) << cases[c].folder;
      request["prompts"].push_back(j["prompt_ids"]);
      ours[c].push_back(j["output_ids"].get<std::vector<int64_t>>());
    }
    test::write_file(folder / "generate.json", request.dump());
    folders.push_back(folder.string());
  }
  std::string args = "generate";
  for (const auto& f : folders) args += " " + test::shell_quote(f);
  ASSERT_EQ(std::system((test::python_command(args) + " >/dev/null 2>" + test::shell_quote(dir / "python.err")).c_str()), 0)
      << test::read_file(dir / "python.err");
  for (size_t c = 0; c < cases.size(); ++c) {
    const json theirs = json::parse(test::read_file(fs::path(folders[c]) / "hf_generate.json"))["outputs"];
    for (size_t p = 0; p < ours[c].size(); ++p)
      EXPECT_EQ(ours[c][p], theirs[p].get<std::vector<int64_t>>())
          << cases[c].folder << ", prompt of " << cases[c].prompt_lengths[p] << " tokens";
  }
}

// With ALiBi every step's bias is built anew from the positions, so the cached
// decoding equals greedy decoding by whole forwards, dynamic slopes included; and a
// prompt that would run past a learned table is refused before any weights are read.
TEST(Generate, CachedDecodingEqualsWholeForwardsAndBadRequestsExitTwo) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  for (const char* method : {"dynamic_interpolate", "ntk_alibi"}) {
    auto stored = read_model_config(ref + "/bloom");
    stored.extension.method = *enum_from_name(kExtensionMethods, method);
    stored.extension.factor = 4.0;
    stored.extension.original_length = 16;
    auto model = load_model(ref + "/bloom", stored);
    model->eval();
    at::NoGradGuard no_grad;
    std::vector<int64_t> tokens = {5, 9, 14, 3, 77, 41, 8, 22, 60, 11};
    const size_t prompt = tokens.size();
    KvCache cache;
    auto row = [](const std::vector<int64_t>& v) { return at::tensor(v, at::kLong).view({1, -1}); };
    std::vector<int64_t> cached = tokens;
    std::vector<int64_t> step_tokens = tokens, step_positions(tokens.size());
    for (size_t i = 0; i < step_positions.size(); ++i) step_positions[i] = static_cast<int64_t>(i);
    for (int step = 0; step < 40; ++step) {  // 50 positions: past original_length 16
      auto h = model->decode(row(step_tokens), row(step_positions), cache);
      const int64_t next = model->logits(h.select(1, h.size(1) - 1)).argmax(-1).item<int64_t>();
      step_positions = {static_cast<int64_t>(cached.size())};
      cached.push_back(next);
      step_tokens = {next};
    }
    std::vector<int64_t> whole = tokens;
    while (whole.size() < cached.size()) {
      const auto ids = row(whole);
      const auto logits = model->forward(ids, at::arange(static_cast<int64_t>(whole.size())).view({1, -1}));
      whole.push_back(logits.select(1, logits.size(1) - 1).argmax(-1).item<int64_t>());
    }
    EXPECT_EQ(cached, whole) << method << " (prompt " << prompt << ")";
  }
  auto r = run(kBin, {"generate", "--model", ref + "/gpt2", "--prompt-ids", "5,6", "--max-new-tokens", "31"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("reach past the model's learned position table (32 rows)"), std::string::npos) << r.err;
  r = run(kBin, {"generate", "--model", ref + "/gpt2", "--prompt-ids", "5,97", "--max-new-tokens", "3"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("prompt token id 97 is outside the model's vocabulary of 97"), std::string::npos) << r.err;
  r = run(kBin, {"generate", "--model", ref + "/gpt2", "--max-new-tokens", "3", "--prompt", "hello"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("give one with --tokenizer DIR (or the prompt as --prompt-ids)"), std::string::npos) << r.err;
  r = run(kBin, {"generate", "--model", ref + "/llama", "--max-new-tokens", "3"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--prompt TEXT, --prompt-file FILE or --prompt-ids IDS"), std::string::npos) << r.err;
  // Ids in, ids out when there is no tokenizer to read them with.
  r = run(kBin, {"generate", "--model", ref + "/llama", "--prompt-ids", "5,9,33", "--max-new-tokens", "4",
                 "--out", dir / "g.json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(test::read_file(dir / "g.json"));
  EXPECT_EQ(j["prompt_ids"], json({5, 9, 33}));
  EXPECT_EQ(j["output_ids"].size(), 4u);
  std::string printed;
  for (const auto& id : j["output_ids"]) printed += (printed.empty() ? "" : " ") + std::to_string(id.get<int>());
  EXPECT_EQ(r.out, printed + "\n");
  // Sampling: the same seed writes the same tokens; top-k 1 at any temperature is greedy.
  auto sampled = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> args = {"generate", "--model", ref + "/llama", "--prompt-ids", "5,9,33",
                                     "--max-new-tokens", "12", "--ignore-eos"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto g = run(kBin, args);
    EXPECT_EQ(g.exit_code, 0) << g.err;
    return g.out;
  };
  const auto greedy = sampled({});
  EXPECT_EQ(sampled({"--temperature", "1.5", "--top-k", "10", "--seed", "7"}),
            sampled({"--temperature", "1.5", "--top-k", "10", "--seed", "7"}));
  EXPECT_EQ(sampled({"--temperature", "3", "--top-k", "1", "--seed", "7"}), greedy);
  std::set<std::string> seen;
  for (const char* seed : {"1", "2", "3", "4"}) seen.insert(sampled({"--temperature", "3", "--seed", seed}));
  EXPECT_GT(seen.size(), 1u) << "four seeds at temperature 3 wrote the same 12 tokens";
}

TEST(InspectAlibiPrecision, ReproducesSeed002Table2) {
  // Seed 002, Table 2: distinct ALiBi values of head 0 of 32 per 1000 positions.
  const int64_t table[9][3] = {{1000, 1000, 491}, {1000, 876, 129}, {1000, 604, 77}, {1000, 421, 53}, {1000, 394, 50},
                               {1000, 211, 28},   {1000, 211, 27},  {1000, 211, 27}, {192, 41, 6}};
  auto out = run_json({"inspect", "alibi-precision", "--heads", "32", "--head", "0", "--length", "8192", "--bucket", "1000"});
  ASSERT_EQ(out["per_head"].size(), 1u);
  const auto& buckets = out["per_head"][0]["buckets"];
  ASSERT_EQ(buckets.size(), 9u);
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(buckets[i]["start"], int64_t(i) * 1000);
    EXPECT_EQ(buckets[i]["fp32"], table[i][0]) << "bucket " << i;
    EXPECT_EQ(buckets[i]["fp16"], table[i][1]) << "bucket " << i;
    EXPECT_EQ(buckets[i]["bf16"], table[i][2]) << "bucket " << i;
  }
  EXPECT_EQ(run(kBin, {"inspect", "alibi-precision", "--heads", "4", "--head", "4", "--length", "10"}).exit_code, 2);
}

TEST(InspectPositions, ModelFolderWithExtensionOverrides) {
  const auto ref = test::reference_dir();
  const auto positions = json::parse(test::read_file(ref + "/positions.json"));
  auto bloom = run_json({"inspect", "positions", "--model", ref + "/bloom"});
  EXPECT_EQ(bloom["scheme"], "alibi");
  EXPECT_EQ(bloom["slopes"], positions["alibi"]["bloom_slopes"]["6"]);
  auto ntk = run_json({"inspect", "positions", "--model", ref + "/bloom", "--set", "model.extension.method=ntk_alibi",
                       "--set", "model.extension.factor=4"});
  expect_close(ntk["slopes"], values(ntk_alibi_slopes(6, 4.0)), 1e-6, "ntk_alibi");
  auto dynamic = run_json({"inspect", "positions", "--model", ref + "/bloom", "--length", "8192", "--set",
                           "model.extension.method=dynamic_interpolate", "--set", "model.extension.factor=4"});
  expect_close(dynamic["slopes"], values(alibi_slopes(6) * 0.25), 1e-6, "dynamic_interpolate at 4x the 2048 BLOOM length");

  auto yarn = run_json({"inspect", "positions", "--model", ref + "/gpt_neox", "--set", "model.extension.method=yarn",
                        "--set", "model.extension.factor=4"});
  EXPECT_EQ(yarn["scheme"], "rope");
  EXPECT_EQ(yarn["length"], 128);
  EXPECT_NEAR(yarn["attention_scale"].get<double>(), 0.1 * std::log(4.0) + 1, 1e-12);
  EXPECT_EQ(yarn["inv_freq"].size(), 3u);

  auto ape = run_json({"inspect", "positions", "--model", ref + "/gpt2", "--length", "5", "--set",
                       "model.extension.method=interpolate", "--set", "model.extension.factor=2"});
  EXPECT_EQ(ape["table_rows"], 64);
  EXPECT_EQ(ape["source_positions"], json({0.0, 0.5, 1.0, 1.5, 2.0}));
  auto model = load_model(ref + "/gpt2");
  auto wpe = model->wpe->weight.detach();
  expect_close(ape["rows"][1], values((wpe[0] + wpe[1]) / 2), 1e-5, "row 1 = mean of original rows 0 and 1");
  expect_close(ape["rows"][2], values(wpe[1]), 1e-6, "row 2 = original row 1");
}

// A checkpoint's own scaling (here 4.x-style rope_scaling, as Phi-3 and Llama 3.1
// hub configs write it) is what inspect shows: longrope's long factors past the
// original length, its sqrt(1 + ln f / ln L) attention scale, llama3's band.
TEST(InspectPositions, AnHfCheckpointsOwnRopeScaling) {
  const auto ref = test::reference_dir();
  const auto cfg = json::parse(test::read_file(ref + "/llama_rope_longrope/config.json"));
  const auto longrope = run_json({"inspect", "positions", "--model", ref + "/llama_rope_longrope"});
  EXPECT_EQ(longrope["extension"]["method"], "longrope");
  EXPECT_EQ(longrope["length"], 128);
  EXPECT_EQ(longrope["extension"]["longrope"]["factors_in_effect"], "long_factor");
  EXPECT_NEAR(longrope["attention_scale"].get<double>(), std::sqrt(1 + std::log(2.0) / std::log(64.0)), 1e-12);
  const auto long_factor = cfg["rope_scaling"]["long_factor"].get<std::vector<double>>();
  ASSERT_EQ(longrope["inv_freq"].size(), long_factor.size());
  for (size_t k = 0; k < long_factor.size(); ++k)
    EXPECT_NEAR(longrope["inv_freq"][k].get<double>(),
                1.0 / (long_factor[k] * std::pow(10000.0, 2.0 * static_cast<double>(k) / 16.0)), 1e-6) << k;
  const auto short_len = run_json({"inspect", "positions", "--model", ref + "/llama_rope_longrope", "--length", "64"});
  EXPECT_EQ(short_len["extension"]["longrope"]["factors_in_effect"], "short_factor");
  const auto llama3 = run_json({"inspect", "positions", "--model", ref + "/llama_rope_llama3"});
  EXPECT_EQ(llama3["extension"]["method"], "llama3");
  EXPECT_EQ(llama3["extension"]["llama3"]["high_freq_factor"], 4.0);
  EXPECT_EQ(llama3["attention_scale"], 1.0);
}

TEST(InspectPositions, RunConfigResolvesAutoFromDataLengths) {
  test::TempDir dir;
  test::write_file(dir / "c.yaml",
                   "model: {arch: gpt_neox, d_model: 64, n_heads: 4, rope: {rotary_pct: 0.5},\n"
                   "        extension: {method: interpolate}}\n"
                   "data: {store: x, train_length: 64, extended_length: 256}\n");
  auto out = run_json({"inspect", "positions", "--config", dir / "c.yaml"});
  EXPECT_EQ(out["length"], 256);
  EXPECT_EQ(out["extension"]["factor"], 4.0);
  // head_dim 16, 8 rotary dims: theta^(-2i/8) / 4.
  std::vector<double> want;
  for (int i = 0; i < 4; ++i) want.push_back(std::pow(10000.0, -2.0 * i / 8) / 4);
  expect_close(out["inv_freq"], want, 1e-6, "linear PI");
  auto ntk = run_json({"inspect", "positions", "--config", dir / "c.yaml", "--set", "model.extension.method=ntk"});
  EXPECT_NEAR(ntk["base"].get<double>(), 10000.0 * std::pow(4.0, 8.0 / 6.0), 1e-6);
}

// The folder gives the architecture, the heads and the length it was trained at (a
// BLOOM config has none: BLOOM's 2048), which factor auto extends from to L_e.
TEST(InspectPositions, RunConfigStartingFromAnHfFolderTakesItsArchitecture) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  test::write_file(dir / "c.yaml", "model: {init: \"hf:" + ref + "/bloom\", arch: bloom, extension: {method: ntk_alibi}}\n"
                   "data: {store: x, train_length: 32, extended_length: 4096}\n");
  auto out = run_json({"inspect", "positions", "--config", dir / "c.yaml"});
  EXPECT_EQ(out["length"], 4096);
  EXPECT_EQ(out["extension"]["original_length"], 2048);
  expect_close(out["slopes"], values(ntk_alibi_slopes(6, 2.0)), 1e-6, "6 heads from the folder, a = 4096/2048");
}

TEST(Export, FromHfFolderAndModelDirWithOverrides) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  auto r = run(kBin, {"export", "--model", ref + "/gpt2", "--out", dir / "gpt2x2", "--set",
                      "model.extension.method=interpolate", "--set", "model.extension.factor=2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto cfg = json::parse(test::read_file(dir / "gpt2x2/config.json"));
  EXPECT_EQ(cfg["n_positions"], 64);
  EXPECT_EQ(read_safetensors(dir / "gpt2x2/model.safetensors").at("transformer.wpe.weight").size(0), 64);

  auto model = load_model(ref + "/bloom");
  save_model_dir(model, dir / "run/final");
  r = run(kBin, {"export", "--model", dir / "run", "--out", dir / "bloom_hf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(test::read_file(dir / "bloom_hf/config.json"))["model_type"], "bloom");
  EXPECT_EQ((r.out + r.err).find("will not reproduce"), std::string::npos) << r.err;
  // An extension transformers' BLOOM cannot apply: written, recorded, and said (the family's note).
  r = run(kBin, {"export", "--model", dir / "run", "--out", dir / "bloom_ntk", "--set",
                 "model.extension.method=ntk_alibi", "--set", "model.extension.factor=2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE((r.out + r.err).find("transformers will not reproduce this model: transformers' BLOOM uses fixed ALiBi "
                                 "slopes"),
            std::string::npos)
      << r.out << r.err;
  EXPECT_FALSE(json::parse(test::read_file(dir / "bloom_ntk/config.json"))["segtrain"]["transformers_reproduces"]);
}

// `segtrain export` never deletes or replaces what it did not write (issue 33's cases):
// a folder holding a user's file, the model's own folder or one inside or around it, a
// file, the working directory; a previous export only with --overwrite. Each is refused
// with exit 2 before any weights are read, and every file stays as it was.
TEST(Export, NeverDeletesWhatItDidNotWrite) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  auto model = load_model(ref + "/gpt_neox");
  save_model_dir(model, dir / "run/final");
  test::write_file(dir / "run/metrics.jsonl", "{}\n");
  test::write_file(dir / "v/notes.txt", "keep\n");
  test::write_file(dir / "tiny.yaml", "run: {seed: 1}\n");
  auto refused = [&](const std::vector<std::string>& args, const std::string& needle) {
    auto r = run(kBin, args);
    EXPECT_EQ(r.exit_code, 2) << needle << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  };
  refused({"export", "--model", dir / "run", "--out", dir / "v"}, "holds notes.txt");
  refused({"export", "--model", dir / "run", "--out", dir / "v", "--overwrite"}, "holds notes.txt");
  refused({"export", "--model", dir / "run", "--out", dir / "run"}, "' is --model '");
  refused({"export", "--model", dir / "run", "--out", dir / "run/final/hf"}, "is inside --model");
  refused({"export", "--model", dir / "run/final", "--out", dir / "run/"}, "holds --model");
  refused({"export", "--model", dir / "run", "--out", dir / "tiny.yaml"}, "is a file");
  {
    const auto r = run("/bin/sh", {"-c", "cd " + test::shell_quote(dir.path().string()) + " && exec " +
                                             test::shell_quote(kBin) + " export --model run --out ."});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("holds --model"), std::string::npos) << r.err;
  }
  EXPECT_EQ(test::read_file(dir / "v/notes.txt"), "keep\n");
  EXPECT_EQ(test::read_file(dir / "tiny.yaml"), "run: {seed: 1}\n");
  EXPECT_TRUE(fs::exists(dir / "run/metrics.jsonl") && fs::exists(dir / "run/final"));
  // New and empty folders are written; a previous export is replaced only when asked.
  fs::create_directories(dir / "empty");
  for (const char* out : {"hf", "empty"}) {
    auto r = run(kBin, {"export", "--model", dir / "run", "--out", dir / out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  refused({"export", "--model", dir / "run", "--out", dir / "hf"}, "add --overwrite to replace it");
  auto r = run(kBin, {"export", "--model", dir / "run", "--out", dir / "hf", "--overwrite", "--dtype", "bfloat16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(test::read_file(dir / "hf/config.json"))["torch_dtype"], "bfloat16");
}

TEST(Export, BadInputExitsTwoWithAMessage) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"export", "--model", dir / "none", "--out", dir / "o"}, "not a model directory"},
      {{"export", "--model", ref + "/gpt2", "--out", dir / "o", "--set", "model.d_model=8"}, "model.d_model"},
      {{"export", "--model", ref + "/bloom", "--out", dir / "o", "--set", "model.extension.method=yarn", "--set",
        "model.extension.factor=2"}, "does not apply"},
      {{"export", "--model", ref + "/gpt_neox", "--out", dir / "o", "--set", "model.extension.method=ntk"},
       "model.extension.factor"},
      {{"inspect", "positions", "--model", ref + "/gpt2", "--length", "40"}, "interpolate"},
  };
  for (const auto& [args, needle] : cases) {
    auto r = run(kBin, args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << needle << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
}


// factor: auto means "reach L_e from the length the base was trained at" (issue 33):
// the reference Llama was trained at 64 positions, so L_e = 256 with L_t = 32 is a
// factor of 4 (not L_e / L_t = 8), and L_e = 64 fits it: 1, said in one line. A base
// that already has a YaRN extension (x2 from 64) is re-extended from its own 64.
// config check shows the base's shape and the resolved extension, and inspect
// positions --config resolves the same way.
TEST(FactorAuto, ReachesLeFromTheLengthTheBaseWasTrainedAt) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  test::make_store_stub(dir.path() / "store");
  auto config = [&](const std::string& base, int64_t le) {
    const std::string path = dir / (base + "-" + std::to_string(le) + ".yaml");
    test::write_file(path, "model: {init: \"hf:" + ref + "/" + base + "\", extension: {method: yarn}}\n"
                           "data: {store: " + (dir / "store") + ", train_length: 32, extended_length: " +
                           std::to_string(le) + ", sampler: {method: chunk, alpha: 0.25}}\n");
    return path;
  };
  const std::vector<std::tuple<std::string, int64_t, double>> cases = {
      {"llama", 256, 4.0}, {"llama", 64, 1.0}, {"llama_rope_yarn", 512, 8.0}};
  for (const auto& [base, le, factor] : cases) {
    const std::string what = base + " to " + std::to_string(le);
    auto checked = run(kBin, {"config", "check", config(base, le)});
    ASSERT_EQ(checked.exit_code, 0) << what << ": " << checked.err;
    EXPECT_NE(checked.out.find("d_model: 64"), std::string::npos) << what << ": " << checked.out;
    EXPECT_NE(checked.out.find("n_kv_heads: 2"), std::string::npos) << what << ": " << checked.out;
    EXPECT_NE(checked.out.find("original_length: 64"), std::string::npos) << what << ": " << checked.out;
    EXPECT_EQ(checked.err.find("factor auto = 1") != std::string::npos, factor == 1.0) << what << ": " << checked.err;
    const auto positions = run_json({"inspect", "positions", "--config", config(base, le)});
    EXPECT_EQ(positions["extension"]["original_length"], 64) << what;
    EXPECT_DOUBLE_EQ(positions["extension"]["factor"].get<double>(), factor) << what;
  }
}

// A synthetic corpus of 24 documents and its store (vocabulary 64) in dir/store, as a user makes them.
void make_small_store(const test::TempDir& dir) {
  auto synth = run(kBin, {"synth", "--out", dir / "corpus", "--docs", "24", "--min-tokens", "300", "--max-tokens",
                          "600", "--seed", "3"});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  auto prepare = run(kBin, {"prepare", "--input", dir / "corpus/train.jsonl", dir / "corpus/valid.jsonl", "--out",
                            dir / "store", "--vocab-size", "64"});
  ASSERT_EQ(prepare.exit_code, 0) << prepare.err;
}

// A chunk run from an hf: Phi-3 base keeps its LongRoPE, and its export is Phi-3 again
// (the checkpoint remembers the family it was read as) with fused q/k/v and gate/up,
// which transformers loads with segtrain's logits on positions past the original 64.
TEST(Phi3Cli, ChunkRunFromAnHfPhi3ExportsPhi3ThatTransformersLoads) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  ASSERT_NO_FATAL_FAILURE(make_small_store(dir));
  test::write_file(dir / "phi3.yaml",
                   "run: {name: phi3, output_dir: " + (dir / "phi3") + ", threads: 1}\n"
                   "model: {init: \"hf:" + ref + "/phi3_longrope\"}\n"
                   "data:\n  store: " + (dir / "store") + "\n  train_length: 64\n  extended_length: 128\n"
                   "  sampler: {method: chunk, alpha: 0.25}\n"
                   "train: {micro_batch_size: 2, lr: 1.0e-3, warmup_steps: 1, log_every: 1, checkpoint_every: 0,"
                   " tensorboard: false, budget: {tokens: 256}}\n"
                   "eval: {lengths: [64, 128], max_sequences: 2}\n");
  auto train = run(kBin, {"train", dir / "phi3.yaml"});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  EXPECT_EQ(read_model_config(dir / "phi3").extension.method, ExtensionMethod::longrope);
  auto exported = run(kBin, {"export", "--model", dir / "phi3", "--out", dir / "export"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const auto cfg = json::parse(test::read_file(dir / "export/config.json"));
  EXPECT_EQ(cfg["architectures"][0], "Phi3ForCausalLM");
  EXPECT_EQ(cfg["rope_scaling"]["type"], "longrope");
  EXPECT_EQ(read_safetensors(dir / "export/model.safetensors").count("model.layers.0.self_attn.qkv_proj.weight"), 1u);
  auto tokens = at::randint(64, {2, 64});
  auto positions = at::cat({at::arange(0, 16), at::arange(40, 56), at::arange(70, 86), at::arange(100, 116)}).repeat({2, 1});
  write_safetensors(dir / "export/input.safetensors", {{"tokens", tokens}, {"positions", positions}});
  test::hf_logits({dir / "export"});
  auto model = load_model(dir / "phi3");
  model->eval();
  torch::NoGradGuard no_grad;
  auto ours = model->forward(tokens, positions);
  EXPECT_LT(test::max_abs_diff(ours, read_safetensors(dir / "export/hf_logits.safetensors").at("logits")), 1e-4);
  auto before = load_model(ref + "/phi3_longrope");
  before->eval();
  EXPECT_GT(test::max_abs_diff(before->forward(tokens, positions), ours), 1e-6) << "the run changed nothing";
}

// model.arch llama end to end through the binary: a chunk run from an hf: Llama
// base (GQA) trains, evaluates and exports a folder that transformers loads with
// the logits segtrain's own run gives; HF folders evaluate directly; a Mistral
// sliding window shorter than the run's sequences is refused naming the key.
TEST(LlamaCli, ChunkRunFromAnHfLlamaTrainsAndExportsWhatTransformersLoads) {
  const auto ref = test::reference_dir();
  test::TempDir dir;
  ASSERT_NO_FATAL_FAILURE(make_small_store(dir));
  // No model.arch: a run takes its hf: base's architecture from config.json.
  auto config = [&](const std::string& name, const std::string& base) {
    const std::string path = dir / (name + ".yaml");
    test::write_file(path, "run: {name: " + name + ", output_dir: " + (dir / name) + ", threads: 1}\n"
                           "model: {init: \"hf:" + base + "\", extension: {method: interpolate}}\n"
                           "data:\n  store: " + (dir / "store") + "\n  train_length: 32\n  extended_length: 128\n"
                           "  sampler: {method: chunk, alpha: 0.25}\n"
                           "train: {micro_batch_size: 2, lr: 1.0e-3, warmup_steps: 1, log_every: 1, checkpoint_every: 0,"
                           " tensorboard: false, budget: {tokens: 256}}\n"
                           "eval: {lengths: [32, 64], max_sequences: 2}\n");
    return path;
  };
  auto train = run(kBin, {"train", config("llama", ref + "/llama")});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  // The reference folder's tokenizer is a WordLevel one segtrain does not read: the
  // store/model tokenizer check says it cannot compare them, and the run goes on.
  EXPECT_NE(train.err.find("has a tokenizer segtrain cannot read"), std::string::npos) << train.err;
  EXPECT_NE(train.err.find("WordLevel"), std::string::npos) << train.err;
  const auto eval = json::parse(test::read_file(dir / "llama/eval.json"));
  ASSERT_EQ(eval["results"].size(), 2u);
  EXPECT_TRUE(std::isfinite(eval["results"][1]["ppl"].get<double>()));
  const auto trained = read_model_config(dir / "llama");
  EXPECT_EQ(trained.arch, Arch::llama);
  EXPECT_EQ(*trained.n_kv_heads, 2);
  EXPECT_EQ(trained.extension.method, ExtensionMethod::interpolate);

  auto exported = run(kBin, {"export", "--model", dir / "llama", "--out", dir / "export"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const auto cfg = json::parse(test::read_file(dir / "export/config.json"));
  EXPECT_EQ(cfg["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(cfg["model_type"], "llama");
  EXPECT_EQ(cfg["rope_parameters"]["rope_type"], "linear");
  EXPECT_EQ(cfg["rope_parameters"]["factor"], 2.0);
  auto tokens = at::randint(64, {2, 64});
  auto positions = at::cat({at::arange(0, 16), at::arange(40, 56), at::arange(70, 86), at::arange(100, 116)}).repeat({2, 1});
  write_safetensors(dir / "export/input.safetensors", {{"tokens", tokens}, {"positions", positions}});
  test::hf_logits({dir / "export"});
  auto model = load_model(dir / "llama");
  model->eval();
  torch::NoGradGuard no_grad;
  auto ours = model->forward(tokens, positions);
  auto theirs = read_safetensors(dir / "export/hf_logits.safetensors").at("logits");
  EXPECT_LT(test::max_abs_diff(ours, theirs), 1e-4);
  // ... and that reloads into segtrain unchanged: the same extension and logits.
  auto back = load_model(dir / "export");
  EXPECT_EQ(back->config().extension.method, ExtensionMethod::interpolate);
  EXPECT_DOUBLE_EQ(factor_of(back->config()), 2.0);
  EXPECT_EQ(original_length_of(back->config()), 64);
  back->eval();
  EXPECT_LT(test::max_abs_diff(back->forward(tokens, positions), ours), 1e-6);
  // The same base extended with no scaling (positions up to L_e = 128 past its 64): the export says
  // the length the run trained for, and transformers loads it with segtrain's logits (issue 47).
  std::string plain = test::read_file(config("plain", ref + "/llama"));
  plain.replace(plain.find("method: interpolate"), std::string("method: interpolate").size(), "method: none");
  test::write_file(dir / "plain.yaml", plain);
  auto plain_train = run(kBin, {"train", dir / "plain.yaml"});
  ASSERT_EQ(plain_train.exit_code, 0) << plain_train.err;
  auto plain_export = run(kBin, {"export", "--model", dir / "plain", "--out", dir / "plain-export"});
  ASSERT_EQ(plain_export.exit_code, 0) << plain_export.err;
  const auto plain_cfg = json::parse(test::read_file(dir / "plain-export/config.json"));
  EXPECT_EQ(json::parse(test::read_file(ref + "/llama/config.json"))["max_position_embeddings"], 64);
  EXPECT_EQ(plain_cfg["max_position_embeddings"], 128) << "L_e, not the base's 64";
  EXPECT_TRUE(plain_cfg["rope_scaling"].is_null());
  write_safetensors(dir / "plain-export/input.safetensors", {{"tokens", tokens}, {"positions", positions}});
  test::hf_logits({dir / "plain-export"});
  auto plain_model = load_model(dir / "plain");
  plain_model->eval();
  EXPECT_LT(test::max_abs_diff(plain_model->forward(tokens, positions),
                               read_safetensors(dir / "plain-export/hf_logits.safetensors").at("logits")),
            1e-4);
  // 4.x's rope_scaling block beside 5.x's rope_parameters, with the same scaling.
  EXPECT_EQ(cfg["rope_scaling"]["rope_type"], "linear");
  EXPECT_EQ(cfg["rope_scaling"]["factor"], 2.0);
  EXPECT_EQ(cfg["max_position_embeddings"], 128);

  // The base's tokenizer files come along (followed from the run's model.init), and
  // transformers' AutoTokenizer reads the export as it reads the base.
  for (const std::string f : {"tokenizer.json", "tokenizer_config.json"})
    EXPECT_EQ(test::read_file(dir / ("export/" + f)), test::read_file(ref + "/llama/" + f)) << f;
  auto ids = [](const std::string& folder) {
    return run("sh", {"-c", test::python_command("tokenize " + test::shell_quote(folder) + " 'w5 w17 w96 nope'")}).out;
  };
  EXPECT_EQ(ids(dir / "export"), ids(ref + "/llama"));
  EXPECT_NE(ids(dir / "export").find("[5, 17, 96, 0]"), std::string::npos) << ids(dir / "export");

  // A checkpoint whose config.yaml no longer parses still exports its weights; only the
  // tokenizer files cannot follow, and the warning says why.
  fs::copy(dir / "llama/final", dir / "broken", fs::copy_options::recursive);
  test::write_file(dir / "broken/config.yaml", "model: [\n");
  auto broken = run(kBin, {"export", "--model", dir / "broken", "--out", dir / "export_broken"});
  EXPECT_EQ(broken.exit_code, 0) << broken.err;
  EXPECT_NE(broken.err.find("tokenizer files not copied"), std::string::npos) << broken.err;
  EXPECT_TRUE(fs::exists(dir / "export_broken/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "export_broken/tokenizer.json"));

  // bf16 and sharded on request: every tensor is the fp32 export's rounded to bf16,
  // the index names every shard, and transformers loads the folder.
  auto small = run(kBin, {"export", "--model", dir / "llama", "--out", dir / "export_bf16", "--dtype", "bfloat16",
                          "--max-shard-size", "20KB"});
  ASSERT_EQ(small.exit_code, 0) << small.err;
  const auto index = json::parse(test::read_file(dir / "export_bf16/model.safetensors.index.json"));
  const auto fp32 = read_safetensors(dir / "export/model.safetensors");
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
  EXPECT_GT(shards.size(), 2u);
  EXPECT_EQ(index["weight_map"].size(), fp32.size());
  const auto bf16 = read_safetensors_dir(dir / "export_bf16");
  for (const auto& [name, t] : fp32) {
    ASSERT_TRUE(bf16.count(name)) << name;
    EXPECT_EQ(bf16.at(name).scalar_type(), at::kBFloat16) << name;
    EXPECT_TRUE(at::equal(bf16.at(name), t.to(at::kBFloat16))) << name;
  }
  EXPECT_EQ(json::parse(test::read_file(dir / "export_bf16/config.json"))["torch_dtype"], "bfloat16");
  write_safetensors(dir / "export_bf16/input.safetensors", {{"tokens", tokens}, {"positions", positions}});
  test::hf_logits({dir / "export_bf16"});
  auto theirs_bf16 = read_safetensors(dir / "export_bf16/hf_logits.safetensors").at("logits");
  EXPECT_LT(test::max_abs_diff(ours, theirs_bf16), 0.1);  // bf16 weights and arithmetic
  auto bad_size = run(kBin, {"export", "--model", dir / "llama", "--out", dir / "o", "--max-shard-size", "5XB"});
  EXPECT_EQ(bad_size.exit_code, 2) << bad_size.err;
  EXPECT_NE(bad_size.err.find("--max-shard-size"), std::string::npos) << bad_size.err;
  EXPECT_FALSE(fs::exists(dir / "o"));

  // segtrain eval reads HF Llama-family folders as they are.
  auto hf_eval = run(kBin, {"eval", "--model", ref + "/qwen2", "--data", dir / "store", "--lengths", "32,64", "--out",
                            dir / "qwen2.json"});
  EXPECT_EQ(hf_eval.exit_code, 0) << hf_eval.err;

  // A sliding window shorter than the sequences: exit 2 naming the key, in train and eval.
  fs::create_directories(dir / "window_base");
  for (const std::string f : {"model.safetensors"}) fs::copy_file(ref + "/mistral/" + f, fs::path(dir / "window_base") / f);
  auto window = json::parse(test::read_file(ref + "/mistral/config.json"));
  window["sliding_window"] = 48;
  test::write_file(dir / "window_base/config.json", window.dump());
  auto refused = run(kBin, {"train", config("window", dir / "window_base")});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("sliding_window"), std::string::npos) << refused.err;
  refused = run(kBin, {"eval", "--model", dir / "window_base", "--data", dir / "store", "--lengths", "64", "--out",
                       dir / "w.json"});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("sliding_window"), std::string::npos) << refused.err;
  auto fits = run(kBin, {"eval", "--model", dir / "window_base", "--data", dir / "store", "--lengths", "32", "--out",
                         dir / "w.json"});
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
}

}  // namespace
}  // namespace segtrain::models
