"""One GPU trains the models its users extend: LoRA at Llama-3-8B's shape and full fine-tuning at Llama-3.2-1B's.

  gpu_lora_8b_bench.py [--phases lora,full-1b,lora-auto,lora-long] [--json-out FILE]
      (BENCH_DEVICE=cuda: bench/gpu_lora_8b_bench.sh, `make gpu-bench`; cpu: small shapes, the script's own check)

Phases, each one `segtrain train` from a base with random bf16 weights (normal, std 0.02; norms 1) written as a
sharded HF Llama folder (drawn on the GPU, so writing it is the disk's time), bf16 autocast, one row each:
  lora       Llama-3-8B (32 layers, d_model 4,096, 32 query / 8 key-value heads of 128, d_ff 14,336, vocabulary
             128,256, untied head, RoPE theta 500,000): chunk-0.25 at L_t 4,096 to L_e 65,536, LoRA rank 16
             (alpha 32) on q, k, v, o with the norms training, the base frozen in bf16 (train.param_dtype bf16),
             activation checkpointing, one sequence a step (docs/training.md's table's first row, 18.3 GiB);
  lora-long  the same at L_t 8,192 to L_e 131,072 (the table's 21.2 GiB row);
  lora-auto  the lora phase with model.activation_checkpointing: auto within train.batch_memory_gib
             BENCH_AUTO_MEMORY_GIB (22: a 24 GB card's room): how many of the 32 blocks such a card recomputes
             (the plan line's count, recomputed_blocks) and what keeping the others' activations gains;
  full-1b    Llama-3.2-1B (16 layers, d_model 2,048, 32 / 8 heads of 64, d_ff 8,192, the same vocabulary, tied
             head): every weight trains, train.param_dtype bf16 (fp32 master weights and moments in the
             optimizer), chunk-0.25 at L_t 4,096 to L_e 65,536, BENCH_FULL_MICRO_BATCH (4) sequences a step, no
             activation checkpointing.
BENCH_DEVICE=cpu runs the same phases on small shapes of the same layout (2 layers; L_t 256, 512 and 256):
figures of no use, every code path of the GPU run. Reported per row: tokens/s after the first 2 steps, model
FLOPs a token and MFU (flops_per_token below) against the matmul peak measured in the same call (CUDA: bf16
8192^3; CPU: 2048^3, the faster of fp32 and bf16) and the GPU's nominal dense bf16 peak, the caching allocator's peak (peak_gpu_mb,
peak_gpu_reserved_mb of metrics.jsonl) against the computed table (LoRA rows), the parameters that train, the
time to write the base, the base's load time (segtrain's own "base loaded and converted in S s" line) and the
time from the process's start to its first step's metrics row. Random weights: the speed and memory of the real
model's, not its loss.

Before writing a base (and before each run) it checks the free disk where it writes (statvfs) against the base,
the run's final checkpoint and a margin, and the host memory available (/proc/meminfo MemAvailable, or
BENCH_MEMINFO) against BENCH_HOST_MEMORY_FACTOR (1.5) times the base's bytes (a LoRA run from a 3B bf16 base
peaked at 1.08x its bytes, bench/base_load_bench.py; the writer holds one shard); short of either it says what it needs and what is there in one line, exit 2.
Its files go into BENCH_WORK (a folder its caller owns and removes: bench/gpu_lora_8b_bench.sh) or else into a
folder of its own under BENCH_WORK_DIR (default the temp dir) that it removes on any exit, SIGTERM and SIGINT
included (its segtrain child is killed first). --json-out FILE merges each finished row into FILE (written
atomically) as it goes, so a killed call keeps the rows that finished. Without a visible GPU (BENCH_DEVICE=cuda)
it prints {"benchmark": ..., "skipped": "why"}.
"""
import argparse
import json
import math
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lora_memory_table as table  # noqa: E402
import train_bench as tb  # noqa: E402

BENCHMARK = "gpu_lora_8b_bench"
# tied: the head is the token table (a matmul counted once, no separate tensor).
LLAMA3_8B = dict(name="llama-3-8b", layers=32, d_model=4096, heads=32, kv_heads=8, head_dim=128, d_ff=14336,
                 vocab=128256, tied=False, max_positions=8192)
LLAMA32_1B = dict(name="llama-3.2-1b", layers=16, d_model=2048, heads=32, kv_heads=8, head_dim=64, d_ff=8192,
                  vocab=128256, tied=True, max_positions=131072)
SMALL_8B = dict(name="small-8b (CPU check)", layers=2, d_model=256, heads=8, kv_heads=2, head_dim=32, d_ff=896,
                vocab=4096, tied=False, max_positions=256)
SMALL_1B = dict(name="small-1b (CPU check)", layers=2, d_model=128, heads=4, kv_heads=2, head_dim=32, d_ff=512,
                vocab=2048, tied=True, max_positions=256)
RANK = 16
TARGETS = ("q", "k", "v", "o")
FACTOR = 16  # L_e = 16 L_t (65,536 at 4,096)
# name: (shape on cuda, on cpu, L_t on cuda, on cpu, lora, model.activation_checkpointing, default steps)
PHASES = {
    "lora": (LLAMA3_8B, SMALL_8B, 4096, 256, True, "true", 6),
    "lora-long": (LLAMA3_8B, SMALL_8B, 8192, 512, True, "true", 6),
    "full-1b": (LLAMA32_1B, SMALL_1B, 4096, 256, False, "false", 10),
    "lora-auto": (LLAMA3_8B, SMALL_8B, 4096, 256, True, "auto", 6),
}
DEFAULT_PHASES = "lora,full-1b,lora-auto,lora-long"
MEASURED_FROM_STEP = 2  # tokens/s over the steps after the first 2 (allocation, cuBLAS, the allocator's warm-up)
TARGET_GIB = 22.0  # issue 57: L_t 4,096 under 22 GiB, so that a 24 GB card holds it


class Stopped(Exception):
    """SIGTERM or SIGINT: the run stops, its files are removed, the exit code is 128 + the signal."""

    def __init__(self, signum):
        super().__init__(f"signal {signum}")
        self.signum = signum


def on_signal(signum, _frame):
    raise Stopped(signum)


def refuse(message):
    """One line on stderr, exit 2 (a machine that cannot run the bench, not a failure of segtrain)."""
    print(f"{BENCHMARK}: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


# --- sizes and FLOPs -----------------------------------------------------------------------------------------


def matmul_params(s):
    """Parameters of the matmuls a token goes through: q, k, v, o, gate, up, down in every layer, and the head
    (the embedding is a lookup, no FLOPs; a tied head counts once, as the head)."""
    q, kv = s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    per_layer = s["d_model"] * q * 2 + s["d_model"] * kv * 2 + 3 * s["d_model"] * s["d_ff"]
    return s["layers"] * per_layer + s["vocab"] * s["d_model"]


def param_count(s):
    norms = s["layers"] * 2 * s["d_model"] + s["d_model"]
    table_rows = 0 if s["tied"] else s["vocab"] * s["d_model"]  # the untied head besides the embedding
    return matmul_params(s) + norms + table_rows


def lora_params(s):
    """Adapters of rank RANK on q, k, v, o: A (r x in) and B (out x r) each."""
    q, kv, d = s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"], s["d_model"]
    return s["layers"] * RANK * ((d + q) + (d + kv) + (d + kv) + (q + d))


def norm_params(s):
    return s["layers"] * 2 * s["d_model"] + s["d_model"]


def attention_flops(s, length):
    """Attention's FLOPs a token over `length` tokens, forward and backward: the forward's QK^T and PV take
    2 T (heads x head_dim) FLOPs each a layer, 4 T H hd; the backward twice that (dS -> dQ, dK; dP, dV), whether or
    not any weight trains: 12 layers T H hd. Counted full, not causal (PaLM's appendix B, bench/train_bench.py)."""
    return 3 * 4 * s["layers"] * length * s["heads"] * s["head_dim"]


def flops_per_token(s, length, lora):
    """Model FLOPs of one trained token (recomputation by activation checkpointing not counted).
    Full fine-tuning: 6 N (forward 2 N, backward 2 N for the input gradients and 2 N for the weight gradients)
    plus attention. A frozen base (LoRA): 4 N (forward 2 N and the input gradients 2 N; no weight gradient of a
    frozen matrix) plus attention plus the adapters' 6 r (in + out) a target (forward, input and weight gradients
    of A and B); the norms' weight gradients are elementwise, not counted. N = matmul_params."""
    n = matmul_params(s)
    if not lora:
        return 6 * n + attention_flops(s, length)
    return 4 * n + attention_flops(s, length) + 6 * lora_params(s)


# --- resources -------------------------------------------------------------------------------------------------


def mem_available(meminfo=None):
    """MemAvailable of /proc/meminfo (or BENCH_MEMINFO), in bytes; None when the file does not say."""
    path = meminfo or os.environ.get("BENCH_MEMINFO", "/proc/meminfo")
    try:
        for line in pathlib.Path(path).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def free_disk(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def gb(n):
    return f"{n / 1e9:.1f} GB"


def check_resources(where, what, need_disk, need_memory, meminfo=None):
    """Refuses (one line, exit 2) when `where` has less free disk than need_disk or the host less memory
    available than need_memory; `what` names the files about to be written."""
    disk = free_disk(where)
    memory = mem_available(meminfo)
    short = []
    if disk < need_disk:
        short.append(f"{gb(need_disk)} of free disk in {where} (there: {gb(disk)})")
    if memory is not None and memory < need_memory:
        short.append(f"{gb(need_memory)} of available host memory to load it (MemAvailable: {gb(memory)})")
    if short:
        refuse(f"not writing {what}: it needs " + " and ".join(short) +
               "; free some, or set BENCH_WORK_DIR to a larger disk")
    return disk, memory


# --- files ---------------------------------------------------------------------------------------------------


def write_base(folder, s, device):
    """A sharded HF Llama folder of shape `s` with random bf16 weights, one shard per 4 layers; config.json is
    written last (a folder without it is a base whose writing was cut). Returns its parameter count."""
    import torch
    from safetensors.torch import save_file
    d, q, kv = s["d_model"], s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    gen = torch.Generator(device=device).manual_seed(0)

    def normal(*size):
        return (torch.randn(*size, generator=gen, device=device, dtype=torch.float32) * 0.02).to(torch.bfloat16)

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16, device=device)

    shards = [{"model.embed_tokens.weight": normal(s["vocab"], d)}]
    for first in range(0, s["layers"], 4):
        shard = {}
        for i in range(first, min(first + 4, s["layers"])):
            p = f"model.layers.{i}."
            shard.update({p + "self_attn.q_proj.weight": normal(q, d), p + "self_attn.k_proj.weight": normal(kv, d),
                          p + "self_attn.v_proj.weight": normal(kv, d), p + "self_attn.o_proj.weight": normal(d, q),
                          p + "mlp.gate_proj.weight": normal(s["d_ff"], d),
                          p + "mlp.up_proj.weight": normal(s["d_ff"], d),
                          p + "mlp.down_proj.weight": normal(d, s["d_ff"]),
                          p + "input_layernorm.weight": ones(d), p + "post_attention_layernorm.weight": ones(d)})
        shards.append(shard)
    last = {"model.norm.weight": ones(d)}
    if not s["tied"]:
        last["lm_head.weight"] = normal(s["vocab"], d)
    shards.append(last)
    os.makedirs(folder)
    weight_map, total = {}, 0
    for n, shard in enumerate(shards):
        name = f"model-{n + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: v.cpu() for k, v in shard.items()}, os.path.join(folder, name), metadata={"format": "pt"})
        for k, v in shard.items():
            weight_map[k] = name
            total += v.numel()
        shard.clear()
    pathlib.Path(folder, "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 2 * total}, "weight_map": weight_map}))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
              "intermediate_size": s["d_ff"], "num_hidden_layers": s["layers"],
              "num_attention_heads": s["heads"], "num_key_value_heads": s["kv_heads"], "head_dim": s["head_dim"],
              "vocab_size": s["vocab"], "max_position_embeddings": s["max_positions"], "rope_theta": 500000.0,
              "rms_norm_eps": 1e-5, "tie_word_embeddings": s["tied"], "hidden_act": "silu",
              "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
    pathlib.Path(folder, "config.json").write_text(json.dumps(config, indent=1))
    return total


def run_process(cmd, log_path, metrics_path=None):
    """Runs cmd (segtrain, or this script writing a base) to completion, killing it when this process is
    stopped. Returns (peak RSS MB, seconds from its start to its first metrics row or None, wall seconds).
    The first row is polled every 0.1 s."""
    started = time.time()
    first_row = None
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tb.ROOT)
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if first_row is None and metrics_path and os.path.exists(metrics_path) and os.path.getsize(metrics_path) > 0:
                    first_row = time.time() - started
                time.sleep(0.1)
        except BaseException:
            proc.kill()  # its files are about to be removed: nothing of it to keep
            proc.wait()
            raise
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.stderr.write(pathlib.Path(log_path).read_text()[-4000:])
        raise SystemExit(f"{BENCHMARK}: {pathlib.Path(cmd[0]).name} {cmd[1]} failed with exit code {code} ({log_path})")
    return usage.ru_maxrss / 1024.0, first_row, time.time() - started


# --- one phase -------------------------------------------------------------------------------------------------


def auto_memory_gib():
    return float(os.environ.get("BENCH_AUTO_MEMORY_GIB", "22"))


def phase_config(path, out, base, store, s, L, lora, checkpointing, steps, micro_batch):
    lora_yaml = (f"\n        adapters: {{lora: {{rank: {RANK}, alpha: {2 * RANK}, targets: [{', '.join(TARGETS)}]}}}},"
                 if lora else "")
    trainable = "\n        trainable: [adapters, norms]," if lora else ""
    if checkpointing == "auto":
        trainable += f"\n        batch_memory_gib: {auto_memory_gib():g},"
    pathlib.Path(path).write_text(f"""run: {{name: {pathlib.Path(out).name}, output_dir: {out}, log_level: info, device: {tb.DEVICE}, threads: {os.cpu_count()}}}
model: {{init: 'hf:{base}', arch: llama, activation_checkpointing: {checkpointing},{lora_yaml}}}
data: {{store: {store}, train_length: {L}, extended_length: {FACTOR * L}, sampler: {{method: chunk, alpha: 0.25}},
       allow_tokenizer_mismatch: true}}
train: {{budget: {{tokens: {steps * micro_batch * L}}}, micro_batch_size: {micro_batch}, warmup_steps: 0,
        schedule: constant, lr: 1.0e-4, log_every: 1, checkpoint_every: 0, tensorboard: false, precision: bf16,
        param_dtype: bf16,{trainable}}}
eval: {{lengths: [{L}], max_sequences: 1, batch_size: 1}}
""")


def measured_peak(work, gpu):
    """The matmul peak (GFLOP/s) of this device, measured once per work folder (train_bench.py peak)."""
    cached = pathlib.Path(work, "peak.json")
    if cached.exists():
        return json.loads(cached.read_text())
    # Its runs are bf16: on the CPU they compute in bf16 where that is the faster (cpu_matmul.h).
    peak = tb.run_json(["peak"] if gpu else ["peak", "bf16-or-fp32"])
    part, nominal = tb.nominal_peak(gpu) if gpu else (None, None)
    peak.update({"gpu": gpu, "gpu_part": part, "nominal_bf16_tflops": nominal})
    cached.write_text(json.dumps(peak))
    return peak


def run_phase(name, work, gpu):
    s_cuda, s_cpu, L_cuda, L_cpu, lora, checkpointing, default_steps = PHASES[name]
    s, L = (s_cuda, L_cuda) if tb.CUDA else (s_cpu, L_cpu)
    steps = int(os.environ.get("BENCH_STEPS", default_steps))
    micro_batch = 1 if lora else int(os.environ.get("BENCH_FULL_MICRO_BATCH", "4"))
    Le = FACTOR * L
    params = param_count(s)
    base_bytes = 2 * params
    trainable = lora_params(s) + norm_params(s) if lora else params
    factor = float(os.environ.get("BENCH_HOST_MEMORY_FACTOR", "1.5"))
    base = os.path.join(work, "base-" + s["name"].split()[0])
    have_base = os.path.exists(os.path.join(base, "config.json"))
    # The final checkpoint holds fp32 master weights of what trains; the store int32 tokens: at most 16
    # sequences' documents (the sampler goes round them again past that).
    docs = min(steps * micro_batch, 16) + 2
    store_bytes = docs * Le * 4
    need_disk = (0 if have_base else base_bytes) + 4 * trainable + store_bytes + 2**30
    check_resources(work, f"the {s['name']} base ({gb(base_bytes)}) and the {name} run" if not have_base
                    else f"the {name} run on the {s['name']} base", need_disk, factor * base_bytes)
    written = None
    if not have_base:
        shutil.rmtree(base, ignore_errors=True)  # a folder whose writing was cut
        # In a child process: drawing on the GPU leaves a CUDA context and cached blocks, which must not stay
        # on the device while segtrain trains.
        _, _, written = run_process([sys.executable, os.path.abspath(__file__), "write-base", base, s["name"]],
                                    base + ".log")
        got = json.loads(pathlib.Path(base + ".log").read_text().strip().splitlines()[-1])["parameters"]
        assert got == params, f"wrote {got} parameters, expected {params}"
        tb.log(f"{name}: wrote the {s['name']} base ({gb(base_bytes)}) in {written:.1f} s")
    store = os.path.join(work, f"store-{s['vocab']}-{Le}-{docs}")
    if not os.path.exists(os.path.join(store, "meta.json")):
        shutil.rmtree(store, ignore_errors=True)
        tb.write_store(store, s["vocab"], docs, Le)
    out = os.path.join(work, f"run-{name}")
    shutil.rmtree(out, ignore_errors=True)
    config = out + ".yaml"
    phase_config(config, out, base, store, s, L, lora, checkpointing, steps, micro_batch)
    peak_rss, to_first_row, wall = run_process([str(tb.SEGTRAIN), "train", config], out + ".log",
                                               os.path.join(out, "metrics.jsonl"))
    rows = tb.metrics_rows(out)
    log = pathlib.Path(out + ".log").read_text()
    loaded = re.search(r"base loaded and converted in ([0-9.]+) s[^\n]*", log)
    chose = re.search(r"activation checkpointing auto: ([0-9]+) of ([0-9]+) blocks \(measured: [^)]*\)", log)
    measured = rows[MEASURED_FROM_STEP:]
    rate = len(measured) / sum(1 / r["tokens_per_s"] for r in measured) if measured else None
    fpt = flops_per_token(s, L, lora)
    peak = measured_peak(work, gpu)
    row = {"phase": name, "device": tb.DEVICE, "shape": s["name"], "method": "lora" if lora else "full",
           "parameters": params, "layers": s["layers"], "d_model": s["d_model"], "heads": s["heads"],
           "kv_heads": s["kv_heads"], "d_ff": s["d_ff"], "vocab": s["vocab"],
           "train_length": L, "extended_length": Le, "micro_batch": micro_batch,
           "activation_checkpointing": {"true": True, "false": False}.get(checkpointing, checkpointing),
           # auto: the blocks it recomputes (the plan line's count; None where it said none), its budget, the line.
           "recomputed_blocks": (int(chose.group(1)) if chose else None) if checkpointing == "auto"
           else s["layers"] if checkpointing == "true" else 0,
           "batch_memory_gib": auto_memory_gib() if checkpointing == "auto" else None,
           "auto_line": chose.group(0) if chose else None,
           "param_dtype": "bf16", "precision": "bf16",
           "steps": len(rows), "trainable_params": tb.safetensors_numel(os.path.join(out, "final", "model.safetensors"))
           if lora else params,
           "expected_trainable_params": trainable,
           "base_write_s": round(written, 1) if written is not None else None,
           # segtrain's own "base loaded and converted in S s, peak host memory M MiB" line (None: a segtrain
           # that does not print it); start_to_step1_s is measured from outside either way.
           "base_load_s": float(loaded.group(1)) if loaded else None,
           "base_load_line": loaded.group(0) if loaded else None,
           "start_to_step1_s": round(to_first_row, 1) if to_first_row is not None else None,
           "train_wall_s": round(wall, 1),
           "tokens_per_s": round(rate, 1) if rate else None,
           "flops_per_token": fpt,
           "matmul_peak_gflops": round(peak["gflops"], 1),
           "mfu": round(rate * fpt / (peak["gflops"] * 1e9), 4) if rate else None,
           "loss": [r["loss"] for r in rows], "peak_rss_mb": round(peak_rss, 1)}
    if lora:
        row["lora"] = {"rank": RANK, "alpha": 2 * RANK, "targets": list(TARGETS), "trainable": ["adapters", "norms"]}
    if tb.CUDA:
        gpu_mb, reserved_mb = tb.gpu_peaks(rows, out)
        nominal = peak.get("nominal_bf16_tflops")
        row.update({"gpu": gpu, "peak_gpu_mb": round(gpu_mb, 1), "peak_gpu_reserved_mb": round(reserved_mb, 1),
                    "peak_gpu_gib": round(gpu_mb / 1024, 2), "peak_gpu_reserved_gib": round(reserved_mb / 1024, 2),
                    "nominal_bf16_tflops": nominal,
                    "mfu_nominal": round(rate * fpt / (nominal * 1e12), 4) if rate and nominal else None})
        if lora and s is LLAMA3_8B:
            row["table_total_gib"] = round(table.total_gib(trainable, L), 2)
            row["fits_24gb"] = reserved_mb * 2**20 < 24e9
            if L == 4096:
                row["target_gib"] = TARGET_GIB
                row["meets_target"] = reserved_mb / 1024 < TARGET_GIB
        if not lora:
            # weights and gradients in bf16, fp32 master weights, moments and summed gradient: 20 B a parameter
            row["designed_state_gib"] = round(20 * params / 2**30, 2)
    shutil.rmtree(out, ignore_errors=True)  # its final checkpoint: 5 GB at 1B
    return row


# --- the whole -------------------------------------------------------------------------------------------------


def setup_text():
    where = "the GPU, bf16 autocast" if tb.CUDA else "the CPU (small shapes: the script's own check)"
    return (f"segtrain train from a random bf16 base written as an HF folder, on {where}; chunk-0.25 to L_e = "
            f"{FACTOR} L_t; lora: rank {RANK} on q, k, v, o + norms, frozen bf16 base, activation checkpointing "
            f"(lora-auto: auto within train.batch_memory_gib {auto_memory_gib():g}, recomputed_blocks its choice), "
            f"1 sequence a step; full: every weight, train.param_dtype bf16; tokens/s over the steps after the "
            f"first {MEASURED_FROM_STEP}; MFU = tokens/s x flops_per_token / the matmul peak measured in the same "
            f"call (mfu_nominal: the GPU's nominal dense bf16 peak); flops_per_token = 6 N + A (full) or 4 N + A + "
            f"6 r (in + out) over the adapters (frozen base: no weight gradient), N the matmul parameters (head "
            f"included, embedding lookup not), A = 12 layers T heads head_dim (attention forward and backward, "
            f"counted full, not causal); recomputation by activation checkpointing not counted; peak_gpu_mb the "
            f"caching allocator's peak over the training steps; table_total_gib bench/lora_memory_table.py's row")


def write_json(path, result):
    tmp = f"{path}.tmp{os.getpid()}"
    pathlib.Path(tmp).write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, path)


def merged(json_out, result):
    """The rows already in json_out (an earlier phase of the same call) followed by this process's."""
    if not json_out or not os.path.exists(json_out):
        return result
    try:
        earlier = json.loads(pathlib.Path(json_out).read_text())
    except (OSError, ValueError):
        return result
    rows = [r for r in earlier.get("results", []) if isinstance(r, dict)
            and r.get("phase") not in {x.get("phase") for x in result["results"]}]
    return {**result, "results": rows + result["results"]}


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "write-base":  # a child of run_phase
        shape = next(s for s in (LLAMA3_8B, LLAMA32_1B, SMALL_8B, SMALL_1B) if s["name"] == sys.argv[3])
        print(json.dumps({"parameters": write_base(sys.argv[2], shape, "cuda" if tb.CUDA else "cpu")}))
        return
    try:
        run()
    except Stopped as stop:
        raise SystemExit(128 + stop.signum)


def run():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", default=os.environ.get("BENCH_PHASES", DEFAULT_PHASES))
    parser.add_argument("--json-out", default=None, help="merge each finished row into this file as it goes")
    args = parser.parse_args()
    phases = [p for p in args.phases.split(",") if p]
    for p in phases:
        if p not in PHASES:
            raise SystemExit(f"{BENCHMARK}: no phase '{p}'; expected some of {', '.join(PHASES)}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    gpu = None
    if tb.CUDA:
        info = tb.cuda_or_skip(BENCHMARK)  # prints the skipped result and exits 0 without a GPU
        gpu = info["devices"][0]
    else:
        tb.check_segtrain()
    given = os.environ.get("BENCH_WORK")
    work = given or tempfile.mkdtemp(prefix="segtrain-lora-8b-", dir=os.environ.get("BENCH_WORK_DIR"))
    result = {"benchmark": BENCHMARK, "device": tb.DEVICE, "setup": setup_text(), "results": []}
    try:
        for p in phases:
            row = run_phase(p, work, gpu)
            result["results"].append(row)
            tb.log(f"{p}: {row['tokens_per_s']} tokens/s, MFU {row['mfu']}"
                   + (f", peak GPU {row['peak_gpu_gib']} GiB" if tb.CUDA else ""))
            if args.json_out:
                write_json(args.json_out, merged(args.json_out, result))
        print(json.dumps(merged(args.json_out, result), indent=1))
    except Stopped as stop:
        tb.log(f"stopped by signal {stop.signum}" + ("" if given else f": removing {work}"))
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the removal is not cut short by a second signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if not given:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
