// `segtrain inspect positions|alibi-precision`: positional parameters as JSON (eval/inspect.h).
#include <iostream>

#include "trainer/cli/command.h"
#include "trainer/eval/inspect.h"

namespace segtrain::trainer::cli {

void add_inspect(CLI::App& app, Chosen& chosen) {
  auto* inspect = app.add_subcommand("inspect", "Show positional parameters");
  inspect->require_subcommand(1);

  auto p = std::make_shared<InspectPositionsOptions>();
  auto* positions = inspect->add_subcommand("positions", "Positional parameters in effect at a length, as JSON");
  auto* model = positions->add_option("--model", p->model, "Checkpoint, run directory or HF folder");
  positions->add_option("--config", p->config, "Run config (YAML)")->excludes(model);
  positions->add_option("--length", p->length, "Sequence length; 0: the model's own")->check(integer_at_least(0));
  add_overrides(positions, p->overrides);
  choose_on(positions, chosen, "inspect positions", OnSignal::exit_now, [p] {
    std::cout << positions_json(*p);
    return 0;
  });

  auto a = std::make_shared<AlibiPrecisionOptions>();
  auto* alibi = inspect->add_subcommand("alibi-precision", "Distinct ALiBi bias values per position bucket by dtype");
  alibi->add_option("--heads", a->heads, "Number of heads")->check(integer_at_least(1));
  alibi->add_option("--head", a->head, "One head (0-based); default: every head")->check(integer_at_least(0));
  alibi->add_option("--length", a->length, "Positions")->check(integer_at_least(1));
  alibi->add_option("--bucket", a->bucket, "Positions per bucket")->check(integer_at_least(1));
  choose_on(alibi, chosen, "inspect alibi-precision", OnSignal::exit_now, [a] {
    std::cout << alibi_precision_json(*a);
    return 0;
  });
}

}  // namespace segtrain::trainer::cli
