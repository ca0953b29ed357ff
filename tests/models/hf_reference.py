"""References from HF transformers for the model tests (nothing is downloaded).

  hf_reference.py make OUT        tiny random GPT-2 / GPT-NeoX / BLOOM / Llama (GQA;
                                  biases, head_dim, tied) / Qwen2 / Qwen3 / Mistral /
                                  Phi-3 (fused q/k/v and gate/up; LongRoPE) folders
                                  with reference logits (Llama family also on chunk-like
                                  position ids, and the loss at L_t), RoPE tables from
                                  transformers' rope init functions, the NTK-ALiBi note's NTK-ALiBi
                                  slopes; the "llama" weights under every rope scaling
                                  with perplexity at L_t and 2 L_t
  hf_reference.py tokenize DIR TEXT  prints AutoTokenizer(DIR)'s ids of TEXT as JSON
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
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM, BloomConfig, BloomForCausalLM, GPT2Config, GPT2LMHeadModel, GPTNeoXConfig,
    GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Phi3Config,
    Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
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
    if rope_type in ("yarn", "llama3", "longrope"):
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
    for k in ("beta_fast", "beta_slow", "attention_factor", "low_freq_factor", "high_freq_factor", "short_factor",
              "long_factor"):
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
        # Qwen3: RMSNorm over each head's q and k before RoPE, head_dim given (16, not 48/4 = 12).
        "qwen3": Qwen3ForCausalLM(Qwen3Config(hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                                              head_dim=16, use_sliding_window=False, rope_theta=1000000.0,
                                              **common)),
        # Mistral with its default 4096-token sliding window (longer than any sequence here).
        "mistral": MistralForCausalLM(MistralConfig(hidden_size=48, num_attention_heads=6, num_key_value_heads=2,
                                                    sliding_window=4096, **common)),
        # Phi-3: q/k/v fused in qkv_proj (4 query heads, 2 key/value heads: unequal parts),
        # gate/up in gate_up_proj; pad_token_id inside the 97 tokens (Phi3Config's 32000 is not).
        "phi3": Phi3ForCausalLM(Phi3Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                           original_max_position_embeddings=64, pad_token_id=0, **common)),
        # Phi-3 with LongRoPE from 64 to 128 positions (one key/value head, tied head as
        # Phi-4-mini); make() rewrites its config.json as Phi-3 hub checkpoints write it.
        "phi3_longrope": Phi3ForCausalLM(Phi3Config(
            hidden_size=64, num_attention_heads=4, num_key_value_heads=1, original_max_position_embeddings=64,
            pad_token_id=0, tie_word_embeddings=True,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": PHI3_SHORT,
                             "long_factor": PHI3_LONG}, **dict(common, max_position_embeddings=128))),
    }


PHI3_SHORT = [1.0 + 0.03 * i for i in range(8)]
PHI3_LONG = [1.0 + 0.5 * i for i in range(8)]
# Chunk-like position ids run up to this many positions (default 64, L_t): past the
# original 64 for LongRoPE, so its long factors are checked too.
CHUNK_TOTAL = {"phi3_longrope": 128}


def phi3_hub_layout(folder):
    """Rewrites a saved Phi-3 config.json with LongRoPE as Phi-3 hub checkpoints (and transformers 4.x)
    write it: rope_scaling {type, short_factor, long_factor} beside top-level rope_theta and
    original_max_position_embeddings; returns the model transformers loads from it."""
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        saved = json.load(f)
    params = saved.pop("rope_parameters")
    saved["rope_theta"] = params["rope_theta"]
    saved["rope_scaling"] = {"type": "longrope", "short_factor": params["short_factor"],
                             "long_factor": params["long_factor"]}
    with open(path, "w") as f:
        json.dump(saved, f, indent=2)
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.eval()
    return model


# Every rope scaling transformers knows on the "llama" weights: L_t = 64 and a factor
# of 2, so perplexity is taken at L_t and 2 L_t. llama3 and longrope are written as
# transformers 4.x and hub checkpoints write them (rope_scaling beside a top-level
# rope_theta; longrope's original length at the top, as Phi-3), the rest as 5.x does.
LLAMA_SCALINGS = {
    "none": (64, {"rope_type": "default"}),
    "linear": (128, {"rope_type": "linear", "factor": 2.0}),
    "dynamic": (64, {"rope_type": "dynamic", "factor": 2.0}),
    "yarn": (128, {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64}),
    "llama3": (128, {"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 64}),
    "longrope": (128, {"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": 64,
                       "short_factor": [1.0 + 0.02 * i for i in range(8)],
                       "long_factor": [1.0 + 0.4 * i for i in range(8)]}),
}


def llama_scalings(out, base):
    tokens = torch.randint(0, VOCAB, (2, 128))
    for name, (max_pos, params) in LLAMA_SCALINGS.items():
        cfg = base.config.to_dict()
        cfg.update(max_position_embeddings=max_pos, rope_parameters=dict(params, rope_theta=10000.0))
        for key in ("architectures", "transformers_version", "dtype", "torch_dtype", "rope_scaling"):
            cfg.pop(key, None)
        model = LlamaForCausalLM(LlamaConfig(**cfg))
        model.load_state_dict(base.state_dict())
        model.eval()
        folder = os.path.join(out, "llama_rope_" + name)
        model.save_pretrained(folder)
        if name in ("llama3", "longrope"):
            path = os.path.join(folder, "config.json")
            with open(path) as f:
                saved = json.load(f)
            scaling = {k: v for k, v in saved.pop("rope_parameters").items() if k != "rope_theta"}
            saved["rope_theta"] = 10000.0
            if name == "longrope":
                saved["original_max_position_embeddings"] = scaling.pop("original_max_position_embeddings")
            saved["rope_scaling"] = scaling
            with open(path, "w") as f:
                json.dump(saved, f, indent=2)
        with torch.no_grad():
            at_lt = model(tokens[:, :64], labels=tokens[:, :64]).loss
            out_2lt = model(tokens, labels=tokens)
        save_file({"tokens": tokens.contiguous(), "loss_lt": at_lt.reshape(1).contiguous(),
                   "loss_2lt": out_2lt.loss.reshape(1).contiguous(), "logits_2lt": out_2lt.logits.contiguous()},
                  os.path.join(folder, "reference.safetensors"))


def save_word_tokenizer(folder):
    """A usable HF tokenizer for the 97-token models: one word per id, <s> and </s> as BOS/EOS."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"w{i}": i for i in range(3, VOCAB)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(folder)


def tokenize(folder, text):
    from transformers import AutoTokenizer
    print(json.dumps(AutoTokenizer.from_pretrained(folder)(text)["input_ids"]))


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
        save_word_tokenizer(folder)
        if name == "phi3_longrope":
            model = phi3_hub_layout(folder)
        positions = chunk_positions(2, 24, CHUNK_TOTAL.get(name, 64))
        ppl_tokens = torch.randint(0, VOCAB, (2, 64))
        with torch.no_grad():
            logits = model(tokens).logits
            chunk_logits = model(tokens, position_ids=positions).logits
            loss = model(ppl_tokens, labels=ppl_tokens).loss
        save_file({"tokens": tokens.contiguous(), "logits": logits.contiguous(), "positions": positions.contiguous(),
                   "chunk_logits": chunk_logits.contiguous(), "ppl_tokens": ppl_tokens.contiguous(),
                   "loss": loss.reshape(1).contiguous()}, os.path.join(folder, "reference.safetensors"))
    llama_scalings(out, AutoModelForCausalLM.from_pretrained(os.path.join(out, "llama")))
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
    # Llama 3.1's defaults (low 1, high 4) and a band that cuts through the 16 frequencies
    # of a 32-wide head at theta 500000; longrope below and above the original length.
    llama3 = {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
    rope.append(rope_case("llama3", "llama3", "llama3", 8.0, 64, head_dim=32, pct=1.0, theta=500000.0, extra=llama3))
    rope.append(rope_case("llama3_band", "llama3", "llama3", 4.0, 512, head_dim=16, pct=1.0,
                          extra={"low_freq_factor": 2.0, "high_freq_factor": 16.0}))
    short = [1.0 + 0.05 * i for i in range(8)]
    long = [1.0 + 0.9 * i for i in range(8)]
    for name, seq_len in (("longrope_short", 64), ("longrope_long", 65)):
        rope.append(rope_case(name, "longrope", "longrope", 4.0, 64, head_dim=16, pct=1.0, seq_len=seq_len,
                              extra={"short_factor": short, "long_factor": long}))
    rope.append(rope_case("longrope_attention", "longrope", "longrope", 4.0, 64, head_dim=16, pct=1.0, seq_len=200,
                          extra={"short_factor": short, "long_factor": long, "attention_factor": 1.2}))
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
        with open(os.path.join(d, "transformers_version"), "w") as f:
            f.write(transformers.__version__)


def generate(dirs):
    """Greedy continuations by transformers' generate (KV cache) of DIR/generate.json's prompts,
    no EOS stop; the model is loaded again for each prompt (dynamic RoPE keeps state across calls)."""
    for d in dirs:
        with open(os.path.join(d, "generate.json")) as f:
            request = json.load(f)
        outputs = []
        for prompt in request["prompts"]:
            model = AutoModelForCausalLM.from_pretrained(d)
            model.eval()
            model.generation_config.eos_token_id = None  # no stop, and no EOS suppression either
            ids = torch.tensor([prompt])
            with torch.no_grad():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=request["max_new_tokens"], pad_token_id=0)
            outputs.append(out[0, len(prompt):].tolist())
        with open(os.path.join(d, "hf_generate.json"), "w") as f:
            json.dump({"outputs": outputs, "transformers": transformers.__version__}, f)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "logits":
        logits(sys.argv[2:])
    elif sys.argv[1] == "generate":
        generate(sys.argv[2:])
    elif sys.argv[1] == "tokenize":
        tokenize(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
