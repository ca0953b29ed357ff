"""The README's table of memory per GPU, computed (not measured) from costs measured here.

  python bench/memory_table.py   prints the markdown table and the inputs it used

Measured inputs (bench/results/, from `make bench` on this machine, CPU fp32):
  - bytes a parameter: parameter 4 + gradient 4 + AdamW moments 8 (plain), the moments over N
    ranks when sharded: optimizer_state_mb of sharded_optimizer_bench (plain vs 2 sharded ranks)
    checks the 8 -> 4 at N = 2;
  - activation bytes a token, a layer and a unit of d_model: train_memory_bench's d512x8 row
    (full at L_e minus truncate at L_t, over the token difference, layers and d_model), with no
    activation checkpointing and micro-batch 1 sequence;
  - the LM head's logits: with the chunked loss (train.loss_chunk_tokens auto) three ~64 MiB slices.
Computed for one sequence a GPU at L_t = 2048 (chunk) and 4 L_t = 8192 (full at L_e = 4 L_t).
"""
import json
import pathlib

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
MODELS = [  # name, parameters, layers, d_model (GPT-2 small / Pythia-1.4B / Llama-3-8B shapes)
    ("125M", 124e6, 12, 768),
    ("1.4B", 1.41e9, 24, 2048),
    ("8B", 8.03e9, 32, 4096),
]
LENGTHS = [("L_t = 2048", 2048), ("4·L_t = 8192", 8192)]
GPUS = [1, 2, 8]
LOGITS_BYTES = 3 * 64 * 2**20


def activation_bytes_per_token_layer_dim():
    rows = json.loads((RESULTS / "train_memory_bench.json").read_text())["results"]
    r = next(x for x in rows if x["model"] == "d512x8")
    tokens = r["micro_batch"] * (r["L_e"] - r["L_t"])
    return (r["peak_rss_mb_full"] - r["peak_rss_mb_truncate"]) * 2**20 / (tokens * r["layers"] * r["d_model"])


def moment_ratio():
    path = RESULTS / "sharded_optimizer_bench.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())["results"][0]["optimizer_state_ratio"]


def gib(x):
    return f"{x / 2**30:.1f}"


def main():
    a = activation_bytes_per_token_layer_dim()
    print(f"activation bytes per token, layer and d_model (measured, CPU fp32): {a:.1f}; "
          f"sharded/plain optimizer state at 2 ranks (measured): {moment_ratio()}\n")
    print("| model | sequence | activations | 1 GPU | 2 GPUs plain / sharded | 8 GPUs plain / sharded |")
    print("|---|---|---|---|---|---|")
    for name, params, layers, d in MODELS:
        for label, length in LENGTHS:
            act = a * length * layers * d + LOGITS_BYTES
            plain = params * 16 + act
            cells = [gib(plain)]
            for n in GPUS[1:]:
                cells.append(f"{gib(plain)} / {gib(params * (8 + 8 / n) + act)}")
            print(f"| {name} | {label} | {gib(act)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
