"""PEFT's LoRA as the reference for segtrain's (tests/models/lora_test.cpp, tests/trainer/train_cli_test.cpp).

    peft_reference.py lora DIR
    peft_reference.py load BASE ADAPTER MERGED
    peft_reference.py save DIR

DIR/request.json: {"base": an HF Llama folder, "rank", "alpha", "target_modules" (PEFT's names:
q_proj, ...), "modules_to_save" (PEFT's, e.g. ["embed_tokens", "norm"]), "use_dora" (optional:
DoRA)}; DIR/input.safetensors: "tokens" and "positions" [B, T], and the adapters under segtrain's
names ("blocks.0.q_proj.lora_A.weight", DoRA's "blocks.0.q_proj.lora_magnitude_vector.weight").
PEFT wraps the base with that LoraConfig, takes those adapter weights, and writes
DIR/peft.safetensors: "init/<segtrain name>" of each DoRA magnitude as PEFT initialised it,
"logits" of the tokens at those position ids, "loss" (transformers' next-token loss),
"grad/<segtrain name>" of every parameter that trains, and "merged/<segtrain name>" of every
adapted weight after merge_and_unload().
"""
import json
import os
import re
import sys

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

# segtrain's module names in a Llama block and the model around it, as transformers names them.
BLOCK = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
         "o_proj": "self_attn.o_proj", "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
         "down_proj": "mlp.down_proj", "ln1": "input_layernorm", "ln2": "post_attention_layernorm"}
MODEL = {"wte": "model.embed_tokens", "ln_f": "model.norm", "lm_head": "lm_head"}


def hf_module(ours):
    """blocks.1.q_proj -> model.layers.1.self_attn.q_proj; wte -> model.embed_tokens."""
    m = re.fullmatch(r"blocks\.(\d+)\.(\w+)", ours)
    return f"model.layers.{m.group(1)}.{BLOCK[m.group(2)]}" if m else MODEL[ours]


def our_module(hf):
    for ours, theirs in MODEL.items():
        if hf == theirs:
            return ours
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", hf)
    return f"blocks.{m.group(1)}." + {v: k for k, v in BLOCK.items()}[m.group(2)]


def our_name(peft_name):
    """base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight -> blocks.0.q_proj.lora_A.weight;
    ...model.norm.modules_to_save.default.weight -> ln_f.weight."""
    name = peft_name.removeprefix("base_model.model.").replace(".modules_to_save.default", "")
    name = name.replace(".default", "")
    m = re.fullmatch(r"(.+?)((?:\.lora_[AB]|\.lora_magnitude_vector)?\.\w+)", name)
    return our_module(m.group(1)) + m.group(2)


def chunk_positions(batch, length, total):
    """4 runs of length/4 positions spread evenly over 0..total-1, in order (hf_reference.py's)."""
    seg = length // 4
    starts = torch.linspace(0, total - seg, 4).round().long()
    return torch.cat([torch.arange(s, s + seg) for s in starts.tolist()]).repeat(batch, 1)


def lora(folder):
    with open(os.path.join(folder, "request.json")) as f:
        request = json.load(f)
    inputs = load_file(os.path.join(folder, "input.safetensors"))
    base = AutoModelForCausalLM.from_pretrained(request["base"], torch_dtype=torch.float32)
    config = LoraConfig(r=request["rank"], lora_alpha=request["alpha"], lora_dropout=0.0,
                        target_modules=request["target_modules"], modules_to_save=request["modules_to_save"] or None,
                        use_dora=request.get("use_dora", False))
    model = get_peft_model(base, config)
    result = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_magnitude_vector" in name:
                result["init/" + our_name(name)] = p.detach().clone().contiguous()
            if ".lora_" in name:
                p.copy_(inputs[our_name(name)])
    model.train()
    tokens, positions = inputs["tokens"], inputs["positions"]
    out = model(input_ids=tokens, position_ids=positions, labels=tokens)
    out.loss.backward()
    result.update({"logits": out.logits.detach().float().contiguous(), "loss": out.loss.detach().reshape(1)})
    for name, p in model.named_parameters():
        if p.requires_grad:
            result["grad/" + our_name(name)] = p.grad.detach().contiguous()
    merged = model.merge_and_unload()
    state = merged.state_dict()
    for key in inputs:
        if key.endswith(".lora_A.weight"):
            ours = key.removesuffix(".lora_A.weight")
            result["merged/" + ours + ".weight"] = state[hf_module(ours) + ".weight"].contiguous()
    save_file(result, os.path.join(folder, "peft.safetensors"))


def load(base_dir, adapter_dir, merged_dir):
    """peft.PeftModel.from_pretrained(BASE, ADAPTER) (an export of segtrain export --adapter) against the merged
    export MERGED in transformers, on random tokens at chunk-like position ids up to 4x the sequence: prints
    {"max_diff": ..., "base_diff": ...} (base_diff: how far the adapter moves the base's logits); exit 1 when
    PEFT warns about a key it did not load or did not expect."""
    import warnings
    from peft import PeftModel
    base = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32).eval()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, torch_dtype=torch.float32).eval()
    tokens = torch.randint(0, base.config.vocab_size, (2, 24))
    # 4 runs of 6 positions spread over the base's positions (up to 96: 4x the sequence).
    total = min(96, getattr(base.config, "max_position_embeddings", None) or getattr(base.config, "n_positions", 96))
    positions = chunk_positions(2, 24, total)
    with torch.no_grad():
        base_logits = base(input_ids=tokens, position_ids=positions).logits
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = PeftModel.from_pretrained(base, adapter_dir).eval()
    problems = [str(w.message) for w in caught if "missing" in str(w.message).lower() or "unexpected" in str(w.message).lower()]
    with torch.no_grad():
        peft_logits = model(input_ids=tokens, position_ids=positions).logits
        merged_logits = merged(input_ids=tokens, position_ids=positions).logits
    print(json.dumps({"max_diff": (peft_logits - merged_logits).abs().max().item(),
                      "base_diff": (peft_logits - base_logits).abs().max().item(), "problems": problems}))
    sys.exit(1 if problems else 0)


def save(folder):
    """An adapter as PEFT users make them, for segtrain to continue (model.init: peft:DIR): DIR/request.json
    {"base", "rank", "alpha", "target_modules" (a list or a regular expression), "modules_to_save", "use_dora",
    "base_model_name_or_path" (written into its adapter_config.json)} -> DIR/adapter (save_pretrained) with
    random A and B and the saved modules moved off the base's, and DIR/peft.safetensors: "logits" of
    DIR/input.safetensors' "tokens" at its "positions" through the PeftModel."""
    with open(os.path.join(folder, "request.json")) as f:
        request = json.load(f)
    inputs = load_file(os.path.join(folder, "input.safetensors"))
    base = AutoModelForCausalLM.from_pretrained(request["base"], torch_dtype=torch.float32)
    config = LoraConfig(r=request["rank"], lora_alpha=request["alpha"], lora_dropout=0.0,
                        target_modules=request["target_modules"], modules_to_save=request["modules_to_save"] or None,
                        use_dora=request.get("use_dora", False),
                        init_lora_weights=False)  # A and B drawn at random: the adapter is not the base
    model = get_peft_model(base, config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # DoRA's magnitudes moved too: one recomputed from the weights would not be the file's
            if "modules_to_save.default" in name or "lora_magnitude_vector" in name:
                p.add_(0.1 * torch.randn_like(p))
    adapter = os.path.join(folder, "adapter")
    model.save_pretrained(adapter)
    path = os.path.join(adapter, "adapter_config.json")
    with open(path) as f:
        written = json.load(f)
    written["base_model_name_or_path"] = request["base_model_name_or_path"]
    with open(path, "w") as f:
        json.dump(written, f, indent=2)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=inputs["tokens"], position_ids=inputs["positions"]).logits
    save_file({"logits": logits.float().contiguous()}, os.path.join(folder, "peft.safetensors"))


if __name__ == "__main__":
    torch.manual_seed(0)
    {"lora": lora, "load": load, "save": save}[sys.argv[1]](*sys.argv[2:])
