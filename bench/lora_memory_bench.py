"""What LoRA saves against full fine-tuning, on SmolLM2-135M's real weights, printed as JSON.

  lora_memory_bench.py [--threads N] [--length L] [--steps S] [--rank R]

Four `segtrain train` runs from runs/bases/smollm2-135m (`make real-base`), each on the same
L-token window (README.md in the base's tokenizer, bench/smollm2_bench.py's store), bf16
autocast, --steps steps of 1 x L tokens:
  full-fp32   every weight trains, fp32 parameters
  full-bf16   every weight trains, train.param_dtype bf16 (fp32 master weights in the optimizer)
  lora        model.adapters.lora rank R on q, k, v, o; the base frozen in bf16
  lora-plus   the same with train.trainable [adapters, norms, embeddings] (LongLoRA's LoRA+)
For each: the parameters that train (the tensors of final/model.safetensors: a LoRA run keeps
only those), the optimizer's state as the run reports it (optimizer_state_mb: AdamW's moments,
with bf16 parameters also the fp32 master weights and gradient sums), bytes of optimizer state
a trainable parameter (8 fp32 parameters, 16 bf16), the checkpoint's model file, tokens/s after
the first step, and the process's peak RSS by the last step (which includes loading the base:
the fp32 HF weights are read whole before the frozen ones become bf16).
Skipped (JSON with the reason) without the base folder.
"""
import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smollm2_bench import BASE, PARAMS, ROOT, run_child, steady, write_store  # noqa: E402
from train_bench import metrics_rows, safetensors_numel  # noqa: E402

VARIANTS = {
    "full-fp32": {"train.param_dtype": "fp32"},
    "full-bf16": {"train.param_dtype": "bf16"},
    "lora": {"train.param_dtype": "bf16", "model.adapters.lora.targets": "[q, k, v, o]"},
    "lora-plus": {"train.param_dtype": "bf16", "model.adapters.lora.targets": "[q, k, v, o]",
                  "train.trainable": "[adapters, norms, embeddings]"},
}


def run_variant(work, store, args, name, sets):
    out = os.path.join(work, name)
    config = out + ".yaml"
    L = args.length
    pathlib.Path(config).write_text(f"""run: {{name: {name}, output_dir: {out}, threads: {args.threads}, log_level: warn}}
model: {{init: 'hf:{BASE}', arch: llama}}
data: {{store: {store}, train_length: {L}, extended_length: {L}, sampler: {{method: truncate}}}}
train: {{budget: {{tokens: {(args.steps + 1) * L}}}, micro_batch_size: 1, warmup_steps: 0, schedule: constant,
        lr: 1.0e-4, log_every: 1, checkpoint_every: 0, tensorboard: false, precision: bf16}}
eval: {{lengths: [{L}], max_sequences: 1, batch_size: 1}}
""")
    cmd = [str(args.segtrain), "train", config]
    if name.startswith("lora"):
        cmd += ["--set", f"model.adapters.lora.rank={args.rank}", "--set", f"model.adapters.lora.alpha={2 * args.rank}"]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    run_child(cmd, out + ".log")
    rows = metrics_rows(out)
    model_file = os.path.join(out, "final", "model.safetensors")
    trainable = safetensors_numel(model_file) if name.startswith("lora") else PARAMS
    state_mb = rows[-1]["optimizer_state_mb"]
    result = {
        "trainable_params": trainable,
        "optimizer_state_mb": state_mb,
        "optimizer_bytes_per_trainable_param": round(state_mb * 2**20 / trainable, 2),
        "checkpoint_model_mb": round(os.path.getsize(model_file) / 2**20, 1),
        "tokens_per_s": round(steady([r["tokens_per_s"] for r in rows], 1), 1),
        "train_peak_rss_mb": rows[-1]["peak_rss_mb"],
        "loss": [r["loss"] for r in rows],
    }
    shutil.rmtree(out)
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", "2")))
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rank", type=int, default=16)
    args = p.parse_args()
    build = os.environ.get("BUILD_DIR", "build")
    args.segtrain = ROOT / build / "trainer" / "segtrain"
    result = {"benchmark": "lora_memory_bench"}
    if not (BASE / "config.json").exists():
        result["skipped"] = f"no {BASE} (make real-base makes it)"
        print(json.dumps(result))
        return
    args.init, args.micro_batch, args.warmup = "hf", 1, 1
    with tempfile.TemporaryDirectory() as work:
        store = os.path.join(work, "store")
        write_store(store, args)
        result.update({"model": "SmolLM2-135M (real weights)", "total_params": PARAMS, "length": args.length,
                       "steps": args.steps + 1, "threads": args.threads, "lora_rank": args.rank, "precision": "bf16",
                       "variants": {name: run_variant(work, store, args, name, sets) for name, sets in VARIANTS.items()}})
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
