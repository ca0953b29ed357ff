// `segtrain sample`: dump what the configured sampler feeds the model, and/or
// print how often it feeds each offset of the window (data/sample_dump.h).
#include <iostream>

#include "common/error.h"
#include "common/output_path.h"
#include "data/sample_dump.h"
#include "trainer/cli/command.h"
#include "trainer/config/config.h"

namespace segtrain::trainer::cli {

void add_sample(CLI::App& app, Chosen& chosen) {
  struct Options {
    std::string config, split = "train";
    std::vector<std::string> overrides;
    data::SampleDumpOptions dump;
    bool coverage = false;
  };
  auto o = std::make_shared<Options>();
  auto* s = app.add_subcommand("sample", "Dump what the configured sampler feeds the model, as JSON lines");
  s->add_option("config", o->config, "Run config (YAML)")->required();
  add_overrides(s, o->overrides);
  auto* count = s->add_option("--count", o->dump.count, "Samples to write or measure (default 10; 20000 with --coverage)")
                    ->check(integer_at_least(1));
  s->add_option("--out", o->dump.out, "Output .jsonl");
  s->add_flag("--coverage", o->coverage,
              "Print how often each offset of the L_e window (and each position id) is fed: min / mean / max, "
              "the worst offsets and a bucketed profile");
  s->add_option("--split", o->split, "Store split")->check(CLI::IsMember({"train", "valid"}));
  choose_on(s, chosen, "sample", OnSignal::exit_now, [o, count] {
    if (o->dump.out.empty() && !o->coverage)
      throw InputError("segtrain sample: give --out FILE.jsonl (the samples), --coverage (their statistics), or both");
    if (!o->dump.out.empty()) check_output_file(o->dump.out, "--out");
    if (o->coverage && count->count() == 0) o->dump.count = 20000;
    const auto loaded = load_config(o->config, o->overrides, ConfigUse::sample);
    const data::DataConfig& d = loaded.config.data;
    if (!o->dump.out.empty()) {
      std::vector<CommandInput> inputs = {{o->config, "the config"}, {d.store, "data.store"}};
      for (std::size_t i = 0; i < d.mixture.size(); ++i)
        inputs.push_back({data::data_sources(d)[i].data.store, data::source_key(d, i) + ".store"});
      check_output_is_no_input(o->dump.out, "--out", inputs);
    }
    o->dump.seed = static_cast<uint64_t>(loaded.config.run.seed);
    o->dump.split = data::parse_split(o->split);
    const data::SourceStores stores(d);
    if (!o->dump.out.empty()) data::write_sample_dump(stores.sources(), d, o->dump);
    if (o->coverage) std::cout << data::sample_coverage(stores.sources(), d, o->dump) << std::flush;
    return 0;
  });
}

}  // namespace segtrain::trainer::cli
