// `segtrain sample`: dump what the configured sampler feeds the model (data/sample_dump.h).
#include "data/sample_dump.h"
#include "trainer/cli/command.h"
#include "trainer/config/config.h"

namespace segtrain::trainer::cli {

void add_sample(CLI::App& app, Chosen& chosen) {
  struct Options {
    std::string config, split = "train";
    std::vector<std::string> overrides;
    data::SampleDumpOptions dump;
  };
  auto o = std::make_shared<Options>();
  auto* s = app.add_subcommand("sample", "Dump what the configured sampler feeds the model, as JSON lines");
  s->add_option("config", o->config, "Run config (YAML)")->required();
  add_overrides(s, o->overrides);
  s->add_option("--count", o->dump.count, "Samples to write")->check(CLI::PositiveNumber);
  s->add_option("--out", o->dump.out, "Output .jsonl")->required();
  s->add_option("--split", o->split, "Store split")->check(CLI::IsMember({"train", "valid"}));
  choose_on(s, chosen, "sample", OnSignal::exit_now, [o] {
    const auto loaded = load_config(o->config, o->overrides, ConfigUse::sample);
    o->dump.seed = static_cast<uint64_t>(loaded.config.run.seed);
    o->dump.split = data::parse_split(o->split);
    data::write_sample_dump(data::TokenStore::open(loaded.config.data.store), loaded.config.data, o->dump);
    return 0;
  });
}

}  // namespace segtrain::trainer::cli
