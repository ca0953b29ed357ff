// Model converters (models/modules/converters/): the freeze converter's globs against
// names written out by hand, which parameters it leaves training, its refusals,
// and the converters.json a converted model's directory records, which loading
// the directory reads back.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
#include <string>

#include "common/error.h"
#include "models/modules/converters/converter.h"
#include "models/modules/converters/freeze.h"
#include "models/modules/model_io.h"
#include "test_util.h"
#include "tiny_models.h"

namespace segtrain::models {
namespace {

TEST(GlobMatches, StarAndQuestionMarkAgainstWholeNames) {
  EXPECT_TRUE(glob_matches("*", "blocks.0.qkv.weight"));
  EXPECT_TRUE(glob_matches("blocks.*.ln1.*", "blocks.12.ln1.weight"));
  EXPECT_FALSE(glob_matches("blocks.*.ln1.*", "blocks.12.ln2.weight"));
  EXPECT_TRUE(glob_matches("*norm*", "blocks.0.q_norm.weight"));
  EXPECT_FALSE(glob_matches("norm", "blocks.0.q_norm.weight")) << "a glob matches the whole name, not a part";
  EXPECT_TRUE(glob_matches("blocks.?.fc.bias", "blocks.3.fc.bias"));
  EXPECT_FALSE(glob_matches("blocks.?.fc.bias", "blocks.13.fc.bias"));
  EXPECT_TRUE(glob_matches("a*b*c", "a-b-b-c"));
  EXPECT_FALSE(glob_matches("a*b*c", "a-b-b-d"));
  EXPECT_TRUE(glob_matches("**", ""));
  EXPECT_FALSE(glob_matches("?", ""));
}

std::set<std::string> trainable_names(const TransformerLM& model) {
  std::set<std::string> names;
  for (const auto& [name, p] : trainable_parameters(model)) names.insert(name);
  return names;
}

// "Everything but the norms and the embedding", the last matching pattern deciding.
TEST(Freeze, TheLastMatchingPatternDecidesWhatTrains) {
  TransformerLM model(test::tiny_model_config(Arch::llama, 40, 16));
  const Converters converters = [] {
    Converters c;
    c.push_back(make_freeze({"*", "!*ln*", "!wte.*"}));
    return c;
  }();
  apply_converters(converters, model);
  std::set<std::string> expected = {"wte.weight", "ln_f.weight"};
  for (int layer = 0; layer < 2; ++layer)
    for (const char* norm : {"ln1", "ln2"}) expected.insert("blocks." + std::to_string(layer) + "." + norm + ".weight");
  EXPECT_EQ(trainable_names(model), expected);
  // A later freeze of one layer's norms wins over the "!" before it.
  TransformerLM again(test::tiny_model_config(Arch::llama, 40, 16));
  make_freeze({"*", "!*ln*", "blocks.1.*"})->convert(again);
  EXPECT_EQ(trainable_names(again), (std::set<std::string>{"blocks.0.ln1.weight", "blocks.0.ln2.weight", "ln_f.weight"}));
}

TEST(Freeze, RefusesAPatternThatMatchesNothingFreezingEverythingAndEmptyPatterns) {
  TransformerLM model(test::tiny_model_config(Arch::gpt2, 40, 16));
  const std::string typo = test::input_error_of([&] { make_freeze({"blocks.*.atn.*"})->convert(model); });
  EXPECT_NE(typo.find("the pattern 'blocks.*.atn.*' matches no parameter of this model"), std::string::npos) << typo;
  EXPECT_NE(typo.find("wte.weight"), std::string::npos) << "the names it is matched against: " << typo;
  const std::string everything = test::input_error_of([&] { make_freeze({"*", "!wpe.*", "wpe.*"})->convert(model); });
  EXPECT_NE(everything.find("nothing would train"), std::string::npos) << everything;
  EXPECT_NE(test::input_error_of([] { make_freeze({"!"}); }).find("is empty"), std::string::npos);
  EXPECT_NE(test::input_error_of([] { make_freeze({""}); }).find("is empty"), std::string::npos);
}

TEST(Converters, RoundTripThroughConvertersJsonAndUnknownOnesAreRefused) {
  Converters converters;
  converters.push_back(make_freeze({"*", "!*ln*"}));
  const std::string text = converters_to_json(converters);
  const Converters back = converters_from_json(text, "c.json");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0]->name(), "freeze");
  EXPECT_EQ(converters_to_json(back), text);
  const std::string unknown = test::input_error_of([] { converters_from_json(R"({"converters": [{"name": "qlora"}]})", "c.json"); });
  EXPECT_NE(unknown.find("c.json: unknown converter 'qlora' (this segtrain knows: freeze, lora)"), std::string::npos) << unknown;
  EXPECT_NE(test::input_error_of([] { converters_from_json(R"({"converters": [{"name": "freeze"}]})", "c.json"); })
                .find("c.json: the freeze converter needs \"patterns\""),
            std::string::npos);
  EXPECT_NE(test::input_error_of([] { converters_from_json("[1,", "c.json"); }).find("c.json: expected"), std::string::npos);
}

// A frozen model's directory loads as the plain model (freezing adds nothing to fold),
// and a damaged converters.json is refused naming the file, not skipped.
TEST(Converters, ADirectoryWithConvertersJsonLoadsAndABadOneIsRefused) {
  test::TempDir tmp;
  TransformerLM model(test::tiny_model_config(Arch::llama, 40, 16));
  save_model_dir(model, (tmp.path() / "m").string());
  Converters converters;
  converters.push_back(make_freeze({"*", "!*ln*"}));
  test::write_file(tmp.path() / "m" / kConvertersFile, converters_to_json(converters));
  const TransformerLM loaded = load_model((tmp.path() / "m").string());
  for (const auto& [name, t] : model->tensors()) EXPECT_TRUE(torch::equal(t, loaded->tensors().at(name))) << name;
  test::write_file(tmp.path() / "m" / kConvertersFile, R"({"converters": [{"name": "qlora"}]})");
  const std::string bad = test::input_error_of([&] { load_model((tmp.path() / "m").string()); });
  EXPECT_NE(bad.find("converters.json: unknown converter 'qlora'"), std::string::npos) << bad;
}

}  // namespace
}  // namespace segtrain::models
