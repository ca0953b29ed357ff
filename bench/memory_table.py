"""docs/gpus.md's table of memory per GPU, computed (not measured on a GPU) from costs measured here on the CPU.

  python bench/memory_table.py   prints the inputs it used, the markdown table and the two targets' headroom

Measured inputs (bench/results/, from bench/run.sh on this machine, CPU):
  - train_memory_bench (fp32, no activation checkpointing): activation bytes a token, a layer and a unit
    of d_model, its d512x8 row (full at L_e minus truncate at L_t, over the token difference, layers and
    d_model), micro-batch 1 sequence;
  - bf16_activation_memory_bench (bf16 autocast with model.activation_checkpointing): activation bytes a
    token, a layer and a unit of d_model derived the same way at the same d512x8 shape (micro-batch 16),
    with bf16 parameters and with fp32 parameters; its split into a part that grows with the layers
    and one that does not (from 4 and 8 layers) is printed, not used: over 24-32 layers the d512x8
    figure counts the block recomputed at a time in every layer, so it errs high;
  - param_dtype_memory_bench: the optimizer's bytes a parameter at 1, 2 and 4 ranks in each mode, which
    must come out as designed (checked here): fp32 plain 8, fp32 sharded 8/N, bf16 plain 16, bf16
    sharded 16/N; and with bf16 parameters the set-up peak (the fp32 parameters alive until the master
    copies exist);
  - the LM head's logits: with the chunked loss (train.loss_chunk_tokens auto) three slices of fp32
    logits, of d_model tokens between 64 and 256 MiB (models/modules/lm_head_loss.h) as the head trains, before
    the rounding to whole tiles; on CUDA the fused kernel's 16-bit slices (up to 4 d_model tokens in the same
    budgets) take no more (tests/models/lm_head_loss_test.cpp).
Bytes a parameter on a GPU (the design the measurements confirm):
  fp32 plain    4 + 4 + 8        (parameters, gradients, AdamW moments)
  fp32 sharded  4 + 4 + 8/N      (distributed.shard_optimizer, ZeRO-1)
  bf16 sharded  2 + 2 + 16/N     (train.param_dtype bf16 + shard_optimizer, ZeRO-2: fp32 master, moments and
                                  gradient sum over N ranks; 2 + 16 on one GPU, whose one process keeps no
                                  bf16 gradient buffer: each gradient goes into its fp32 sum as backward
                                  makes it, and is dropped). At set-up the master
                                  weights' source is a host copy on a GPU, so each fp32 parameter leaves the
                                  device as its bucket takes its bf16 value: the device peak is 4 (fp32 or
                                  bf16 parameter + gradient) + 16/N, not more than training. On the CPU the
                                  source shares the parameters (8 + 16/N at set-up, as measured).
One sequence a GPU; GB = 10^9 bytes (an "80 GB" part: 74.5 GiB, less than the 79.6-80 GiB CUDA reports).
"""
import json
import pathlib

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
MODELS = [  # name, parameters, layers, d_model, vocabulary (GPT-2 small / Pythia-1.4B / Llama-3-8B shapes)
    ("125M", 124e6, 12, 768, 50257),
    ("1.4B", 1.41e9, 24, 2048, 50304),
    ("8B", 8.03e9, 32, 4096, 128256),
]
LENGTHS = [2048, 8192]  # tokens a sequence: chunk at L_t trains L_t, full at L_e = 4 L_t trains 4 L_t
GPUS = [1, 2, 8]


def logits_bytes(d, vocab):
    """Three slices of the chunked loss's fp32 logits: loss_chunk_tokens_for's auto while the head trains, before
    its rounding down to whole 128-token GEMM tiles (so a bound at most 3 x 127 tokens' logits over)."""
    row = 4 * vocab
    return 3 * max(64 * 2**20 // row, min(d, 256 * 2**20 // row)) * row

GB = 1e9
# Bytes a parameter the GPU holds at set-up beyond training's: none (the fp32 source of the master
# weights is staged on the host, Trainer::set_up_optimizer); the CPU measures 4 more (shared storage).
BF16_SETUP_EXTRA = 0
# The targets: (model, tokens, GPUs, GB a GPU)
TARGETS = [("8B", 8192, 8, 80), ("1.4B", 2048, 1, 24), ("1.4B", 2048, 2, 24)]


def read(name):
    path = RESULTS / f"{name}.json"
    if not path.exists():
        raise SystemExit(f"memory_table: {path} does not exist: run bench/run.sh {name}")
    return json.loads(path.read_text())["results"]


def fp32_activation_bytes():
    """Bytes a token, a layer and a unit of d_model: fp32, no activation checkpointing."""
    r = next(x for x in read("train_memory_bench") if x["model"] == "d512x8")
    tokens = r["micro_batch"] * (r["L_e"] - r["L_t"])
    return (r["peak_rss_mb_full"] - r["peak_rss_mb_truncate"]) * 2**20 / (tokens * r["layers"] * r["d_model"])


def checkpointed_activation_bytes():
    """{param_dtype: bytes a token, a layer and a unit of d_model}: bf16 autocast with activation
    checkpointing, the d512x8 rows (as the fp32 figure); and every row of that benchmark."""
    rows = read("bf16_activation_memory_bench")
    out = {}
    for dtype in ("bf16", "fp32"):
        r = next(x for x in rows if x["param_dtype"] == dtype and x["activation_checkpointing"] and
                 x["model"] == "d512x8")
        out[dtype] = r["bytes_per_token_layer_dim"]
    return out, rows


def optimizer_bytes_check():
    """The measured optimizer bytes a parameter by mode and rank count; stops unless as designed."""
    rows = read("param_dtype_memory_bench")
    wrong = [r for r in rows if not r["optimizer_as_designed"]]
    if wrong:
        raise SystemExit(f"memory_table: optimizer bytes not as designed: {wrong}")
    return rows


def gib(x):
    return f"{x / 2**30:.1f}"


def bytes_per_param(mode, n):
    return {"fp32 plain": 16.0, "fp32 sharded": 8 + 8 / n, "bf16 sharded": (2 if n == 1 else 4) + 16 / n}[mode]


def main():
    a = fp32_activation_bytes()
    ckpt, ckpt_rows = checkpointed_activation_bytes()
    opt_rows = optimizer_bytes_check()
    params = opt_rows[0]["params"]
    print(f"activation bytes a token, a layer and a unit of d_model, fp32, no checkpointing "
          f"(train_memory_bench d512x8): {a:.1f}")
    for r in ckpt_rows:
        print(f"bf16 autocast, {r['setting']}, {r['model']}: {r['bytes_per_token_layer_dim']} a token, a layer "
              f"and a unit of d_model (split: {r['per_layer_bytes_per_token_dim']} x layers + "
              f"{r['per_model_bytes_per_token_dim']} a token and a unit of d_model)")
    print(f"the table's activation checkpointing columns: the d512x8 figures, {ckpt['fp32']} (fp32 parameters) and "
          f"{ckpt['bf16']} (bf16 parameters) a token, a layer and a unit of d_model (over more layers they "
          f"count the one block recomputed at a time again in every layer: conservative)")
    print(f"optimizer bytes a parameter (param_dtype_memory_bench, llama {params} parameters, all as designed):")
    for r in opt_rows:
        print(f"  {r['mode']} at {r['ranks']} rank(s): {r['optimizer_bytes_per_param']} (designed "
              f"{r['designed_optimizer_bytes_per_param']}); resident {r['resident_bytes_per_param']} bytes a "
              f"parameter, peak RSS {max(r['step_peak_rss_mb'])} MiB"
              + (f", set-up peak {max(r['setup_peak_rss_mb'])} MiB (designed "
                 f"{r['designed_setup_bytes_per_param']} bytes a parameter)" if r.get("designed_setup_bytes_per_param")
                 else ""))
    print()

    def activations(layers, d, vocab, tokens, dtype=None):
        if dtype is None:
            return a * tokens * layers * d + logits_bytes(d, vocab)
        return ckpt[dtype] * tokens * layers * d + logits_bytes(d, vocab)

    def bf16_cell(p, n, act):
        steady, setup = p * bytes_per_param("bf16 sharded", n) + act, p * (bytes_per_param("bf16 sharded", n) +
                                                                           BF16_SETUP_EXTRA)
        return gib(steady) + (f" (set-up {gib(setup)})" if setup > steady else "")

    print("| model | tokens a sequence | activations: fp32 / ckpt, fp32 params / ckpt, bf16 params | "
          "fp32, no ckpt: 1 GPU | 2 GPUs plain / sharded | 8 GPUs plain / sharded | "
          "bf16 autocast + ckpt: 1 GPU fp32 / bf16 params | 8 GPUs fp32 plain / fp32 sharded / bf16 sharded |")
    print("|---|---|---|---|---|---|---|---|")
    for name, p, layers, d, vocab in MODELS:
        for tokens in LENGTHS:
            act, act32, act16 = (activations(layers, d, vocab, tokens), activations(layers, d, vocab, tokens, "fp32"),
                                 activations(layers, d, vocab, tokens, "bf16"))
            plain = p * 16 + act
            cells = [f"{gib(act)} / {gib(act32)} / {gib(act16)}", gib(plain)]
            for n in GPUS[1:]:
                cells.append(f"{gib(plain)} / {gib(p * bytes_per_param('fp32 sharded', n) + act)}")
            cells.append(f"{gib(p * 16 + act32)} / {bf16_cell(p, 1, act16)}")
            cells.append(f"{gib(p * 16 + act32)} / {gib(p * bytes_per_param('fp32 sharded', 8) + act32)} / "
                         f"{bf16_cell(p, 8, act16)}")
            print(f"| {name} | {tokens:,} | " + " | ".join(cells) + " |")
    print()
    for name, tokens, n, size in TARGETS:
        p, layers, d, vocab = next(m[1:] for m in MODELS if m[0] == name)
        capacity = size * GB
        print(f"{name} at {tokens:,} tokens a sequence on {n} x {size} GB ({gib(capacity)} GiB), bf16 autocast + "
              f"activation checkpointing:")
        for mode in ("fp32 plain", "fp32 sharded", "bf16 sharded") if n > 1 else ("fp32 plain", "bf16 sharded"):
            act = activations(layers, d, vocab, tokens, mode[:4])
            need = p * bytes_per_param(mode, n) + act
            label = mode if n > 1 else {"fp32 plain": "fp32", "bf16 sharded": "bf16 (2 + 16 on one GPU)"}[mode]
            line = f"  {label}: {gib(need)} GiB, headroom {100 * (1 - need / capacity):.1f}%"
            if mode.startswith("bf16"):
                setup = p * (bytes_per_param(mode, n) + BF16_SETUP_EXTRA)
                line += f"; set-up peak {gib(setup)} GiB, headroom {100 * (1 - setup / capacity):.1f}%"
            print(line)


if __name__ == "__main__":
    main()
