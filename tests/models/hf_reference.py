"""References from HF transformers for the model tests (nothing is downloaded).

  hf_reference.py make OUT        tiny random GPT-2 / GPT-NeoX / BLOOM / Llama (GQA;
                                  biases, head_dim, tied) / Qwen2 / Mistral folders
                                  with reference logits (Llama family also on chunk-like
                                  position ids, and the loss at L_t), RoPE tables from
                                  transformers' rope init functions, seed 001's NTK-ALiBi
                                  slopes
  hf_reference.py logits DIR...   loads each DIR with transformers and writes
                                  DIR/hf_logits.safetensors for DIR/input.safetensors
                                  (with its "positions" as position ids when given)
"""
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM, BloomConfig, BloomForCausalLM, GPT2Config, GPT2LMHeadModel, GPTNeoXConfig,
    GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
    Qwen2ForCausalLM)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.bloom.modeling_bloom import build_alibi_tensor  # noqa: E402
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding  # noqa: E402

VOCAB = 97


def seed001_ntk_alibi(num_heads, a):
    """Seed 001's code, with the scale ratio a as a parameter."""
    scale = a ** (1.0 / (num_heads - 1))
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), dtype=torch.float32)
    base /= scale
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    slopes *= scale
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))), dtype=torch.float32)
        num_remaining_heads = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    return slopes


def rope_case(name, method, rope_type, factor, length, head_dim=16, pct=0.5, theta=10000.0, seq_len=None,
              extra=None):
    params = {"rope_type": rope_type, "rope_theta": theta, "partial_rotary_factor": pct}
    max_pos = length
    if rope_type != "default":
        params["factor"] = factor
    if rope_type == "yarn":
        params["original_max_position_embeddings"] = length
        max_pos = int(length * factor)
    params.update(extra or {})
    cfg = GPTNeoXConfig(hidden_size=head_dim * 4, num_attention_heads=4, max_position_embeddings=max_pos,
                        rope_parameters=params)
    fn = ROPE_INIT_FUNCTIONS[rope_type] if rope_type != "default" else \
        GPTNeoXRotaryEmbedding.compute_default_rope_parameters
    inv_freq, scale = fn(cfg, "cpu", seq_len=seq_len)
    case = {"name": name, "method": method, "factor": factor, "original_length": length, "head_dim": head_dim,
            "rotary_pct": pct, "theta": theta, "seq_len": seq_len or length, "inv_freq": inv_freq.tolist(),
            "attention_scale": float(scale)}
    for k in ("beta_fast", "beta_slow", "attention_factor"):
        if k in (extra or {}):
            case[k] = extra[k]
    return case


def llama_family():
    """Tiny Llama-family models, L_t = max_position_embeddings = 64."""
    common = dict(vocab_size=VOCAB, num_hidden_layers=2, intermediate_size=96, max_position_embeddings=64,
                  attention_dropout=0.0)
    return {
        # Grouped-query attention: 4 query heads share 2 key/value heads; untied head.
        "llama": LlamaForCausalLM(LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                              rms_norm_eps=1e-6, rope_theta=10000.0, **common)),
        # head_dim given (16, not 48/4 = 12), one key/value head, attention_bias and mlp_bias, tied head.
        "llama_bias": LlamaForCausalLM(LlamaConfig(hidden_size=48, num_attention_heads=4, num_key_value_heads=1,
                                                   head_dim=16, attention_bias=True, mlp_bias=True,
                                                   tie_word_embeddings=True, rms_norm_eps=1e-5,
                                                   rope_theta=500000.0, **common)),
        # Qwen2: q/k/v biases (o none), tied embeddings.
        "qwen2": Qwen2ForCausalLM(Qwen2Config(hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                                              tie_word_embeddings=True, use_sliding_window=False,
                                              rope_theta=1000000.0, **common)),
        # Mistral with its default 4096-token sliding window (longer than any sequence here).
        "mistral": MistralForCausalLM(MistralConfig(hidden_size=48, num_attention_heads=6, num_key_value_heads=2,
                                                    sliding_window=4096, **common)),
    }


def chunk_positions(batch, length, total):
    """Chunk-like ids: 4 segments of length/4 tokens from an L_e = total window, in order."""
    seg = length // 4
    starts = torch.linspace(0, total - seg, 4).round().long()
    row = torch.cat([torch.arange(s, s + seg) for s in starts.tolist()])
    return row.repeat(batch, 1)


def make(out):
    torch.manual_seed(1234)
    os.makedirs(out, exist_ok=True)
    tokens = torch.randint(0, VOCAB, (2, 24))
    models = {
        "gpt2": GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, bos_token_id=0, eos_token_id=0, n_positions=32, n_embd=48, n_layer=2, n_head=4,
                                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
        "gpt_neox": GPTNeoXForCausalLM(GPTNeoXConfig(
            vocab_size=VOCAB, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
            max_position_embeddings=32, rotary_pct=0.5, rotary_emb_base=10000, hidden_dropout=0.0,
            attention_dropout=0.0)),
        # 6 heads: BLOOM's slopes for a head count that is not a power of two.
        "bloom": BloomForCausalLM(BloomConfig(vocab_size=VOCAB, hidden_size=48, n_layer=2, n_head=6,
                                              hidden_dropout=0.0, attention_dropout=0.0)),
    }
    for name, model in models.items():
        model.eval()
        with torch.no_grad():  # move every parameter off its init so biases and norms matter
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        folder = os.path.join(out, name)
        # GPT-NeoX is written in shards to exercise model.safetensors.index.json.
        model.save_pretrained(folder, max_shard_size="40KB" if name == "gpt_neox" else "5GB")
        with torch.no_grad():
            logits = model(tokens).logits
        save_file({"tokens": tokens.contiguous(), "logits": logits.contiguous()},
                  os.path.join(folder, "reference.safetensors"))
    for name, model in llama_family().items():
        model.eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        folder = os.path.join(out, name)
        model.save_pretrained(folder)
        positions = chunk_positions(2, 24, 64)
        ppl_tokens = torch.randint(0, VOCAB, (2, 64))
        with torch.no_grad():
            logits = model(tokens).logits
            chunk_logits = model(tokens, position_ids=positions).logits
            loss = model(ppl_tokens, labels=ppl_tokens).loss
        save_file({"tokens": tokens.contiguous(), "logits": logits.contiguous(), "positions": positions.contiguous(),
                   "chunk_logits": chunk_logits.contiguous(), "ppl_tokens": ppl_tokens.contiguous(),
                   "loss": loss.reshape(1).contiguous()}, os.path.join(folder, "reference.safetensors"))
    # The same GPT-2 weights without the "transformer." prefix (as some hub checkpoints are).
    src = os.path.join(out, "gpt2")
    bare = os.path.join(out, "gpt2_noprefix")
    os.makedirs(bare, exist_ok=True)
    weights = load_file(os.path.join(src, "model.safetensors"))
    save_file({k.removeprefix("transformer."): v.contiguous() for k, v in weights.items()},
              os.path.join(bare, "model.safetensors"), metadata={"format": "pt"})
    for f in ("config.json", "reference.safetensors"):
        with open(os.path.join(src, f), "rb") as i, open(os.path.join(bare, f), "wb") as o:
            o.write(i.read())

    rope = [
        rope_case("default", "none", "default", 1.0, 64),
        rope_case("theta_override", "none", "default", 1.0, 64, theta=500000.0),
        rope_case("linear", "interpolate", "linear", 4.0, 64),
        rope_case("dynamic_short", "dynamic_ntk", "dynamic", 4.0, 64, seq_len=40),
        rope_case("dynamic_long", "dynamic_ntk", "dynamic", 4.0, 64, seq_len=200),
        rope_case("yarn", "yarn", "yarn", 4.0, 64, head_dim=32, pct=0.25),
        rope_case("yarn_custom", "yarn", "yarn", 8.0, 128, head_dim=16, pct=1.0,
                  extra={"beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.3}),
    ]
    # Static NTK-aware scaling is default RoPE with base theta * a^(d/(d-2)) (seed 003).
    d = 8
    ntk = rope_case("ntk", "ntk", "default", 1.0, 64, theta=10000.0 * 4.0 ** (d / (d - 2)))
    ntk.update(factor=4.0, theta=10000.0)
    rope.append(ntk)

    alibi = {
        "bloom_slopes": {str(h): build_alibi_tensor(torch.ones(1, 2), h, torch.float32).reshape(h, 2)[:, 1].tolist()
                         for h in range(1, 41)},
        "ntk_alibi": [{"heads": h, "a": a, "slopes": seed001_ntk_alibi(h, a).tolist()}
                      for h in (8, 16, 32) for a in (2.0, 4.0)],
    }
    with open(os.path.join(out, "positions.json"), "w") as f:
        json.dump({"rope": rope, "alibi": alibi}, f)


def logits(dirs):
    for d in dirs:
        model = AutoModelForCausalLM.from_pretrained(d)
        model.eval()
        inputs = load_file(os.path.join(d, "input.safetensors"))
        with torch.no_grad():
            extra = {"position_ids": inputs["positions"]} if "positions" in inputs else {}
            out = model(inputs["tokens"], **extra).logits.float()
        save_file({"logits": out.contiguous()}, os.path.join(d, "hf_logits.safetensors"))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "logits":
        logits(sys.argv[2:])
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
