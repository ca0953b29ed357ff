"""Memory of train.param_dtype (issue 26) on the CPU, or on GPUs (BENCH_DEVICE=cuda), printed as JSON
(bench/run.sh).

  param_dtype_bench.py ranks        per-rank memory of a 162M-parameter llama (d 768 x 12 layers,
                                    vocab 32,000, untied head, 1 x 128 tokens a rank a step, bf16
                                    autocast) at 1, 2 and 4 ranks in four storage modes:
                                      fp32 plain     train.param_dtype fp32, shard_optimizer false
                                      fp32 sharded   fp32, true (ZeRO-1: the moments over N ranks)
                                      bf16 plain     bf16, false (fp32 master, moments, grad sum whole)
                                      bf16 sharded   bf16, true (ZeRO-2: those 16 bytes over N ranks)
                                    Per rank: the peak RSS once its parameters and optimizer are set
                                    up (VmHWM when its log says "optimizer state": with bf16
                                    parameters the fp32 ones are alive until the master copies
                                    exist, 4 + 2 + 2 + 16/N bytes a parameter at that moment (4 + 2 + 16
                                    in one process, which keeps no bf16 gradient buffer), the
                                    designed set-up peak), of its training steps (VmHWM read while
                                    rank 0 had not yet logged the last step, i.e. before the final
                                    checkpoint; rank 0's equals its metrics.jsonl peak_rss_mb, which
                                    is reported beside it) and of the whole process (wait4, final
                                    checkpoint and evaluation included). Rank 0's optimizer_state_mb
                                    over the model's parameter count (read from the run's
                                    final/model.safetensors) gives the optimizer's bytes a parameter,
                                    against the design: 8 (fp32 plain), 8/N (fp32 sharded), 16 (bf16
                                    plain), 16/N (bf16 sharded); the step peak over the parameters
                                    the resident bytes a parameter, and what is left of it after the
                                    designed 4 + 4 + optimizer (fp32) or 2 + 2 + optimizer (bf16; 2 +
                                    optimizer at 1 rank: its gradients go into the fp32 sums as backward
                                    makes them).
                                    At 1 rank there is no group: sharded is plain by construction
                                    (segtrain says "nothing to shard"), measured all the same.
  param_dtype_bench.py activations  activation bytes a token, a layer and a unit of d_model under bf16
                                    autocast, as train_memory_bench derives its fp32 figure: gpt2
                                    d 512 (4 and 8 layers), vocab 1,024, micro-batch 16, truncate at
                                    L_t = 256 vs full at L_e = 1,024 (same model, 1,024 position
                                    rows), (peak at L_e - peak at L_t) / (16 x 768 tokens x layers x
                                    d_model); the peak is the training steps' (max peak_rss_mb of
                                    metrics.jsonl, before the final checkpoint and evaluation), the
                                    process's (wait4) beside it. Three settings: bf16 parameters
                                    with model.activation_checkpointing, fp32 parameters with it,
                                    bf16 parameters without it. From the two layer counts, the part
                                    that grows with the layers (a token, a layer, a unit of d_model)
                                    and the part that does not (a token and a unit of d_model: the
                                    one block recomputed at a time, the final norm, the loss).

Ranks are separate processes (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT: what
segtrain-launch sets), Gloo on loopback, 1 thread each (BENCH_THREADS). BENCH_STEPS steps a run
(default 4 for ranks, 3 for activations). Token stores are random tokens (train_bench.write_store):
the content does not change memory. On 2 cores `ranks` takes about 7 minutes and needs about 18 GB
at 4 ranks (rank 0's final checkpoint gathers the whole optimizer state); `activations` about 10.
On the CPU the resident rest (rest_mb) is about 370 MiB in one fp32 process and about 820 MiB once
the parameters live in flat buckets (bf16, or any group): glibc keeps the replaced fp32 weights'
blocks (under segtrain's 16 MiB mmap threshold, never trimmed) resident for later reuse.

BENCH_DEVICE=cuda (bench/gpu_param_dtype_memory_bench.sh, `make gpu-check`) runs `ranks` with run.device
cuda (NCCL between ranks, one GPU a rank by LOCAL_RANK; BUILD_DIR the CUDA build) at 1, 2 and the visible
GPUs' count (at most 8) ranks, as many as there are GPUs, in the same four modes and the same model: rank
0's optimizer_state_mb gives the optimizer's bytes a parameter against the same design, rank 0's
metrics.jsonl peak_gpu_mb (the caching allocator's peak over the steps, set-up included: bf16 storage's
fp32 source is staged on the host, so the set-up peak is below training's) the device bytes a parameter
against the designed 4 + 4 + 8, 4 + 4 + 8/N, 2 + 2 + 16, 2 + 2 + 16/N (2 + 16 at 1 rank; rest_mb: what is left, the
activations and workspaces), peak_gpu_reserved_mb beside it; every rank's peak as nvidia-smi sees the
process (used memory sampled during the steps, CUDA context and the allocator's reserve included; only
rank 0 writes metrics.jsonl). Without a visible GPU, or with a torch without CUDA, it prints
{"benchmark": ..., "skipped": "why"} and exits 0. `activations` is CPU-only.
"""
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from train_bench import (CUDA, DEVICE, ROOT, SEGTRAIN, THREADS, check_segtrain, cuda_or_skip, gpu_peaks,  # noqa: E402
                         metrics_rows, safetensors_numel, write_store)

MIB = 2 ** 20


def log(*args):
    print("[param_dtype_bench]", *args, file=sys.stderr, flush=True)

RANK_COUNTS = [1, 2, 4]
MAX_GPU_RANKS = 8
# (name, train.param_dtype, distributed.shard_optimizer, designed optimizer bytes a parameter at N ranks,
#  designed parameter + gradient-buffer bytes a parameter at N ranks: one bf16 process keeps no gradient buffer,
#  its gradients going into the optimizer's fp32 sums as backward makes them)
MODES = [
    ("fp32 plain", "fp32", False, lambda n: 8.0, lambda n: 8),
    ("fp32 sharded", "fp32", True, lambda n: 8.0 / n, lambda n: 8),
    ("bf16 plain", "bf16", False, lambda n: 16.0, lambda n: 2 if n == 1 else 4),
    ("bf16 sharded", "bf16", True, lambda n: 16.0 / n, lambda n: 2 if n == 1 else 4),
]
RANKS_SHAPE = dict(arch="llama", vocab=32000, d_model=768, n_layers=12, n_heads=12, length=128)
# Micro-batch 16: at L_t the activations (4,096 tokens) outgrow what the set-up leaves freed but
# resident (glibc keeps freed blocks under segtrain's 16 MiB mmap threshold: with bf16 parameters the
# fp32 weights, 4 bytes a parameter), so both lengths' peaks are their steps' (checked: step peak
# above the set-up peak at L_t) and their difference is the activations'.
ACT_SHAPE = dict(arch="gpt2", vocab=1024, d_model=512, n_heads=8, length=256, micro_batch=16)
ACT_LAYERS = [4, 8]
ACT_SETTINGS = [  # name, train.param_dtype, model.activation_checkpointing
    ("bf16 params, checkpointing", "bf16", True),
    ("fp32 params, checkpointing", "fp32", True),
    ("bf16 params, no checkpointing", "bf16", False),
]


def steps_env(default):
    text = os.environ.get("BENCH_STEPS", str(default))
    if not text.isdigit() or int(text) < 2:
        raise SystemExit(f"param_dtype_bench: BENCH_STEPS={text!r}: expected an integer >= 2")
    return int(text)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm_hwm_mib(pid):
    """VmHWM (the peak RSS so far) of a running process, MiB; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def vm_hwm_sample(pids):
    return [vm_hwm_mib(pid) for pid in pids]


def gpu_used_sample(pids):
    """Each process's GPU memory in use now (nvidia-smi, MiB); None where nvidia-smi does not list it."""
    try:
        text = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return [None] * len(pids)
    used = {}
    for line in text.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            used[int(parts[0])] = used.get(int(parts[0]), 0) + float(parts[1])
    return [used.get(pid) for pid in pids]


def metrics_count(run_dir):
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            return sum(1 for line in f if line.strip())
    except FileNotFoundError:
        return 0


def run_ranks(config, out, world, steps, sample=vm_hwm_sample):
    """Runs `world` rank processes of segtrain train; returns, per rank, the peak RSS (MiB) once
    the parameters and the optimizer are set up (VmHWM when the rank's log says its optimizer
    state), of the training steps (VmHWM while rank 0's metrics.jsonl had fewer than `steps` rows)
    and of the whole process (wait4). `sample` (pids -> MiB each, None for a process gone) gives
    the set-up and step figures: VmHWM by default, gpu_used_sample for the GPU memory in use (the
    step figure then the largest sample, the set-up one the sample when the log line appeared)."""
    port = free_port()
    procs, logs = [], []
    for rank in range(world):
        env = dict(os.environ)
        if world > 1:
            env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        log_path = f"{out}.rank{rank}.log"
        logs.append(log_path)
        with open(log_path, "w") as f:
            procs.append(subprocess.Popen([str(SEGTRAIN), "train", config], stdout=f, stderr=subprocess.STDOUT,
                                          cwd=ROOT, env=env))
    step_peak = [0.0] * world
    setup_peak = [None] * world
    done = threading.Event()

    def set_up(rank):  # the rank has logged its optimizer state: its parameters and optimizer exist
        try:
            return "optimizer state" in pathlib.Path(out, "logs", f"rank-{rank}.log").read_text()
        except FileNotFoundError:
            return False

    def poll():
        while not done.is_set():
            for r, p in enumerate(procs):
                if setup_peak[r] is None and set_up(r):
                    setup_peak[r] = sample([p.pid])[0]
            values = sample([p.pid for p in procs])
            # Read after the sample: the sample was taken before the last step's row existed.
            if metrics_count(out) >= steps:
                return
            for r, v in enumerate(values):
                if v is not None:
                    step_peak[r] = max(step_peak[r], v)
            time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    process_peak, failed = [], []
    for rank, p in enumerate(procs):
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        process_peak.append(usage.ru_maxrss / 1024.0)
        if p.returncode != 0:
            failed.append(rank)
    done.set()
    poller.join()
    if failed:
        for rank in failed:
            sys.stderr.write(pathlib.Path(logs[rank]).read_text()[-3000:])
        raise SystemExit(f"param_dtype_bench: rank(s) {failed} of {config} failed")
    return setup_peak, step_peak, process_peak


def gpu_rank_counts(visible):
    """1, 2 and the visible GPUs (at most MAX_GPU_RANKS), as many as there are GPUs."""
    top = min(visible, MAX_GPU_RANKS)
    return sorted({n for n in (1, 2, top) if n <= top})


def ranks():
    if CUDA:
        gpu = cuda_or_skip("gpu_param_dtype_memory")
        rank_counts = gpu_rank_counts(len(gpu["devices"]))
    else:
        check_segtrain()
        rank_counts = RANK_COUNTS
    steps = steps_env(4)
    shape = RANKS_SHAPE
    L = shape["length"]
    rows = []
    params = None
    with tempfile.TemporaryDirectory(prefix="segtrain-param-dtype-bench-") as work:
        store = os.path.join(work, "store")
        write_store(store, shape["vocab"], docs=16, doc_tokens=8 * L)
        for world in rank_counts:
            for name, dtype, shard, designed_optimizer, designed_param_grad in MODES:
                tag = f"{name.replace(' ', '-')}-{world}"
                out = os.path.join(work, tag)
                config = out + ".yaml"
                pathlib.Path(config).write_text(f"""run: {{name: param-dtype-bench, output_dir: {out}, threads: {THREADS}, device: {DEVICE}, log_level: info, log_all_ranks: true}}
model: {{arch: {shape['arch']}, d_model: {shape['d_model']}, n_layers: {shape['n_layers']}, n_heads: {shape['n_heads']}, max_positions: {L}}}
data: {{store: {store}, train_length: {L}, extended_length: {L}}}
train: {{budget: {{tokens: {steps * L * world}}}, micro_batch_size: 1, warmup_steps: 1, log_every: 1, checkpoint_every: 0,
        tensorboard: false, precision: bf16, param_dtype: {dtype}}}
distributed: {{shard_optimizer: {'true' if shard else 'false'}}}
eval: {{lengths: [{L}], max_sequences: 1, batch_size: 1}}
""")
                started = time.time()
                setup_peak, step_peak, process_peak = run_ranks(
                    config, out, world, steps, sample=gpu_used_sample if CUDA else vm_hwm_sample)
                metrics = metrics_rows(out)
                if len(metrics) != steps:
                    raise SystemExit(f"param_dtype_bench: {out} logged {len(metrics)} steps, expected {steps}")
                n = safetensors_numel(os.path.join(out, "final", "model.safetensors"))
                if params is not None and n != params:
                    raise SystemExit(f"param_dtype_bench: {out} has {n} parameters, the others {params}")
                params = n
                state_mb = metrics[-1]["optimizer_state_mb"]
                metrics_peak = max(r["peak_rss_mb"] for r in metrics)
                optimizer_bpp = state_mb * MIB / params
                designed = designed_param_grad(world) + designed_optimizer(world)
                if CUDA:
                    rows.append(gpu_row(name, world, dtype, shard, state_mb, optimizer_bpp, designed_optimizer(world),
                                        designed, metrics, out, params, step_peak, process_peak, started))
                    shutil.rmtree(out)
                    continue
                # bf16: the fp32 parameters (4 bytes) live until the master copies are made.
                setup_extra = 4 if dtype == "bf16" else 0
                if None in setup_peak:
                    raise SystemExit(f"param_dtype_bench: a rank of {out} never logged its optimizer state")
                peak = max(step_peak)
                row = {
                    "mode": name, "ranks": world, "param_dtype": dtype, "shard_optimizer": shard,
                    "optimizer_state_mb": state_mb,
                    "optimizer_bytes_per_param": round(optimizer_bpp, 3),
                    "designed_optimizer_bytes_per_param": round(designed_optimizer(world), 3),
                    "designed_bytes_per_param": round(designed, 3),
                    "designed_setup_bytes_per_param": round(designed + setup_extra, 3) if setup_extra else None,
                    "setup_peak_rss_mb": [round(x, 1) for x in setup_peak],
                    "step_peak_rss_mb": [round(x, 1) for x in step_peak],
                    "metrics_peak_rss_mb_rank0": metrics_peak,
                    "process_peak_rss_mb": [round(x, 1) for x in process_peak],
                    "resident_bytes_per_param": round(peak * MIB / params, 2),
                    "rest_mb": round(peak - designed * params / MIB, 1),
                    "setup_rest_mb": (round(max(setup_peak) - (designed + setup_extra) * params / MIB, 1)
                                      if setup_extra else None),
                    "seconds": round(time.time() - started, 1),
                }
                log(f"{name} x {world}: optimizer {state_mb:.1f} MiB = {optimizer_bpp:.3f} B/param (designed "
                    f"{designed_optimizer(world):g}); set-up peaks {row['setup_peak_rss_mb']}, step peaks {row['step_peak_rss_mb']} MiB (metrics "
                    f"{metrics_peak}), process peaks {row['process_peak_rss_mb']}; {row['seconds']} s")
                rows.append(row)
                shutil.rmtree(out)
    for row in rows:
        row["params"] = params
        row["optimizer_as_designed"] = abs(row["optimizer_bytes_per_param"] -
                                           row["designed_optimizer_bytes_per_param"]) < 0.01
        if CUDA:
            row["rest_mb"] = round(row["peak_gpu_mb_rank0"] - row["designed_bytes_per_param"] * params / MIB, 1)
            row["device_at_least_designed"] = row["rest_mb"] >= 0
    if CUDA:
        setup = (f"segtrain train on {gpu['devices'][0]} ({len(gpu['devices'])} visible), llama d {shape['d_model']} x "
                 f"{shape['n_layers']} layers, {shape['n_heads']} heads, d_ff 4 d, vocab {shape['vocab']}, untied head: "
                 f"{params} parameters (final/model.safetensors); 1 x {L} tokens a rank a step, train.precision bf16 "
                 f"(autocast) in every mode, {steps} steps, run.device cuda, ranks as separate processes (NCCL, one "
                 f"GPU each by LOCAL_RANK) at {', '.join(map(str, rank_counts))}. optimizer_bytes_per_param = rank 0's "
                 f"optimizer_state_mb x 2^20 / parameters; device_bytes_per_param = rank 0's peak_gpu_mb (metrics.jsonl, "
                 f"the caching allocator's peak over the steps, set-up included) x 2^20 / parameters, against "
                 f"designed_bytes_per_param (parameters + gradient buffers + optimizer: 4 + 4 + 8, 4 + 4 + 8/N, "
                 f"2 + 2 + 16, 2 + 2 + 16/N; 2 + 16 in one process, which keeps no bf16 gradient buffer); rest_mb = that peak minus the designed bytes x parameters (activations, "
                 f"workspaces); peak_gpu_reserved_mb_rank0 the allocator's reserve; step_peak_gpu_used_mb per rank: "
                 f"the largest nvidia-smi used memory of the process before the last step's metrics row (CUDA "
                 f"context and reserve included; None where nvidia-smi does not list the process); "
                 f"process_peak_rss_mb: wait4 (host memory)")
        print(json.dumps({"benchmark": "gpu_param_dtype_memory", "setup": setup, "results": rows}, indent=1))
        return
    setup = (f"segtrain train, llama d {shape['d_model']} x {shape['n_layers']} layers, {shape['n_heads']} heads, "
             f"d_ff 4 d, vocab {shape['vocab']}, untied head: {params} parameters (final/model.safetensors); 1 x {L} "
             f"tokens a rank a step, train.precision bf16 (autocast) in every mode, {steps} steps, ranks as separate "
             f"processes (Gloo, loopback), {THREADS} thread(s) each, CPU. optimizer_bytes_per_param = rank 0's "
             f"optimizer_state_mb x 2^20 / parameters; step_peak_rss_mb per rank: VmHWM before the last step's "
             f"metrics row (rank 0's = its metrics.jsonl peak_rss_mb, metrics_peak_rss_mb_rank0); setup_peak_rss_mb: "
             f"VmHWM when the rank has logged its optimizer state (bf16: designed 4 fp32 + 2 + 2 + optimizer bytes a "
             f"parameter then, 4 + 2 + optimizer in one process, the fp32 parameters alive until the master copies exist; setup_rest_mb the rest); "
             f"process_peak_rss_mb: wait4, final checkpoint (rank 0 gathers the whole state) and evaluation "
             f"included; resident_bytes_per_param = the largest step peak x 2^20 / parameters; rest_mb = that peak "
             f"minus the designed bytes (parameters + gradient buffers + optimizer) x parameters")
    print(json.dumps({"benchmark": "param_dtype_memory", "setup": setup, "results": rows}, indent=1))


def gpu_row(name, world, dtype, shard, state_mb, optimizer_bpp, designed_optimizer, designed, metrics, out, params,
            step_peak, process_peak, started):
    """One `ranks` row on GPUs (rank 0's allocator peaks from metrics.jsonl, every rank's nvidia-smi peak)."""
    peak_gpu, peak_reserved = gpu_peaks(metrics, out)
    row = {
        "mode": name, "ranks": world, "param_dtype": dtype, "shard_optimizer": shard,
        "optimizer_state_mb": state_mb,
        "optimizer_bytes_per_param": round(optimizer_bpp, 3),
        "designed_optimizer_bytes_per_param": round(designed_optimizer, 3),
        "designed_bytes_per_param": round(designed, 3),
        "peak_gpu_mb_rank0": peak_gpu,
        "peak_gpu_reserved_mb_rank0": peak_reserved,
        "device_bytes_per_param": round(peak_gpu * MIB / params, 2),
        "step_peak_gpu_used_mb": [round(x, 1) if x else None for x in step_peak],
        "process_peak_rss_mb": [round(x, 1) for x in process_peak],
        "seconds": round(time.time() - started, 1),
    }
    log(f"{name} x {world} (GPU): optimizer {state_mb:.1f} MiB = {optimizer_bpp:.3f} B/param (designed "
        f"{designed_optimizer:g}); rank 0 peak GPU {peak_gpu} MiB allocated, {peak_reserved} reserved = "
        f"{row['device_bytes_per_param']} B/param (designed {designed:g}); nvidia-smi per rank "
        f"{row['step_peak_gpu_used_mb']} MiB; {row['seconds']} s")
    return row


def activations():
    if CUDA:
        raise SystemExit("param_dtype_bench: activations runs on the CPU only (BENCH_DEVICE=cpu)")
    check_segtrain()
    steps = steps_env(3)
    shape = ACT_SHAPE
    L, Le, B, d = shape["length"], 4 * shape["length"], shape["micro_batch"], shape["d_model"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="segtrain-activation-bench-") as work:
        store = os.path.join(work, "store")
        write_store(store, shape["vocab"], docs=16, doc_tokens=4 * Le)
        for name, dtype, checkpointing in ACT_SETTINGS:
            deltas = {}
            for layers in ACT_LAYERS:
                step, process, setup = {}, {}, {}
                for method, length in (("truncate", L), ("full", Le)):
                    out = os.path.join(work, f"{dtype}-{checkpointing}-{layers}-{method}")
                    config = out + ".yaml"
                    pathlib.Path(config).write_text(f"""run: {{name: activation-bench, output_dir: {out}, threads: {THREADS}, device: cpu, log_level: info,
      log_all_ranks: true}}
model: {{arch: {shape['arch']}, d_model: {d}, n_layers: {layers}, n_heads: {shape['n_heads']}, max_positions: {Le},
        activation_checkpointing: {'true' if checkpointing else 'false'}}}
data: {{store: {store}, train_length: {L}, extended_length: {Le}, sampler: {{method: {method}}}}}
train: {{budget: {{tokens: {steps * B * length}}}, micro_batch_size: {B}, warmup_steps: 1, log_every: 1,
        checkpoint_every: 0, tensorboard: false, precision: bf16, param_dtype: {dtype}}}
eval: {{lengths: [{L}], max_sequences: 1, batch_size: 1}}
""")
                    setup_peak, _, process_peak = run_ranks(config, out, 1, steps)
                    setup[method], process[method] = setup_peak[0], process_peak[0]
                    metrics = metrics_rows(out)
                    if len(metrics) != steps:
                        raise SystemExit(f"param_dtype_bench: {out} logged {len(metrics)} steps, expected {steps}")
                    step[method] = max(r["peak_rss_mb"] for r in metrics)
                    log(f"{name}, {layers} layers, {method}: set-up peak {setup[method]:.1f} MiB, step peak "
                        f"{step[method]:.1f}, process {process[method]:.1f}")
                    shutil.rmtree(out)
                tokens = B * (Le - L)
                delta = step["full"] - step["truncate"]
                deltas[layers] = delta
                rows.append({
                    "setting": name, "param_dtype": dtype, "activation_checkpointing": checkpointing,
                    "precision": "bf16", "model": f"d{d}x{layers}", "d_model": d, "layers": layers,
                    "vocab": shape["vocab"], "micro_batch": B, "L_t": L, "L_e": Le,
                    "setup_peak_rss_mb_truncate": round(setup["truncate"], 1),
                    "step_peak_rss_mb_truncate": step["truncate"], "step_peak_rss_mb_full": step["full"],
                    "truncate_step_above_setup": step["truncate"] > setup["truncate"],
                    "process_peak_rss_mb_truncate": round(process["truncate"], 1),
                    "process_peak_rss_mb_full": round(process["full"], 1),
                    "bytes_per_token_layer_dim": round(delta * MIB / (tokens * layers * d), 2),
                })
            # peak difference = tokens x d x (per_layer x layers + per_model): two layer counts, two unknowns.
            lo, hi = ACT_LAYERS
            per_layer = (deltas[hi] - deltas[lo]) * MIB / (tokens * d * (hi - lo))
            per_model = deltas[lo] * MIB / (tokens * d) - per_layer * lo
            for row in rows[-len(ACT_LAYERS):]:
                row["per_layer_bytes_per_token_dim"] = round(per_layer, 2)
                row["per_model_bytes_per_token_dim"] = round(per_model, 2)
    setup = (f"activation memory of segtrain train under bf16 autocast (train.precision bf16), CPU, {THREADS} "
             f"thread(s): gpt2 d {d}, vocab {shape['vocab']}, micro-batch {B}, truncate at L_t = {L} vs full at "
             f"L_e = {Le} (same model, {Le} position rows), {steps} steps; bytes_per_token_layer_dim = (step peak "
             f"at L_e - at L_t) x 2^20 / ({B} x {Le - L} tokens x layers x d_model), the step peak being the "
             f"largest peak_rss_mb of metrics.jsonl (MiB, before the final checkpoint and evaluation; above the "
             f"set-up's peak at L_t, truncate_step_above_setup), as "
             f"train_memory_bench derives its fp32 figure (which uses the process's peak); from {ACT_LAYERS[0]} and "
             f"{ACT_LAYERS[1]} layers: difference = tokens x d_model x (per_layer x layers + per_model)")
    print(json.dumps({"benchmark": "bf16_activation_memory", "setup": setup, "results": rows}, indent=1))


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "ranks":
        ranks()
    elif command == "activations":
        activations()
    else:
        raise SystemExit(f"usage: {sys.argv[0]} ranks|activations (BENCH_DEVICE=cuda: ranks on GPUs)")
