"""One GPU extends a Llama-3-8B-shaped model with LoRA: docs/training.md's table, measured. Prints JSON.

  gpu_lora_8b_bench.py     (BENCH_DEVICE=cuda: bench/gpu_lora_8b_bench.sh; cpu: a small shape, to check the script)

A base of Llama-3-8B's shape (32 layers, d_model 4,096, 32 query / 8 key-value heads of 128, d_ff 14,336,
vocabulary 128,256, untied head, RoPE theta 500,000) with random bf16 weights (normal, std 0.02; norms 1) is
written as a sharded HF folder (drawn on the GPU, so writing it is the disk's time), then `segtrain train`
extends it as the table's first row: chunk-0.25 to L_e = 65,536 at L_t = 4,096, LoRA rank 16 (alpha 32) on
q, k, v, o with the norms trainable, the base frozen in bf16 (train.param_dtype bf16), bf16 autocast and
activation checkpointing, one sequence a step, BENCH_STEPS steps (default 6). Reported: the caching
allocator's peak (peak_gpu_mb, peak_gpu_reserved_mb of metrics.jsonl) against the table's total for that
row (bench/lora_memory_table.py: computed, not counting the CUDA context or fragmentation), the parameters
that train, tokens/s after the first 2 steps, and how long writing and loading the base took. Random
weights: the speed and memory of the real model's, not its loss. Without a visible GPU (BENCH_DEVICE=cuda)
it prints {"benchmark": ..., "skipped": "why"}; BENCH_DEVICE=cpu runs a 2-layer shape of the same
proportions on the CPU (the script's own check, no figure to quote).
"""
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lora_memory_table as table  # noqa: E402
import train_bench as tb  # noqa: E402

LLAMA3_8B = dict(layers=32, d_model=4096, heads=32, kv_heads=8, d_ff=14336, vocab=128256, length=4096, factor=16)
SMALL = dict(layers=2, d_model=256, heads=8, kv_heads=2, d_ff=896, vocab=4096, length=256, factor=16)
RANK = 16


def write_base(folder, shape, device):
    """A sharded HF Llama folder of `shape` with random bf16 weights, one shard per 4 layers."""
    import torch
    from safetensors.torch import save_file
    d, kv, head = shape["d_model"], shape["kv_heads"] * (shape["d_model"] // shape["heads"]), shape["d_model"] // shape["heads"]
    gen = torch.Generator(device=device).manual_seed(0)

    def normal(*size):
        return (torch.randn(*size, generator=gen, device=device, dtype=torch.float32) * 0.02).to(torch.bfloat16)

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16, device=device)

    shards = [{"model.embed_tokens.weight": normal(shape["vocab"], d)}]
    for first in range(0, shape["layers"], 4):
        shard = {}
        for i in range(first, min(first + 4, shape["layers"])):
            p = f"model.layers.{i}."
            shard.update({p + "self_attn.q_proj.weight": normal(d, d), p + "self_attn.k_proj.weight": normal(kv, d),
                          p + "self_attn.v_proj.weight": normal(kv, d), p + "self_attn.o_proj.weight": normal(d, d),
                          p + "mlp.gate_proj.weight": normal(shape["d_ff"], d),
                          p + "mlp.up_proj.weight": normal(shape["d_ff"], d),
                          p + "mlp.down_proj.weight": normal(d, shape["d_ff"]),
                          p + "input_layernorm.weight": ones(d), p + "post_attention_layernorm.weight": ones(d)})
        shards.append(shard)
    shards.append({"model.norm.weight": ones(d), "lm_head.weight": normal(shape["vocab"], d)})
    os.makedirs(folder)
    weight_map, total = {}, 0
    for n, shard in enumerate(shards):
        name = f"model-{n + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: v.cpu() for k, v in shard.items()}, os.path.join(folder, name), metadata={"format": "pt"})
        for k, v in shard.items():
            weight_map[k] = name
            total += v.numel() * 2
    pathlib.Path(folder, "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
              "intermediate_size": shape["d_ff"], "num_hidden_layers": shape["layers"],
              "num_attention_heads": shape["heads"], "num_key_value_heads": shape["kv_heads"], "head_dim": head,
              "vocab_size": shape["vocab"], "max_position_embeddings": 8192, "rope_theta": 500000.0,
              "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "bfloat16",
              "bos_token_id": 1, "eos_token_id": 2}
    pathlib.Path(folder, "config.json").write_text(json.dumps(config, indent=1))
    return total // 2


def main():
    benchmark = "gpu_lora_8b_bench"
    if tb.CUDA:
        tb.cuda_or_skip(benchmark)
    else:
        tb.check_segtrain()
    shape = LLAMA3_8B if tb.CUDA else SMALL
    steps = int(os.environ.get("BENCH_STEPS", "6"))
    L, Le = shape["length"], shape["length"] * shape["factor"]
    work = tempfile.mkdtemp(prefix="segtrain-lora-8b-", dir=os.environ.get("BENCH_WORK_DIR"))
    try:
        started = time.time()
        params = write_base(os.path.join(work, "base"), shape, "cuda" if tb.CUDA else "cpu")
        written = time.time() - started
        tb.write_store(os.path.join(work, "store"), shape["vocab"], 4, Le)
        out = os.path.join(work, "run")
        config = os.path.join(work, "run.yaml")
        pathlib.Path(config).write_text(f"""run: {{name: lora-8b, output_dir: {out}, log_level: info, device: {tb.DEVICE}, threads: {os.cpu_count()}}}
model: {{init: 'hf:{work}/base', arch: llama, activation_checkpointing: true,
        adapters: {{lora: {{rank: {RANK}, alpha: {2 * RANK}, targets: [q, k, v, o]}}}}}}
data: {{store: {work}/store, train_length: {L}, extended_length: {Le}, sampler: {{method: chunk, alpha: 0.25}},
       allow_tokenizer_mismatch: true}}
train: {{budget: {{tokens: {steps * L}}}, micro_batch_size: 1, warmup_steps: 0, schedule: constant, lr: 1.0e-4,
        log_every: 1, checkpoint_every: 0, tensorboard: false, precision: bf16, param_dtype: bf16,
        trainable: [adapters, norms]}}
eval: {{lengths: [{L}], max_sequences: 1, batch_size: 1}}
""")
        started = time.time()
        peak_rss = tb.run_child([str(tb.SEGTRAIN), "train", config], os.path.join(work, "run.log"))
        wall = time.time() - started
        rows = tb.metrics_rows(out)
        log = pathlib.Path(work, "run.log").read_text()
        result = {"benchmark": benchmark, "device": tb.DEVICE, "shape": "llama-3-8b" if tb.CUDA else "small (CPU check)",
                  "parameters": params, "train_length": L, "extended_length": Le, "steps": len(rows),
                  "lora": {"rank": RANK, "alpha": 2 * RANK, "targets": ["q", "k", "v", "o"],
                           "trainable": ["adapters", "norms"]},
                  "trainable_params": tb.safetensors_numel(os.path.join(out, "final", "model.safetensors")),
                  "base_write_s": round(written, 1), "train_wall_s": round(wall, 1),
                  "tokens_per_s": round(len(rows[2:]) / sum(1 / r["tokens_per_s"] for r in rows[2:]), 1)
                  if len(rows) > 2 else None,
                  "loss": [r["loss"] for r in rows], "peak_rss_mb": round(peak_rss, 1),
                  "converted_line": next((line for line in log.splitlines() if "model converted" in line), None)}
        if tb.CUDA:
            peak, reserved = tb.gpu_peaks(rows, out)
            trainable = dict(table.trainable_sets())["adapters + norms (LoRA+ without the embedding)"]
            base = 2 * (table.PARAMS - trainable)
            predicted = (base + 20 * trainable + table.ACTIVATION * L * table.LAYERS * table.D + 3 * 64 * 2**20) / 2**30
            result.update({"peak_gpu_mb": round(peak, 1), "peak_gpu_reserved_mb": round(reserved, 1),
                           "table_total_gib": round(predicted, 2), "peak_gpu_gib": round(peak / 1024, 2),
                           "fits_24gb": reserved * 2**20 < 24e9})
        print(json.dumps(result, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
