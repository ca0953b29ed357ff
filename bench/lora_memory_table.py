"""docs/training.md's LoRA table: Llama-3-8B on one GPU, computed (no GPU ran it) from costs measured on the CPU.

  python bench/lora_memory_table.py [--lengths 4096,8192]

Bytes (the design that bench/lora_memory_bench.py's runs confirm on SmolLM2-135M):
  frozen base    2 a parameter: train.param_dtype bf16 holds the frozen weights in bf16 (a run from a base)
  what trains    2 + 16 a parameter: the bf16 weight, and the optimizer's fp32 master, moments and gradient
                 sum (optimizer_bytes_per_trainable_param, measured 16.0 for LoRA and LoRA+ in
                 bench/results/lora_memory_bench.json when it is there); one process keeps no bf16 gradient
                 buffer (each gradient goes into its fp32 sum as backward makes it and is dropped: only the
                 tensor being summed holds one, for a moment, not counted)
  activations    5.8 bytes a token, a layer and a unit of d_model under bf16 autocast with activation
                 checkpointing and bf16 parameters (bf16_activation_memory_bench at d512 x 8, docs/distributed.md;
                 it counts the block recomputed at a time in every layer, so it errs high)
  loss slices    three slices of fp32 logits of 64 MiB: the head is frozen in every row (Llama-3's is untied,
                 so training the embedding does not train it; models/modules/lm_head_loss.h)
Llama-3-8B: 8.03e9 parameters, 32 layers, d_model 4096, 32 query / 8 key-value heads of 128, d_ff 14,336,
vocabulary 128,256, untied head. LoRA rank 16 on q, k, v, o (LongLoRA's targets). One sequence of L_t
tokens a step: a chunk run's memory is L_t's whatever L_e (64k included). The CUDA context, workspaces and
fragmentation are not counted. GB = 10^9 bytes (a "24 GB" part: 22.35 GiB).
"""
import argparse
import json
import pathlib

GIB = 2**30
PARAMS, LAYERS, D, KV, VOCAB, RANK = 8.03e9, 32, 4096, 8 * 128, 128256, 16
ACTIVATION = 5.8  # bytes / (token x layer x d_model), bf16 autocast + checkpointing, bf16 parameters
RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "lora_memory_bench.json"


def trainable_sets():
    adapters = LAYERS * (2 * RANK * (D + D) + 2 * RANK * (D + KV))  # q and o: D -> D; k and v: D -> KV
    norms = LAYERS * 2 * D + D
    embeddings = VOCAB * D
    return {
        "adapters": adapters,
        "adapters + norms (LoRA+ without the embedding)": adapters + norms,
        "adapters + norms + embeddings (LongLoRA's LoRA+)": adapters + norms + embeddings,
    }


def parts(trainable, length, state_bytes=16.0):
    """(frozen base, what trains, activations, loss slices) in bytes: one row of the table."""
    return (2 * (PARAMS - trainable), (2 + state_bytes) * trainable, ACTIVATION * length * LAYERS * D,
            3 * 64 * 2**20)


def total_gib(trainable, length, state_bytes=16.0):
    """The row's total in GiB (what bench/gpu_lora_8b_bench.py measures against)."""
    return sum(parts(trainable, length, state_bytes)) / GIB


def row(name, trainable, length, state_bytes):
    base, trains, activations, loss = parts(trainable, length, state_bytes)
    total = base + trains + activations + loss
    fits = [gb for gb in (24, 48, 80) if total < gb * 1e9]
    return (f"| {name} | {length:,} | {trainable / 1e6:,.1f}M | {base / GIB:.1f} | {trains / GIB:.2f} | "
            f"{activations / GIB:.2f} | {loss / GIB:.2f} | {total / GIB:.1f} | "
            f"{', '.join(f'{gb} GB ({100 * (1 - total / (gb * 1e9)):.0f}% free)' for gb in fits) or 'none of 24/48/80 GB'} |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", default="4096,8192")
    args = p.parse_args()
    state = 16.0
    if RESULTS.exists():
        measured = json.loads(RESULTS.read_text())
        for name in ("lora", "lora-plus"):
            got = measured["variants"][name]["optimizer_bytes_per_trainable_param"]
            print(f"measured optimizer bytes a trainable parameter, {name}: {got}")
            assert abs(got - state) < 0.05, f"{name}: {got} bytes, designed {state}"
    print("| trains | L_t | trainable | frozen base GiB | what trains GiB | activations GiB | loss slices GiB | total GiB | fits |")
    print("|---|---|---|---|---|---|---|---|---|")
    for length in (int(x) for x in args.lengths.split(",")):
        for name, trainable in trainable_sets().items():
            print(row(name, trainable, length, state))


if __name__ == "__main__":
    main()
