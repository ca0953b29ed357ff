#pragma once
// The block naming GPT-NeoX and BLOOM both kept from Megatron-LM; they differ only
// in what the layer list and the attention module are called.
#include <string>
#include <utility>
#include <vector>

#include "models/spec/families/hf_names.h"

namespace segtrain::models {

inline std::vector<HfTensorName> megatron_blocks(const std::string& layers, const std::string& attention) {
  const std::pair<std::string, std::string> modules[] = {
      {"ln1", "input_layernorm"}, {"ln2", "post_attention_layernorm"},
      {"qkv", attention + ".query_key_value"}, {"proj", attention + ".dense"},
      {"fc", "mlp.dense_h_to_4h"}, {"fc_out", "mlp.dense_4h_to_h"}};
  std::vector<HfTensorName> rows;
  for (const auto& [ours, hf] : modules)
    for (const std::string param : {".weight", ".bias"})
      rows.push_back({"blocks.{}." + ours + param, layers + ".{}." + hf + param});
  return rows;
}

inline HfNameTable with_blocks(HfNameTable table, const std::vector<HfTensorName>& blocks) {
  table.tensors.insert(table.tensors.end(), blocks.begin(), blocks.end());
  return table;
}

}  // namespace segtrain::models
