"""Seeds of the adapter_config fuzz target (make_seeds.sh runs this): adapter_config.json as PEFT
writes it for tiny Llama and GPT-2 bases (targets by list and by regular expression, saved
modules, fan_in_fan_out), and the inputs that once crashed or hung segtrain's reader (issue 58).

  make_adapter_seeds.py CORPUS WORK
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402

corpus, work = sys.argv[1:3]
out = os.path.join(corpus, "adapter_config")
os.makedirs(out, exist_ok=True)
torch.manual_seed(7)


def llama():
    return LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16))


def gpt2():
    return GPT2LMHeadModel(GPT2Config(vocab_size=16, n_positions=16, n_embd=8, n_layer=2, n_head=2))


# What PEFT saves, base_model_name_or_path left out (it would name this machine's folder).
for name, model, config in [
    ("peft_llama_list", llama, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj", "down_proj"])),
    ("peft_llama_regex_norms", llama,
     LoraConfig(r=1, lora_alpha=2, target_modules=r".*\.(k_proj|o_proj|gate_proj)",
                modules_to_save=["input_layernorm", "post_attention_layernorm", "norm"])),
    ("peft_gpt2_conv1d", gpt2, LoraConfig(r=2, lora_alpha=8, target_modules=["c_attn", "c_proj"], fan_in_fan_out=True)),
]:
    folder = os.path.join(work, name)
    get_peft_model(model(), config).save_pretrained(folder)
    with open(os.path.join(folder, "adapter_config.json")) as f:
        saved = json.load(f)
    saved["base_model_name_or_path"] = None
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump(saved, f, indent=2, sort_keys=True)


def write(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def with_targets(target_modules, r=2):
    return json.dumps({"peft_type": "LORA", "r": r, "lora_alpha": 4, "target_modules": target_modules})


# Issue 58's cases (each once crashed with a segfault, hung ignoring SIGINT and SIGTERM, aborted in
# LibTorch or was refused for another cause), just past each bound rather than at the issue's
# sizes (100,000 characters, 50,000 parentheses, 200,000 levels: tests/models/peft_config_test.cpp
# and tests/trainer/adapter_bounds_test.cpp keep those), so that libFuzzer's inputs stay small.
write("issue58_regex_10001_chars.json", with_targets("q" * 10_001))
write("issue58_regex_5001_nested_parens.json", with_targets("(" * 5_001 + ")" * 5_001))
write("issue58_regex_100_nested_parens.json", with_targets("(" * 100 + ".*q_proj" + ")" * 100))
write("issue58_regex_backtracking.json", with_targets("(.*)*(.*)*(.*)*(.*)*Z"))
write("issue58_regex_backreference.json", with_targets(r"(.*)\.(q)_\2"))
write("issue58_regex_lookahead.json", with_targets(r"(?=.*q_proj).*"))
write("issue58_nested_1000.json",
      '{"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ' + "[" * 1_000 + "]" * 1_000 + "}")
write("issue58_nested_32.json",
      '{"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ' + "[" * 30 + "]" * 30 + "}")
write("issue58_rank_1e9.json", with_targets(["q_proj", "v_proj"], r=1_000_000_000))
write("issue58_10001_names.json", with_targets([0] * 10_001))  # counted before each is read
write("issue58_not_utf8.json", b'{"peft_type": "LORA", "r": 2, "target_modules": ["q\xff_proj"]}')
write("issue58_truncated.json", with_targets(["q_proj"])[:40])
write("issue58_empty.json", "")
write("issue58_list.json", "[" + with_targets(["q_proj"]) + "]")
write("issue58_nan.json", '{"peft_type": "LORA", "r": 2, "lora_alpha": NaN, "target_modules": ["q_proj"]}')
