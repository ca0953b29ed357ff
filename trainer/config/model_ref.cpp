#include "trainer/config/model_ref.h"

namespace segtrain::trainer {

std::optional<ModelRef> parse_model_ref(const std::string& text) {
  if (text == "scratch") return ModelRef{};
  if (text.rfind("hf:", 0) == 0) return ModelRef{ModelRef::Kind::hf, text.substr(3)};
  if (text.rfind("checkpoint:", 0) == 0) return ModelRef{ModelRef::Kind::checkpoint, text.substr(11)};
  return std::nullopt;
}

std::string model_ref_dir(const std::string& text) {
  const auto ref = parse_model_ref(text);
  return ref ? ref->dir : "";
}

}  // namespace segtrain::trainer
