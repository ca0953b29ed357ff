#include "trainer/config/model_ref.h"

#include <filesystem>

#include "common/error.h"
#include "models/spec/families/hf_config.h"
#include "models/spec/families/peft_config.h"
#include "models/spec/model_config_json.h"

namespace segtrain::trainer {

std::optional<ModelRef> parse_model_ref(const std::string& text) {
  if (text == "scratch") return ModelRef{};
  if (text.rfind("hf:", 0) == 0) return ModelRef{ModelRef::Kind::hf, text.substr(3), ""};
  if (text.rfind("checkpoint:", 0) == 0) return ModelRef{ModelRef::Kind::checkpoint, text.substr(11), ""};
  if (text.rfind("peft:", 0) == 0) {
    const std::string adapter = text.substr(5);
    std::string base;  // an adapter_config.json that cannot be read is the validator's to refuse
    try {
      base = models::read_peft_base_model(adapter);  // within its bounds (models/spec/families/peft_config.h)
    } catch (const InputError&) {
    }
    return ModelRef{ModelRef::Kind::peft, models::find_peft_base(adapter, base), adapter};
  }
  return std::nullopt;
}

std::string model_ref_dir(const std::string& text) {
  const auto ref = parse_model_ref(text);
  return ref ? ref->dir : "";
}

std::string absolute_folder(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  const std::filesystem::path resolved = std::filesystem::weakly_canonical(std::filesystem::absolute(path), ec);
  return ec ? std::filesystem::absolute(path).lexically_normal().string() : resolved.string();
}

std::string with_absolute_folder(const std::string& text) {
  const auto ref = parse_model_ref(text);
  if (!ref || !ref->from_folder()) return text;
  return text.substr(0, text.find(':') + 1) + absolute_folder(ref->kind == ModelRef::Kind::peft ? ref->adapter : ref->dir);
}

std::optional<models::Arch> model_ref_arch(const std::string& text) {
  namespace fs = std::filesystem;
  const auto ref = parse_model_ref(text);
  if (!ref || !ref->from_folder()) return std::nullopt;
  const fs::path dir = ref->dir;
  if (ref->kind == ModelRef::Kind::hf || ref->kind == ModelRef::Kind::peft) {  // a PEFT adapter's: its base's
    try {
      return models::read_hf_config_json(dir.string()).family->arch();
    } catch (const InputError&) {
      return std::nullopt;  // no config.json segtrain reads: the validator, or loading the base, says why
    }
  }
  try {
    return models::read_segtrain_model_config(dir.string()).arch;
  } catch (const InputError&) {
    return std::nullopt;  // the validator, or loading the checkpoint, says why
  }
}

}  // namespace segtrain::trainer
