"""Seeds written by transformers and the safetensors package (make_seeds.sh runs this).

  make_seeds.py CORPUS FIXTURES WORK
"""
import json
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (BloomConfig, BloomForCausalLM, GPT2Config, GPT2LMHeadModel,  # noqa: E402
                          GPTNeoXConfig, GPTNeoXForCausalLM)

corpus, fixtures, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
torch.manual_seed(7)
V = 16


def save(model, name, **kw):
    folder = os.path.join(work, name)
    model.save_pretrained(folder, **kw)
    return folder


def copy(src, target, name):
    shutil.copyfile(src, os.path.join(corpus, target, name))


# config.json of each architecture, and GPT-NeoX's rope scalings.
gpt2 = save(GPT2LMHeadModel(GPT2Config(vocab_size=V, n_positions=16, n_embd=8, n_layer=1, n_head=2)), "gpt2")
copy(os.path.join(gpt2, "config.json"), "hf_config", "transformers_gpt2.json")
copy(os.path.join(gpt2, "model.safetensors"), "safetensors", "transformers_gpt2.safetensors")
bloom = save(BloomForCausalLM(BloomConfig(vocab_size=V, hidden_size=8, n_layer=1, n_head=2)), "bloom")
copy(os.path.join(bloom, "config.json"), "hf_config", "transformers_bloom.json")
for name, params in {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 16.0},
}.items():
    kw = {}
    if params:
        kw["rope_parameters"] = {"rope_theta": 10000.0, "partial_rotary_factor": 0.5, **params}
    cfg = GPTNeoXConfig(vocab_size=V, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=64 if name == "yarn" else 16,
                        rotary_pct=0.5, **kw)
    folder = os.path.join(work, "neox_" + name)
    cfg.save_pretrained(folder)
    copy(os.path.join(folder, "config.json"), "hf_config", f"transformers_gpt_neox_{name}.json")

# Llama-family configs as hub checkpoints write them: Llama 3.1's llama3 block and a
# Phi-3-style longrope block in 4.x's rope_scaling, the original length at the top level.
for name, scaling in {
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16},
    "longrope": {"rope_type": "longrope", "factor": 2.0, "short_factor": [1.0, 1.1], "long_factor": [1.5, 2.5]},
}.items():
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": 8,
           "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
           "max_position_embeddings": 128 if name == "llama3" else 32, "rms_norm_eps": 1e-6, "rope_theta": 500000.0,
           "rope_scaling": scaling}
    if name == "longrope":
        cfg["original_max_position_embeddings"] = 16
    with open(os.path.join(corpus, "hf_config", f"transformers_llama_{name}.json"), "w") as f:
        json.dump(cfg, f, indent=2)

# A sharded GPT-NeoX: its shards are the fixture beside which the index is fuzzed.
neox = save(GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=V, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=16, max_position_embeddings=16, rotary_pct=0.5)),
            "neox_sharded", max_shard_size="1KB")
shards = os.path.join(fixtures, "sharded_gpt_neox")
shutil.rmtree(shards, ignore_errors=True)
os.makedirs(shards)
for f in sorted(os.listdir(neox)):
    if f.endswith(".safetensors"):
        shutil.copyfile(os.path.join(neox, f), os.path.join(shards, f))
copy(os.path.join(neox, "model.safetensors.index.json"), "safetensors_index", "transformers_gpt_neox.json")
with open(os.path.join(neox, "model.safetensors.index.json")) as f:
    index = json.load(f)
# The same shards listed without the "gpt_neox." prefix, and one name listed in the wrong shard.
bare = {"metadata": index["metadata"],
        "weight_map": {k.removeprefix("gpt_neox."): v for k, v in index["weight_map"].items()}}
with open(os.path.join(corpus, "safetensors_index", "no_prefix.json"), "w") as f:
    json.dump(bare, f)
moved = dict(index["weight_map"])
first = sorted(moved)[0]
moved[first] = sorted(set(moved.values()))[-1]
with open(os.path.join(corpus, "safetensors_index", "wrong_shard.json"), "w") as f:
    json.dump({"weight_map": moved}, f)

# Every dtype the reader knows, empty and 0-d tensors, metadata.
edge = {
    "f64": torch.arange(3, dtype=torch.float64), "f32": torch.ones(2, 2), "f16": torch.ones(2, dtype=torch.float16),
    "bf16": torch.ones(2, dtype=torch.bfloat16), "i64": torch.arange(2), "i32": torch.arange(2, dtype=torch.int32),
    "i16": torch.arange(2, dtype=torch.int16), "i8": torch.arange(2, dtype=torch.int8),
    "u8": torch.arange(2, dtype=torch.uint8), "bool": torch.tensor([True, False]),
    "empty": torch.ones(0, 3), "scalar": torch.tensor(1.5),
}
save_file(edge, os.path.join(corpus, "safetensors", "every_dtype.safetensors"), metadata={"format": "pt", "k": "v"})
save_file({"w": torch.ones(1)}, os.path.join(corpus, "safetensors", "one_tensor.safetensors"))

# JSONL lines: fields, escapes, non-ASCII, blank lines, an object without text.
lines = [{"text": "plain"}, {"text": "caf\u00e9 \u2603 \U0001F600", "id": 3}, {"text": "  "},
         {"text": "line\nbreak \"quoted\" \\ back"}, {"title": "t", "text": "x" * 40}]
with open(os.path.join(corpus, "jsonl", "edge.jsonl"), "w") as f:
    for line in lines:
        f.write(json.dumps(line, ensure_ascii=False) + "\n")
    f.write("\n   \n")
    f.write(json.dumps({"text": "no newline at the end"}))
with open(os.path.join(corpus, "jsonl", "not_an_object.jsonl"), "w") as f:
    f.write('{"text": "ok"}\n["a list"]\n')

# tokenizer.json of tiny byte-level BPEs as `tokenizers` writes them (GPT-2-, Llama-3- and
# Qwen2-like: ByteLevel regex, Split + ByteLevel, NFC, TemplateProcessing, added tokens).
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

texts = ["It's 2024: the quick brown fox jumps over the lazy dog.\r\n  naïve café, 1234567 ok?",
         "def f(x):\n    return x + 1  # don't\n\n\tDONE 👍"] * 20
split = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
for name in ("gpt2", "llama3", "qwen2"):
    tok = Tokenizer(models.BPE(ignore_merges=name == "llama3"))
    if name == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if name == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|bos|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if name == "llama3":
        tok.post_processor = processors.TemplateProcessing(single="<|bos|> $A", special_tokens=[("<|bos|>", 1)])
    tok.save(os.path.join(corpus, "hf_tokenizer", f"{name}.json"))

# One rank's optimizer file: a parameter cut into two pieces (as a sharded rank's
# slices cut it), and a whole tensor without "@offset" (before one file a rank).
os.makedirs(os.path.join(corpus, "optimizer_state"), exist_ok=True)
pieces = {}
for moment in ("exp_avg", "exp_avg_sq"):
    pieces[f"{moment}.blocks.0.fc.weight@0"] = torch.arange(16, dtype=torch.float32)
    pieces[f"{moment}.blocks.0.fc.weight@16"] = torch.arange(16, 32, dtype=torch.float32)
save_file(pieces, os.path.join(corpus, "optimizer_state", "two_pieces_of_one_parameter.safetensors"),
          metadata={"rank": "0", "world_size": "2"})
save_file({"exp_avg.blocks.0.fc.weight": torch.zeros(4, 8), "exp_avg_sq.blocks.0.fc.weight": torch.ones(4, 8),
           "step.blocks.0.fc.weight": torch.tensor(3.0)},
          os.path.join(corpus, "optimizer_state", "whole_tensors_before_shards.safetensors"))
