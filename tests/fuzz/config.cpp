// The run config layer as `segtrain config check FILE --set k=v...` uses it:
// load_config (YAML parser, schema, --set overrides, validator), then to_yaml.
// Input: the YAML file, optionally followed by NUL-separated --set assignments.
// Besides crashes and stray exceptions, a finding is a parsed config whose
// to_yaml does not parse back to the same config (config.h promises it does).
#include "tests/fuzz/fuzz_target.h"
#include "trainer/config/config.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(config) {
  const auto [yaml, overrides] = fuzz::split_nul(fuzz::as_text(data, size));
  const auto file = fuzz::scratch_dir() / "config.yaml";
  fuzz::write_file(file, yaml);
  try {
    (void)trainer::to_yaml(trainer::load_config(file.string(), overrides).config);
  } catch (const InputError&) {
  }
  // The round trip, on everything that parses (validation aside).
  trainer::LoadedConfig loaded = trainer::parse_config_file(file.string());
  for (const auto& assignment : overrides) trainer::apply_override(loaded, assignment);
  const std::string once = trainer::to_yaml(loaded.config);
  std::string twice;
  try {
    twice = trainer::to_yaml(trainer::parse_config_text(once, "to_yaml output").config);
  } catch (const InputError& e) {
    fuzz::violated(std::string("to_yaml output does not parse back: ") + e.what() + "\n" + once);
  }
  if (twice != once) fuzz::violated("to_yaml -> parse -> to_yaml changed the config:\n" + once + "---\n" + twice);
}
