"""How fast and in how much host memory a run loads its base, against reading the base's files once.

  base_load_bench.py [--segtrain BIN] [--synthetic-params 3e9] [--no-synthetic] [--threads N]

For each base, with the page cache dropped before each measurement (so every figure is a cold
read; when the cache cannot be dropped the JSON says "cache": "warm"):
  read_s         `cat` of the files loading reads (*.safetensors, config.json) into /dev/null
  load_s         segtrain's own line "base loaded and converted in X s": the model built, the base's
                 weights read, LoRA added, the base's files hashed for base.json
  load_over_read load_s / read_s (the issue's target: within 1.5)
  peak_rss_mb    the process's peak resident memory over the whole run (VmHWM), and over the
                 base's bytes as stored (peak_over_base); baseline_rss_mb is `segtrain --version`'s
  load_peak_over_base  (the peak by the end of loading - the baseline) / the base's bytes
  first_step_s   the process's wall time to the end of step 1 (when metrics.jsonl got its row)
The run: LoRA rank 16 on q, k, v, o with norms, frozen base in train.param_dtype bf16, one step of
1 x 16 tokens (a store of SmolLM2's tokens; the synthetic base takes SmolLM2's vocabulary).
Bases:
  smollm2-135m-fp32  runs/bases/smollm2-135m as `make real-base` writes it (fp32)
  smollm2-135m-bf16  the same weights written in bf16
  llama-3b-bf16      a random Llama of Llama-3.2-3B's shape with SmolLM2's vocabulary (3.1 B
                     parameters, 6.2 GB in bf16), written here in 2 GB shards and removed after
Prints JSON; skipped (with the reason) without the SmolLM2 base.
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smollm2_bench import BASE, ROOT, write_store  # noqa: E402

SYNTHETIC = {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24,
             "num_key_value_heads": 8, "vocab_size": 49152}
LOADED_LINE = re.compile(r"base loaded and converted in ([0-9.]+) s, peak host memory ([0-9.]+) MiB")


def loaded_files(folder):
    return sorted(p for p in pathlib.Path(folder).iterdir()
                  if p.name.endswith(".safetensors") or p.name in ("config.json", "model.safetensors.index.json"))


def drop_caches():
    """Whether the page cache could be dropped (root on a machine that allows it)."""
    try:
        os.sync()
        pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def cold_read_s(folder):
    files = [str(p) for p in loaded_files(folder)]
    start = time.perf_counter()
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def write_bf16(source, out):
    """The source folder's weights in bf16, its config saying so."""
    import torch
    from safetensors.torch import load_file, save_file
    os.makedirs(out)
    for f in loaded_files(source):
        if f.name.endswith(".safetensors"):
            save_file({k: v.to(torch.bfloat16) for k, v in load_file(f).items()}, os.path.join(out, f.name),
                      metadata={"format": "pt"})
        else:
            shutil.copy(f, out)
    config = json.loads(pathlib.Path(out, "config.json").read_text())
    config["torch_dtype"] = config["dtype"] = "bfloat16"
    pathlib.Path(out, "config.json").write_text(json.dumps(config, indent=2))


def write_synthetic(out, scale):
    """A random Llama (std 0.02) of SYNTHETIC's shape, `scale` x its layers, in 2 GB bf16 shards."""
    import torch
    from safetensors.torch import save_file
    s = dict(SYNTHETIC, num_hidden_layers=max(1, round(SYNTHETIC["num_hidden_layers"] * scale)))
    d, ff, v = s["hidden_size"], s["intermediate_size"], s["vocab_size"]
    kv = d // s["num_attention_heads"] * s["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,), "lm_head.weight": (v, d)}
    for i in range(s["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                       p + "self_attn.q_proj.weight": (d, d), p + "self_attn.k_proj.weight": (kv, d),
                       p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, d),
                       p + "mlp.gate_proj.weight": (ff, d), p + "mlp.up_proj.weight": (ff, d),
                       p + "mlp.down_proj.weight": (d, ff)})
    os.makedirs(out)
    generator = torch.Generator().manual_seed(0)
    shards, shard, shard_bytes, weight_map = [], {}, 0, {}
    for name, shape in shapes.items():
        t = (torch.ones(shape) if name.endswith("norm.weight")
             else torch.randn(shape, generator=generator) * 0.02).to(torch.bfloat16)
        shard[name] = t
        shard_bytes += t.numel() * 2
        if shard_bytes >= 2_000_000_000:
            shards.append(shard)
            shard, shard_bytes = {}, 0
    if shard:
        shards.append(shard)
    total = 0
    for i, tensors in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, os.path.join(out, file), metadata={"format": "pt"})
        for name, t in tensors.items():
            weight_map[name] = file
            total += t.numel() * 2
    pathlib.Path(out, "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "rms_norm_eps": 1e-5,
              "rope_theta": 500000.0, "max_position_embeddings": 8192, "tie_word_embeddings": False,
              "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2, **s}
    pathlib.Path(out, "config.json").write_text(json.dumps(config, indent=2))
    return sum(t.numel() for tensors in shards for t in tensors.values())


def run_child(cmd, log_path):
    """Runs cmd; returns its own peak resident memory in MiB: the largest VmHWM read from
    /proc/PID/status every 20 ms (wait4's ru_maxrss would include this Python's size at fork,
    which Linux carries over exec)."""
    peak_kb = 0
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        status = pathlib.Path(f"/proc/{proc.pid}/status")
        while proc.poll() is None:
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak_kb = max(peak_kb, int(line.split()[1]))
            except (OSError, ValueError, IndexError):
                pass
            time.sleep(0.02)
    if proc.returncode != 0:
        sys.stderr.write(pathlib.Path(log_path).read_text()[-4000:])
        raise SystemExit(f"base_load_bench: {' '.join(map(str, cmd[:3]))} ... failed with exit code {proc.returncode}")
    return peak_kb / 1024.0


def run_lora(args, work, store, base, tag):
    out = os.path.join(work, tag)
    config = out + ".yaml"
    pathlib.Path(config).write_text(f"""run: {{name: {tag}, output_dir: {out}, threads: {args.threads}, log_level: info}}
model: {{init: 'hf:{base}', arch: llama, adapters: {{lora: {{rank: 16, alpha: 32, targets: [q, k, v, o]}}}}}}
data: {{store: {store}, train_length: 16, extended_length: 16, sampler: {{method: truncate}}}}
train: {{budget: {{tokens: 16}}, micro_batch_size: 1, warmup_steps: 0, schedule: constant, lr: 1.0e-4,
        log_every: 1, checkpoint_every: 0, tensorboard: false, precision: bf16, param_dtype: bf16,
        trainable: [adapters, norms]}}
eval: {{lengths: [16], max_sequences: 1, batch_size: 1}}
""")
    log_path = out + ".log"
    start = time.time()
    peak_mb = run_child([str(args.segtrain), "train", config], log_path)
    text = pathlib.Path(log_path).read_text()
    loaded = LOADED_LINE.search(text)
    if not loaded:
        raise SystemExit(f"base_load_bench: no 'base loaded' line in {log_path}:\n{text[-2000:]}")
    # One step, logged at step 1: metrics.jsonl was last written when step 1 ended.
    metrics = pathlib.Path(out, "metrics.jsonl")
    result = {"load_s": float(loaded.group(1)), "load_peak_rss_mb": float(loaded.group(2)),
              "peak_rss_mb": round(peak_mb, 1), "first_step_s": round(metrics.stat().st_mtime - start, 1)}
    shutil.rmtree(out, ignore_errors=True)
    return result


def baseline_rss_mb(args, work):
    """What the binary holds before any work: LibTorch and the other libraries mapped in."""
    return round(run_child([str(args.segtrain), "--version"], os.path.join(work, "version.log")), 1)


def measure(args, work, store, base, tag):
    stored = sum(p.stat().st_size for p in loaded_files(base))
    cold = drop_caches()
    read_s = cold_read_s(base)
    drop_caches()
    result = {"base_mb": round(stored / 2**20, 1), "cache": "cold" if cold else "warm", "read_s": round(read_s, 2)}
    result.update(run_lora(args, work, store, base, tag))
    result["load_over_read"] = round(result["load_s"] / read_s, 2)
    result["peak_over_base"] = round(result["peak_rss_mb"] * 2**20 / stored, 2)
    # What loading adds to the libraries' own memory, over the base's bytes.
    result["load_peak_over_base"] = round((result["load_peak_rss_mb"] - args.baseline_mb) * 2**20 / stored, 2)
    print(f"base_load_bench: {tag}: {json.dumps(result)}", file=sys.stderr, flush=True)
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--segtrain", default=str(ROOT / os.environ.get("BUILD_DIR", "build") / "trainer" / "segtrain"))
    p.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", "2")))
    p.add_argument("--no-synthetic", action="store_true", help="only SmolLM2 (no 6 GB synthetic base)")
    p.add_argument("--synthetic-scale", type=float, default=1.0, help="fraction of the synthetic base's 28 layers")
    p.add_argument("--work", default=None, help="where bases are written (default: a temporary folder)")
    args = p.parse_args()
    result = {"benchmark": "base_load_bench", "segtrain": args.segtrain}
    if not (BASE / "config.json").exists():
        result["skipped"] = f"no {BASE} (make real-base makes it)"
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        store = os.path.join(work, "store")
        write_store(store, argparse.Namespace(length=16, init="hf", micro_batch=1, warmup=1, steps=1))
        bases = {"smollm2-135m-fp32": str(BASE)}
        bases["smollm2-135m-bf16"] = os.path.join(work, "smollm2-bf16")
        write_bf16(BASE, bases["smollm2-135m-bf16"])
        if not args.no_synthetic:
            bases["llama-3b-bf16"] = os.path.join(work, "llama-3b")
            result["synthetic_params"] = write_synthetic(bases["llama-3b-bf16"], args.synthetic_scale)
        result["baseline_rss_mb"] = args.baseline_mb = baseline_rss_mb(args, work)
        result["bases"] = {tag: measure(args, work, store, base, tag) for tag, base in bases.items()}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
