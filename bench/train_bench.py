"""End-to-end training benchmarks of `segtrain train`, printed as JSON (bench/run.sh).

  train_bench.py speed    segtrain vs an equivalent PyTorch loop (HF GPT2LMHeadModel,
                          sdpa attention, fused AdamW) on the same token store, same
                          shape, micro-batch, threads and optimizer: tokens/s and model
                          FLOPs utilisation against the matmul peak measured in the
                          same run (CPU: fp32 2048^3 on as many threads; CUDA: bf16
                          8192^3) and, on a GPU of the table below, against its
                          nominal dense bf16 peak.
                          BENCH_ROUNDS interleaved rounds, the order alternated (round
                          r runs segtrain first when r is even); ratio = median over
                          the rounds of segtrain_r / pytorch_r, with its min and max
                          and every round's figures, since whichever program runs
                          first in a round can pay a cold start.
  train_bench.py memory   peak memory of `segtrain train` with truncate at L_t, chunk-0.25
                          at L_e = 4 L_t and full at L_e, same model and micro-batch:
                          CPU the process's peak RSS; CUDA the caching allocator's peak
                          (peak_gpu_mb, peak_gpu_reserved_mb of segtrain's metrics.jsonl).
  train_bench.py loss_chunk
                          peak RSS of one training step of `segtrain train` at vocab
                          32,000, L 2,048, d_model 256 (micro-batch 1, fp32 on the CPU)
                          with the LM head and cross-entropy over slices of the tokens
                          (train.loss_chunk_tokens auto) and over the whole logits (0):
                          the step's peak_rss_mb from metrics.jsonl (before the final
                          checkpoint and evaluation), the difference and its ratio to
                          the fp32 logits' size (2,048 x 32,000 x 4 bytes = 250 MiB).
  train_bench.py probe    torch version, its CUDA and the visible GPUs, as JSON.
  train_bench.py peak     the matmul peak of BENCH_DEVICE, as JSON (a child of `speed`).
  train_bench.py loop STORE SHAPE OUT [eager|compiled]
                          one PyTorch training run (a child of `speed`); compiled: the same
                          loop with the model's forward and loss under torch.compile
                          (BENCH_COMPILE_BACKEND, default inductor; BENCH_COMPILE_MODE,
                          default "default": no CUDA graphs, no autotuning). With
                          BENCH_PROFILE_TRACE=FILE it records BENCH_PROFILE_STEPS (3) steps
                          after BENCH_PROFILE_WAIT (4) and one warm-up step with
                          torch.profiler into FILE (a Chrome trace: bench/gpu_profile.py).

BENCH_DEVICE=cpu (default) measures on the CPU in fp32; BENCH_DEVICE=cuda on the
first GPU in bf16: segtrain with run.device cuda and train.precision bf16, the
PyTorch loop under torch.autocast("cuda", bfloat16) with fused AdamW on the GPU,
each step timed between torch.cuda.synchronize() calls (segtrain's step rate is
its metrics.jsonl tokens_per_s, log_every 1; reading the step's loss and gradient
norm to the host synchronizes every step, and an optimizer step still queued when
a step's time is taken counts in the next one's, so the steady rate is the same). With no GPU visible (or a torch without CUDA) a cuda benchmark prints
{"benchmark": ..., "skipped": "why"} and exits 0.

Every run is its own child process; its peak RSS comes from os.wait4's rusage, so
no tool beyond Python is needed. Token stores are random tokens written here in the
Megatron indexed-dataset format segtrain reads (the content does not change speed).
Environment: BENCH_DEVICE (cpu or cuda; default cpu), BUILD_DIR (default build, or
build-cuda with BENCH_DEVICE=cuda), BENCH_THREADS (default 1), BENCH_ROUNDS
(default 5), BENCH_SHAPES (the speed or memory shapes to run, e.g. quickstart;
default all of the device's but the "tiny" test shape), BENCH_REFERENCES (the
PyTorch references of `speed`: eager, compiled or both, comma-separated; default
eager,compiled on CUDA, eager on the CPU; segtrain / compiled is ratio_compiled; and
composite: segtrain again with SEGTRAIN_FUSED_KERNELS=0 (ATen's composites where the
default takes the project's CUDA kernels) in the same rounds, composite / segtrain is
ratio_composite; graph: segtrain again with SEGTRAIN_CUDA_GRAPH=1, graph / segtrain is
ratio_graph;
all: segtrain again with SEGTRAIN_FUSED_KERNELS=all (also the kernels no GPU has run yet: the linears'
bias gradients, the residual add fused with the norm), all / segtrain is ratio_all; graph_all: both
switches, graph_all / segtrain is ratio_graph_all (with compiled too, each variant / compiled round by
round is ratio_{variant}_compiled);
segtrain_fused_kernels and segtrain_cuda_graph say what the plain segtrain
program ran with),
BENCH_LOSS_CHUNK_TOKENS (segtrain's train.loss_chunk_tokens
in `speed`: auto, the default, or N; 0 is the whole logits, as the PyTorch loop computes them),
BENCH_PARAM_DTYPE (segtrain's train.param_dtype: auto, the default, which a bf16 run on CUDA takes as
bf16 with fp32 master weights, or fp32 or bf16; the PyTorch loops keep fp32 weights under autocast),
BENCH_MICRO_BATCH (N: every program's micro-batch instead of the shape's, e.g. to measure GPT-2 medium's
MFU at the larger micro-batch that segtrain's train.micro_batch_size: auto chooses on the card).

One thread per process by default: on the 2-core machine these figures come from,
2 OpenMP threads slow down 4-8x (in both programs, unevenly) as soon as anything
else takes a core, while one thread keeps the side-by-side ratio stable; the
Python interpreter's share of a step is then smaller, so the ratio is, if
anything, conservative. BENCH_THREADS=2 measures both programs with 2 threads.
segtrain tunes glibc malloc at start-up (common/allocator.cpp); the PyTorch loop
runs with glibc's defaults, as a plain `python train.py` does.
"""
import json
import math
import os
import pathlib
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEVICE = os.environ.get("BENCH_DEVICE", "cpu")
if DEVICE not in ("cpu", "cuda"):
    raise SystemExit(f"train_bench: BENCH_DEVICE={DEVICE!r}: expected cpu or cuda")
CUDA = DEVICE == "cuda"
BUILD_DIR = pathlib.Path(os.environ.get("BUILD_DIR", "build-cuda" if CUDA else "build"))
if not BUILD_DIR.is_absolute():
    BUILD_DIR = ROOT / BUILD_DIR
SEGTRAIN = BUILD_DIR / "trainer" / "segtrain"


def positive_env(name, default):
    text = os.environ.get(name, str(default))
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise SystemExit(f"train_bench: {name}={text!r}: expected an integer >= 1")
    return value


THREADS = positive_env("BENCH_THREADS", 1)
MICRO_BATCH = positive_env("BENCH_MICRO_BATCH", 1) if os.environ.get("BENCH_MICRO_BATCH") else None
LOSS_CHUNK_TOKENS = os.environ.get("BENCH_LOSS_CHUNK_TOKENS", "auto")
PARAM_DTYPE = os.environ.get("BENCH_PARAM_DTYPE", "auto")
if LOSS_CHUNK_TOKENS != "auto" and not LOSS_CHUNK_TOKENS.isdigit():
    raise SystemExit(f"train_bench: BENCH_LOSS_CHUNK_TOKENS={LOSS_CHUNK_TOKENS!r}: expected auto or an integer >= 0")
if PARAM_DTYPE not in ("auto", "fp32", "bf16"):
    raise SystemExit(f"train_bench: BENCH_PARAM_DTYPE={PARAM_DTYPE!r}: expected auto, fp32 or bf16")
ROUNDS = positive_env("BENCH_ROUNDS", 5)
REFERENCES = [r for r in os.environ.get("BENCH_REFERENCES", "eager,compiled" if CUDA else "eager").split(",") if r]
# segtrain again with a switch on, measured beside the plain program in the same rounds: its environment.
SEGTRAIN_VARIANTS = {
    "composite": {"SEGTRAIN_FUSED_KERNELS": "0"},  # ATen's composites, not the CUDA kernels (kernels/fused_kernels.h)
    "graph": {"SEGTRAIN_CUDA_GRAPH": "1"},     # the step replayed as CUDA graphs (trainer/runtime/cuda_graph.h)
    "all": {"SEGTRAIN_FUSED_KERNELS": "all"},  # also the kernels no GPU has run yet (kernels/linear.h, kernels/residual_norm.h)
    # Both switches together: the candidate default where shapes are static, against torch.compile (issue 57).
    "graph_all": {"SEGTRAIN_CUDA_GRAPH": "1", "SEGTRAIN_FUSED_KERNELS": "all"},
}
if "eager" not in REFERENCES or any(r not in ("eager", "compiled", *SEGTRAIN_VARIANTS) for r in REFERENCES) \
        or len(set(REFERENCES)) != len(REFERENCES):
    raise SystemExit(f"train_bench: BENCH_REFERENCES={os.environ.get('BENCH_REFERENCES')!r}: expected eager, "
                     f"optionally with compiled, composite, graph, all and graph_all (the eager loop is the reference every ratio is "
                     f"read against)")
# The switches as this bench was started: what the plain "segtrain" program runs with.
FUSED_SWITCH = os.environ.get("SEGTRAIN_FUSED_KERNELS", "")
GRAPH_SWITCH = os.environ.get("SEGTRAIN_CUDA_GRAPH", "")
COMPILE_BACKEND = os.environ.get("BENCH_COMPILE_BACKEND", "inductor")
COMPILE_MODE = os.environ.get("BENCH_COMPILE_MODE", "default")
# Program names in a speed run: segtrain, then the references ("pytorch" is the eager loop, as before).
PROGRAM = {"eager": "pytorch", "compiled": "compiled", **{v: f"segtrain_{v}" for v in SEGTRAIN_VARIANTS}}
# First steps (allocation, kernel selection, optimizer state; on CUDA also cuBLAS
# and the caching allocator warming up) are left out of the rates.
WARMUP_STEPS = 5 if CUDA else 2
PRECISION = "bf16" if CUDA else "fp32"
# GPT-2's own "gelu_new" is the tanh GELU written as five Python tensor ops;
# "gelu_pytorch_tanh" is the same function as one fused kernel, which segtrain
# also uses, so the PyTorch side is not slowed down by the composite.
ACTIVATION = "gelu_pytorch_tanh"

# Speed shapes by device; target_ratio (and target_mfu) are the issues' targets
# for segtrain / PyTorch tokens/s (and segtrain's MFU).
SHAPES = {
    # The CPU shapes of the issue: the quickstart model and GPT-2 small.
    "cpu": {
        "quickstart": dict(vocab=1024, d_model=128, n_layers=4, n_heads=4, length=128, micro_batch=16, steps=40,
                           target_ratio=1.15),
        "gpt2-small": dict(vocab=50257, d_model=768, n_layers=12, n_heads=12, length=256, micro_batch=2, steps=8,
                           target_ratio=1.0),
        # A few seconds a run: the tests' shape (bench/tests), run only when BENCH_SHAPES names it.
        "tiny": dict(vocab=256, d_model=64, n_layers=2, n_heads=2, length=64, micro_batch=4, steps=6,
                     target_ratio=1.0, explicit_only=True),
    },
    # GPT-2 small (124M) and GPT-2 medium (355M) at L_t = 1024, micro-batches
    # sized for an 80 GB H100 (both fit far below it), 30 measured steps.
    "cuda": {
        "gpt2-small": dict(vocab=50257, d_model=768, n_layers=12, n_heads=12, length=1024, micro_batch=8, steps=35,
                           target_ratio=1.0),
        "gpt2-medium": dict(vocab=50257, d_model=1024, n_layers=24, n_heads=16, length=1024, micro_batch=8,
                            steps=35, target_ratio=1.0, target_mfu=0.40),
    },
}[DEVICE]

# Memory shapes: every method uses the same model (a 4 L_t position table) and
# micro-batch, so only the sequences the sampler builds differ. On CUDA, full at
# 4 L_t = 4096 tokens holds 4x the activations and logits of truncate; GPT-2
# medium takes micro-batch 4 so that it stays well inside 80 GB.
MEMORY_SHAPES = {
    "cpu": {
        "quickstart": dict(vocab=1024, d_model=128, n_layers=4, n_heads=4, length=128, micro_batch=16, steps=8),
        "d512x8": dict(vocab=1024, d_model=512, n_layers=8, n_heads=8, length=256, micro_batch=8, steps=3),
    },
    "cuda": {
        "gpt2-small": dict(vocab=50257, d_model=768, n_layers=12, n_heads=12, length=1024, micro_batch=8, steps=4),
        "gpt2-medium": dict(vocab=50257, d_model=1024, n_layers=24, n_heads=16, length=1024, micro_batch=4, steps=4),
    },
}[DEVICE]
TARGET_CHUNK_OVER_TRUNCATE = 1.05

# Nominal dense (no sparsity) bf16 tensor-core peaks, TFLOP/s, from NVIDIA's data
# sheets; GeForce cards with FP32 accumulation, as PyTorch's bf16 matmuls use.
# Matched in order against torch.cuda.get_device_name().
NOMINAL_BF16_TFLOPS = [
    (("H100", "PCIe"), "H100 PCIe", 756.0),
    (("H100", "NVL"), "H100 NVL", 835.0),
    (("H100",), "H100 SXM", 989.0),
    (("GH200",), "GH200", 989.0),
    (("H200",), "H200", 989.0),
    (("A100",), "A100", 312.0),
    (("L40S",), "L40S", 362.0),
    (("L40",), "L40", 181.0),
    (("L4",), "L4", 121.0),
    (("RTX 4090",), "GeForce RTX 4090", 165.2),
]


def nominal_peak(device_name):
    """(part, dense bf16 TFLOP/s) of a GPU of the table, else (None, None)."""
    for needles, part, tflops in NOMINAL_BF16_TFLOPS:
        if all(n in device_name for n in needles):
            return part, tflops
    return None, None


def log(*args):
    print("[train_bench]", *args, file=sys.stderr, flush=True)


# --- token store ------------------------------------------------------------------


def write_split(prefix, docs, dtype):
    """Megatron indexed dataset v1: one sequence per document."""
    sizes = np.array([len(d) for d in docs], dtype=np.int32)
    pointers = np.zeros(len(docs), dtype=np.int64)
    pointers[1:] = np.cumsum(sizes[:-1].astype(np.int64)) * np.dtype(dtype).itemsize
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(np.asarray(d, dtype=dtype).tobytes())
    code = 8 if dtype == np.uint16 else 4
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(docs), len(docs) + 1))
        f.write(sizes.tobytes() + pointers.tobytes() + np.arange(len(docs) + 1, dtype=np.int64).tobytes())


def write_store(directory, vocab, docs, doc_tokens, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.uint16 if vocab < 65500 else np.int32
    os.makedirs(directory, exist_ok=True)
    train = [rng.integers(3, vocab, doc_tokens) for _ in range(docs)]
    valid = [rng.integers(3, vocab, doc_tokens) for _ in range(2)]
    write_split(os.path.join(directory, "train"), train, dtype)
    write_split(os.path.join(directory, "valid"), valid, dtype)
    meta = {"vocab_size": vocab, "tokenizer": "", "eos_id": 2, "documents": docs + 2,
            "tokens": (docs + 2) * doc_tokens, "dtype": "uint16" if dtype == np.uint16 else "int32",
            "format": "megatron-indexed-dataset-v1"}
    pathlib.Path(directory, "meta.json").write_text(json.dumps(meta))


def read_split(prefix):
    """Documents of a Megatron v1 split as numpy views (what the PyTorch loop reads)."""
    idx = np.fromfile(prefix + ".idx", dtype=np.uint8)
    code = int(idx[17])
    count = int(np.frombuffer(idx[18:26].tobytes(), dtype=np.uint64)[0])
    sizes = np.frombuffer(idx[34:34 + 4 * count].tobytes(), dtype=np.int32)
    pointers = np.frombuffer(idx[34 + 4 * count:34 + 12 * count].tobytes(), dtype=np.int64)
    dtype = np.uint16 if code == 8 else np.int32
    data = np.memmap(prefix + ".bin", dtype=dtype, mode="r")
    item = np.dtype(dtype).itemsize
    return [data[p // item:p // item + s] for p, s in zip(pointers, sizes)]


# --- child processes ----------------------------------------------------------------


def run_child(cmd, log_path, env=None):
    """Runs cmd to completion (in `env`, or this process's environment); returns its peak RSS in MB (its own,
    from wait4)."""
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # a signal's handler (gpu_profile.py's SIGTERM): the child goes with this process
            proc.kill()
            proc.wait()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.stderr.write(pathlib.Path(log_path).read_text()[-4000:])
        raise SystemExit(f"train_bench: {' '.join(map(str, cmd[:3]))} ... failed with exit code {proc.returncode}")
    return usage.ru_maxrss / 1024.0  # KiB on Linux


def run_json(args):
    """Runs this script with args in a child Python; returns the JSON it prints."""
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"train_bench: {' '.join(args)} failed with exit code {proc.returncode}")
    return json.loads(proc.stdout)


def cuda_or_skip(benchmark):
    """On CUDA: the visible GPUs (probe), after checking segtrain is a CUDA build;
    with no GPU to run on, prints the skipped result and exits 0."""
    info = run_json(["probe"])
    reason = None
    if not info["cuda_build"]:
        reason = (f"torch {info['torch']} ({sys.executable}) has no CUDA: the GPU benchmarks run in the CUDA "
                  f"configuration (SEGTRAIN_CUDA=1 make bench, or make gpu-check)")
    elif not info["devices"]:
        reason = "no CUDA device visible"
    if reason:
        print(json.dumps({"benchmark": benchmark, "skipped": reason}, indent=1))
        raise SystemExit(0)
    check_segtrain()
    version = subprocess.run([str(SEGTRAIN), "--version"], capture_output=True, text=True).stdout
    if "CUDA yes" not in version:
        raise SystemExit(f"train_bench: {SEGTRAIN} is built without CUDA ('segtrain --version' says no): "
                         f"build the CUDA configuration (make build-cuda) and run with BUILD_DIR=build-cuda")
    return info


def check_segtrain():
    if not SEGTRAIN.exists():
        raise SystemExit(f"train_bench: {SEGTRAIN} is not built")


def segtrain_config(path, out_dir, store, shape, *, threads, extended=None, method="truncate", max_positions=None,
                    steps=None, sample_length=None):
    L = shape["length"]
    Le = extended or L
    tokens = (steps or shape["steps"]) * shape["micro_batch"] * (sample_length or L)
    config = f"""run: {{name: bench, output_dir: {out_dir}, threads: {threads}, log_level: warn, device: {DEVICE}}}
model: {{arch: gpt2, d_model: {shape['d_model']}, n_layers: {shape['n_layers']}, n_heads: {shape['n_heads']},
        max_positions: {max_positions or Le}}}
data: {{store: {store}, train_length: {L}, extended_length: {Le}, sampler: {{method: {method}, alpha: 0.25}}}}
train: {{budget: {{tokens: {tokens}}}, micro_batch_size: {shape['micro_batch']}, warmup_steps: 2, log_every: 1,
        checkpoint_every: 0, tensorboard: false, lr: 3.0e-4, weight_decay: 0.1, betas: [0.9, 0.95], grad_clip: 1.0,
        precision: {PRECISION}, param_dtype: {PARAM_DTYPE}, loss_chunk_tokens: {LOSS_CHUNK_TOKENS}}}
eval: {{lengths: [{L}], max_sequences: 1, batch_size: 1}}
"""
    pathlib.Path(path).write_text(config)


def steady_rate(rates):
    """Tokens/s over the steps after the warm-up: equal tokens per step, so the harmonic mean."""
    rates = rates[WARMUP_STEPS:]
    if not rates:
        raise SystemExit(f"train_bench: no step left after the {WARMUP_STEPS} warm-up steps")
    return len(rates) / sum(1.0 / r for r in rates)


def metrics_rows(run_dir):
    return [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]


def gpu_peaks(rows, run_dir):
    """(peak_gpu_mb, peak_gpu_reserved_mb): the largest over a CUDA run's metrics rows."""
    for key in ("peak_gpu_mb", "peak_gpu_reserved_mb"):
        if not rows or any(key not in r for r in rows):
            raise SystemExit(f"train_bench: {run_dir}/metrics.jsonl has rows without {key}: "
                             f"this segtrain does not report GPU memory")
    return max(r["peak_gpu_mb"] for r in rows), max(r["peak_gpu_reserved_mb"] for r in rows)


def run_segtrain(work, store, shape, tag, variant=None):
    """One segtrain run, in this process's environment or with a SEGTRAIN_VARIANTS switch on."""
    out = os.path.join(work, f"segtrain-{tag}")
    config = os.path.join(work, f"segtrain-{tag}.yaml")
    segtrain_config(config, out, store, shape, threads=THREADS)
    env = None if variant is None else {**os.environ, **SEGTRAIN_VARIANTS[variant]}
    try:
        rss = run_child([str(SEGTRAIN), "train", config], out + ".log", env=env)
    except SystemExit as e:  # with segtrain's own last line (its one-line error)
        lines = pathlib.Path(out + ".log").read_text(errors="replace").strip().splitlines()
        raise SystemExit(f"{e}: {lines[-1] if lines else 'no output'}") from None
    rows = metrics_rows(out)
    params = safetensors_numel(os.path.join(out, "final", "model.safetensors"))
    peak_gpu = gpu_peaks(rows, out)[0] if CUDA else None
    shutil.rmtree(out)  # its final checkpoint: up to 4 GB for GPT-2 medium, per round
    return {"tokens_per_s": steady_rate([r["tokens_per_s"] for r in rows]), "peak_rss_mb": rss, "params": params,
            "peak_gpu_mb": peak_gpu}


def safetensors_sizes(path):
    """{tensor name: elements} of a safetensors file (its JSON header)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {k: math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__"}


def safetensors_numel(path):
    return sum(safetensors_sizes(path).values())


def run_pytorch(work, store, shape, tag, variant="eager"):
    out = os.path.join(work, f"{PROGRAM[variant]}-{tag}.json")
    rss = run_child([sys.executable, __file__, "loop", store, json.dumps(shape), out, variant], out + ".log")
    result = json.loads(pathlib.Path(out).read_text())
    return {"tokens_per_s": steady_rate(result["tokens_per_s"]), "peak_rss_mb": rss, "params": result["params"],
            "peak_gpu_mb": result.get("peak_gpu_mb"),
            "first_step_s": shape["micro_batch"] * shape["length"] / result["tokens_per_s"][0]}


# --- the PyTorch loop -------------------------------------------------------------


def pytorch_loop(store, shape, out, variant="eager"):
    import torch
    import torch.nn.functional as F
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    dev = torch.device(DEVICE)
    sync = torch.cuda.synchronize if CUDA else (lambda: None)
    L, B, V = shape["length"], shape["micro_batch"], shape["vocab"]
    # segtrain's gpt2 block: pre-LN, tanh GELU, d_ff = 4 d, LayerNorm eps 1e-5,
    # learned positions with max_positions = L rows, tied head, no dropout anywhere.
    config = GPT2Config(vocab_size=V, n_positions=L, n_embd=shape["d_model"], n_layer=shape["n_layers"],
                        n_head=shape["n_heads"], n_inner=4 * shape["d_model"], activation_function=ACTIVATION,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
                        tie_word_embeddings=True, use_cache=False,
                        bos_token_id=None, eos_token_id=None)
    model = GPT2LMHeadModel._from_config(config, attn_implementation="sdpa").to(dev)
    model.train()
    assert model.config._attn_implementation == "sdpa", model.config._attn_implementation
    named = dict(model.named_parameters())  # tied lm_head appears once, as in segtrain
    params = sum(p.numel() for p in named.values())
    # segtrain's two AdamW groups: 2-D weights decayed unless the name matches
    # train.no_decay [bias, norm, ln_]; 1-D never.
    decay = [p for n, p in named.items() if p.dim() >= 2 and not any(s in n for s in ("bias", "norm", "ln_"))]
    no_decay = [p for n, p in named.items() if not (p.dim() >= 2 and not any(s in n for s in ("bias", "norm", "ln_")))]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)

    # The same store and windows as segtrain's truncate at L_e = L_t: floor(len / L)
    # windows per document, a seeded permutation, sequence targets (the last token
    # of a window has none). Batches are built on the host; on CUDA pinned and
    # copied without blocking.
    docs = read_split(os.path.join(store, "train"))
    windows = [(d, s) for d in range(len(docs)) for s in range(0, len(docs[d]) - L + 1, L)]
    order = np.random.default_rng(1234).permutation(len(windows))
    positions = torch.arange(L, device=dev).repeat(B, 1)

    def summed_loss(batch, targets):
        # bf16 autocast on CUDA (segtrain's train.precision: bf16); off on the CPU (fp32).
        with torch.autocast(device_type=DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            logits = model(input_ids=batch, position_ids=positions, use_cache=False).logits
        return F.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1), ignore_index=-100, reduction="sum")

    # compiled: the forward and the loss as one torch.compile'd function (the backward through AOTAutograd);
    # the optimizer and the clip stay as in the eager loop (already one fused kernel a parameter group).
    step_loss = torch.compile(summed_loss, backend=COMPILE_BACKEND, mode=COMPILE_MODE) if variant == "compiled" \
        else summed_loss
    profiler = profile_schedule(torch) if os.environ.get("BENCH_PROFILE_TRACE") else None
    rates = []
    for step in range(shape["steps"]):
        sync()
        start = time.perf_counter()
        picks = [windows[order[(step * B + b) % len(windows)]] for b in range(B)]
        batch = torch.from_numpy(np.stack([docs[d][s:s + L] for d, s in picks]).astype(np.int64))
        targets = torch.full((B, L), -100, dtype=torch.long)
        targets[:, :-1] = batch[:, 1:]
        loss_tokens = int((targets != -100).sum())
        if CUDA:
            batch = batch.pin_memory().to(dev, non_blocking=True)
            targets = targets.pin_memory().to(dev, non_blocking=True)
        for group in optimizer.param_groups:
            group["lr"] = 3e-4 * min(1.0, (step + 1) / 2)
        loss = step_loss(batch, targets)
        (loss / loss_tokens).backward()
        loss_value = loss.item() / loss_tokens
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True).item()
        if math.isfinite(loss_value) and math.isfinite(grad_norm):
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        rates.append(B * L / (time.perf_counter() - start))
        if profiler:
            profiler.step()
    if profiler:
        profiler.stop()
    result = {"tokens_per_s": rates, "params": params, "loss": loss_value, "variant": variant}
    if CUDA:
        result["peak_gpu_mb"] = torch.cuda.max_memory_allocated(dev) / 2 ** 20
        result["peak_gpu_reserved_mb"] = torch.cuda.max_memory_reserved(dev) / 2 ** 20
    pathlib.Path(out).write_text(json.dumps(result))


def profile_schedule(torch):
    """torch.profiler over BENCH_PROFILE_STEPS steps after BENCH_PROFILE_WAIT steps and one warm-up step, its
    Chrome trace written to BENCH_PROFILE_TRACE (the CPU's ops, and on CUDA the GPU's kernels)."""
    from torch.profiler import ProfilerActivity, profile, schedule

    wait = int(os.environ.get("BENCH_PROFILE_WAIT", "4"))
    active = int(os.environ.get("BENCH_PROFILE_STEPS", "3"))
    path = os.environ["BENCH_PROFILE_TRACE"]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if CUDA else [])
    prof = profile(activities=activities, schedule=schedule(wait=wait, warmup=1, active=active, repeat=1),
                   on_trace_ready=lambda p: p.export_chrome_trace(path))
    prof.start()
    return prof


# --- measurements -----------------------------------------------------------------


def probe():
    """torch's version and CUDA, and the names of the visible GPUs."""
    import torch

    devices = []
    if torch.version.cuda and torch.cuda.is_available():
        devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    print(json.dumps({"torch": torch.__version__, "cuda_build": torch.version.cuda, "devices": devices}))


def matmul_peak(cpu_dtypes=("float32",), clearly_above=None):
    """Best GFLOP/s of a square matmul, the ceiling for MFU: on the CPU 2048^3 on THREADS threads in
    each of cpu_dtypes, the fastest kept (a bf16 run computes in bf16 where the CPU has a fast bf16
    GEMM, trainer/runtime/cpu_matmul.h, so its ceiling is the faster of the two); on CUDA bf16 8192^3
    (tensor cores), synchronized. With clearly_above (GFLOP/s, the CPU's first dtype's), a dtype whose
    512^3 matmul runs at less than half of it stops there, as cpu_matmul's probe gives up: it cannot be
    the fastest, and a CPU without a fast bf16 GEMM takes a minute a 2048^3 matmul (this project's
    2-core AMD machine, torch 2.13)."""
    import torch

    torch.set_num_threads(THREADS)
    if not CUDA and len(cpu_dtypes) > 1:
        peaks = [json.loads(_captured(matmul_peak, ((cpu_dtypes[0],),)))]
        peaks += [json.loads(_captured(matmul_peak, ((d,), peaks[0]["gflops"]))) for d in cpu_dtypes[1:]]
        print(json.dumps(max(peaks, key=lambda p: p["gflops"])))
        return
    if CUDA:
        n, dtype, reps, seconds, sync = 8192, torch.bfloat16, 10, 3.0, torch.cuda.synchronize
    else:
        n, dtype, reps, seconds, sync = 2048, getattr(torch, cpu_dtypes[0]), 3, 1.5, (lambda: None)
    if clearly_above is not None:
        m = n // 4
        small = torch.randn(m, m, dtype=dtype)
        torch.mm(small, small)  # the first call sets up the kernel (oneDNN's JIT where it has one)
        start = time.perf_counter()
        torch.mm(small, small)
        probed = 2 * m ** 3 / (time.perf_counter() - start) / 1e9
        if 2 * probed < clearly_above:
            print(json.dumps({"gflops": probed, "n": m, "dtype": str(dtype).removeprefix("torch."), "gave_up": True}))
            return
    a = torch.randn(n, n, device=DEVICE, dtype=dtype)
    b = torch.randn(n, n, device=DEVICE, dtype=dtype)
    c = torch.empty(n, n, device=DEVICE, dtype=dtype)
    for _ in range(3):
        torch.mm(a, b, out=c)
    sync()
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=c)
        sync()
        best = max(best, reps * 2 * n ** 3 / (time.perf_counter() - start) / 1e9)
    print(json.dumps({"gflops": best, "n": n, "dtype": str(dtype).removeprefix("torch.")}))


def _captured(function, args):
    """What function(*args) prints, as a string."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        function(*args)
    return out.getvalue()


def flops_per_token(shape):
    """Model FLOPs per trained token (forward + backward): 6 N + 12 layers d T, N the
    parameters that take part in matmuls (all but the position table; the tied
    embedding counts once, as the head); attention counted as full, not causal."""
    d, layers, V, T = shape["d_model"], shape["n_layers"], shape["vocab"], shape["length"]
    matmul_params = layers * 12 * d * d + V * d
    return 6 * matmul_params + 12 * layers * d * T


def param_count(shape):
    d, layers, V, T = shape["d_model"], shape["n_layers"], shape["vocab"], shape["length"]
    return V * d + T * d + layers * (12 * d * d + 13 * d) + 2 * d


def selected_shapes(table):
    """The shapes of `table` (SHAPES or MEMORY_SHAPES) that BENCH_SHAPES names, or all of them."""
    names = [n for n in os.environ.get("BENCH_SHAPES", "").split(",") if n]
    for n in names:
        if n not in table:
            raise SystemExit(f"train_bench: BENCH_SHAPES: no {DEVICE} shape '{n}'; expected some of {', '.join(table)}")
    chosen = {n: s for n, s in table.items() if n in names or (not names and not s.get("explicit_only"))}
    return {n: dict(s, micro_batch=MICRO_BATCH) if MICRO_BATCH else s for n, s in chosen.items()}


def programs_of(runs):
    """The programs a speed run measured, in their order (segtrain, pytorch, compiled)."""
    return ["segtrain"] + [PROGRAM[v] for v in REFERENCES if PROGRAM[v] in runs]


def variant_fields(variant, runs, seg_rounds, fpt, peak, nominal):
    """segtrain with a SEGTRAIN_VARIANTS switch on beside segtrain as the bench was started: the median of the
    rounds and of the per-round ratios variant_r / segtrain_r (above 1: the switch makes it faster)."""
    program = PROGRAM[variant]
    rounds = [r["tokens_per_s"] for r in runs[program]]
    ratios = [f / s for f, s in zip(rounds, seg_rounds)]
    rate = statistics.median(rounds)
    v = variant
    fields = {
        f"{v}_tokens_per_s": round(rate, 1),
        f"ratio_{v}": round(statistics.median(ratios), 3), f"ratio_{v}_min": round(min(ratios), 3),
        f"ratio_{v}_max": round(max(ratios), 3),
        f"mfu_{v}": round(rate * fpt / (peak * 1e9), 4),
        f"{v}_peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs[program]), 1),
        f"{v}_rounds_tokens_per_s": [round(x, 1) for x in rounds],
        f"ratio_{v}_rounds": [round(x, 3) for x in ratios],
    }
    if CUDA:
        fields[f"mfu_{v}_nominal"] = round(rate * fpt / (nominal * 1e12), 4) if nominal else None
        fields[f"{v}_peak_gpu_mb"] = round(max(r["peak_gpu_mb"] for r in runs[program]), 1)
    return fields


def variant_compiled_fields(runs):
    """Each segtrain variant that ran against torch.compile, round by round, where both ran: ratio_{v}_compiled,
    the median of variant_r / compiled_r (for graph and graph_all: what would make them the default beat the
    compiled loop); {} without the compiled program."""
    if "compiled" not in runs:
        return {}
    fields = {}
    for variant in SEGTRAIN_VARIANTS:
        if PROGRAM[variant] not in runs:
            continue
        over = [v["tokens_per_s"] / c["tokens_per_s"] for v, c in zip(runs[PROGRAM[variant]], runs["compiled"])]
        fields[f"ratio_{variant}_compiled"] = round(statistics.median(over), 3)
        fields[f"ratio_{variant}_compiled_rounds"] = [round(x, 3) for x in over]
    return fields


def compiled_fields(runs, seg_rounds, fpt, peak, nominal):
    """The torch.compile reference's figures, read as the eager loop's: the median of the rounds and of the
    per-round ratios segtrain_r / compiled_r; its first step (compiling included) apart."""
    rounds = [r["tokens_per_s"] for r in runs["compiled"]]
    ratios = [s / c for s, c in zip(seg_rounds, rounds)]
    rate = statistics.median(rounds)
    fields = {
        "compile_backend": COMPILE_BACKEND, "compile_mode": COMPILE_MODE,
        "compiled_tokens_per_s": round(rate, 1),
        "ratio_compiled": round(statistics.median(ratios), 3), "ratio_compiled_min": round(min(ratios), 3),
        "ratio_compiled_max": round(max(ratios), 3),
        "mfu_compiled": round(rate * fpt / (peak * 1e9), 4),
        "compiled_first_step_s": round(statistics.median(r["first_step_s"] for r in runs["compiled"]), 2),
        "compiled_peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs["compiled"]), 1),
        "compiled_rounds_tokens_per_s": [round(x, 1) for x in rounds],
        "ratio_compiled_rounds": [round(x, 3) for x in ratios],
    }
    if CUDA:
        fields["mfu_compiled_nominal"] = round(rate * fpt / (nominal * 1e12), 4) if nominal else None
        fields["compiled_peak_gpu_mb"] = round(max(r["peak_gpu_mb"] for r in runs["compiled"]), 1)
    return fields


def speed():
    benchmark = "gpu_train_speed" if CUDA else "train_speed"
    gpu = cuda_or_skip(benchmark) if CUDA else None
    check_segtrain()
    peaks = [run_json(["peak"])]
    results = []
    with tempfile.TemporaryDirectory(prefix="segtrain-train-bench-") as work:
        for name, shape in selected_shapes(SHAPES).items():
            store = os.path.join(work, f"store-{name}")
            write_store(store, shape["vocab"], docs=64, doc_tokens=4 * shape["length"] * 4)
            programs = ["segtrain"] + [PROGRAM[v] for v in REFERENCES]
            runs = {who: [] for who in programs}
            compile_error = None
            variant_errors = {}  # a switch segtrain refused (SEGTRAIN_CUDA_GRAPH=1 on the CPU): said, left out
            for r in range(ROUNDS):
                # Rotate who goes first so a slow spell on the machine hits every program
                # (two programs: segtrain first in even rounds).
                order = programs[r % len(programs):] + programs[:r % len(programs)]
                for who in order:
                    if who == "segtrain":
                        run = run_segtrain(work, store, shape, f"{name}-{r}")
                    elif who.startswith("segtrain_"):
                        variant = who.removeprefix("segtrain_")
                        if variant in variant_errors:
                            continue
                        try:
                            run = run_segtrain(work, store, shape, f"{name}-{r}-{variant}", variant=variant)
                        except SystemExit as e:
                            variant_errors[variant] = str(e)
                            log(f"{name} round {r} {who}: {e}; left out")
                            continue
                    elif who == "compiled" and compile_error is None:
                        try:
                            run = run_pytorch(work, store, shape, f"{name}-{r}", "compiled")
                        except SystemExit as e:  # compiling failed: said, and the other programs still measured
                            compile_error = str(e)
                            log(f"{name} round {r} compiled: {e}; the compiled reference is left out")
                            continue
                    elif who == "compiled":
                        continue
                    else:
                        run = run_pytorch(work, store, shape, f"{name}-{r}", "eager")
                    runs[who].append(run)
                    log(f"{name} round {r} {who}: {run['tokens_per_s']:.1f} tokens/s, peak RSS {run['peak_rss_mb']:.0f} MB"
                        + (f", peak GPU {run['peak_gpu_mb']:.0f} MiB" if CUDA else "") + f", {run['params']} parameters")
            if compile_error is not None:
                runs.pop("compiled")
                runs["compile_error"] = compile_error
            for variant, error in variant_errors.items():
                runs.pop(PROGRAM[variant])
                runs[f"{variant}_error"] = error
            expected = param_count(shape)
            for who, rows in runs.items():
                if who.endswith("_error"):
                    continue
                for row in rows:
                    if row["params"] != expected:
                        raise SystemExit(f"train_bench: {who} {name} has {row['params']} parameters, expected {expected}")
            results.append((name, shape, runs))
    peaks.append(run_json(["peak"]))
    peak = max(p["gflops"] for p in peaks)
    matmul = f"{peaks[0]['dtype']} {peaks[0]['n']}^3"
    part, nominal = nominal_peak(gpu["devices"][0]) if CUDA else (None, None)
    rows = []
    for name, shape, runs in results:
        # Rounds are pairs (both programs back to back, the order alternated):
        # the ratio is the median of the per-round ratios, with their spread.
        seg_rounds = [r["tokens_per_s"] for r in runs["segtrain"]]
        py_rounds = [r["tokens_per_s"] for r in runs["pytorch"]]
        ratios = [s / p for s, p in zip(seg_rounds, py_rounds)]
        seg, py = statistics.median(seg_rounds), statistics.median(py_rounds)
        fpt = flops_per_token(shape)
        row = {
            "model": name, "device": DEVICE, "precision": PRECISION,
            "d_model": shape["d_model"], "layers": shape["n_layers"], "heads": shape["n_heads"],
            "d_ff": 4 * shape["d_model"], "vocab": shape["vocab"], "length": shape["length"],
            "micro_batch": shape["micro_batch"], "params": param_count(shape), "threads": THREADS,
            "segtrain_loss_chunk_tokens": LOSS_CHUNK_TOKENS,
            "segtrain_param_dtype": ("bf16" if CUDA and PRECISION == "bf16" else "fp32") if PARAM_DTYPE == "auto"
            else PARAM_DTYPE,
            "steps": shape["steps"], "warmup_steps_excluded": WARMUP_STEPS, "rounds": ROUNDS,
            "segtrain_tokens_per_s": round(seg, 1), "pytorch_tokens_per_s": round(py, 1),
            "ratio": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3), "target_ratio": shape["target_ratio"],
            "mfu_segtrain": round(seg * fpt / (peak * 1e9), 4), "mfu_pytorch": round(py * fpt / (peak * 1e9), 4),
            "matmul_peak_gflops": round(peak, 1), "matmul": matmul, "flops_per_token": fpt,
        }
        if CUDA:
            row.update({
                "gpu": gpu["devices"][0], "gpu_part": part, "nominal_bf16_tflops": nominal,
                "mfu_segtrain_nominal": round(seg * fpt / (nominal * 1e12), 4) if nominal else None,
                "mfu_pytorch_nominal": round(py * fpt / (nominal * 1e12), 4) if nominal else None,
                "target_mfu": shape.get("target_mfu"),
                "segtrain_peak_gpu_mb": round(max(r["peak_gpu_mb"] for r in runs["segtrain"]), 1),
                "pytorch_peak_gpu_mb": round(max(r["peak_gpu_mb"] for r in runs["pytorch"]), 1),
            })
        row.update({
            "segtrain_peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs["segtrain"]), 1),
            "pytorch_peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs["pytorch"]), 1),
            "first_in_round": [programs_of(runs)[r % len(programs_of(runs))] for r in range(ROUNDS)],
            "segtrain_rounds_tokens_per_s": [round(x, 1) for x in seg_rounds],
            "pytorch_rounds_tokens_per_s": [round(x, 1) for x in py_rounds],
            "ratio_rounds": [round(x, 3) for x in ratios],
        })
        row["segtrain_fused_kernels"] = FUSED_SWITCH != "0"  # on unless 0 (kernels/fused_kernels.h)
        row["segtrain_cuda_graph"] = GRAPH_SWITCH or "0"
        for variant in SEGTRAIN_VARIANTS:
            if PROGRAM[variant] in runs:
                row.update(variant_fields(variant, runs, seg_rounds, fpt, peak, nominal))
            elif f"{variant}_error" in runs:
                row[f"{variant}_error"] = runs[f"{variant}_error"][-300:]
        if "compiled" in runs:
            row.update(compiled_fields(runs, seg_rounds, fpt, peak, nominal))
            row.update(variant_compiled_fields(runs))
        elif "compile_error" in runs:
            row["compile_error"] = runs["compile_error"][-300:]
        rows.append(row)
    if CUDA:
        compute = (f"bf16 on {gpu['devices'][0]} (segtrain run.device cuda, train.precision bf16; PyTorch "
                   f"torch.autocast('cuda', bfloat16), each step between torch.cuda.synchronize() calls)")
        ceiling = (f"MFU = tokens/s x (6N + 12 layers d L) / the bf16 8192^3 matmul GFLOP/s measured here"
                   + (f", and _nominal against {part}'s {nominal:g} dense bf16 TFLOP/s" if nominal else
                      " (no nominal peak: this GPU is not in bench/train_bench.py's table)"))
    else:
        compute = f"fp32 on {THREADS} CPU thread(s)"
        ceiling = "MFU = tokens/s x (6N + 12 layers d L) / fp32 2048^3 matmul GFLOP/s on as many threads"
    out = {
        "benchmark": benchmark,
        "setup": (f"segtrain train vs a PyTorch loop (transformers GPT2LMHeadModel, sdpa, {ACTIVATION}, "
                  f"fused AdamW, foreach clip) on the same store, shape and micro-batch, {compute}; "
                  + (f"and the same loop with its forward and loss under torch.compile (backend {COMPILE_BACKEND}, "
                     f"mode {COMPILE_MODE}; compiled_*, ratio_compiled = segtrain / compiled); "
                     if "compiled" in REFERENCES else "")
                  + "".join(f"and segtrain with {' '.join(f'{k}={x}' for k, x in SEGTRAIN_VARIANTS[v].items())} "
                            f"({v}_*, ratio_{v} = {v} / segtrain); " for v in SEGTRAIN_VARIANTS if v in REFERENCES)
                  + f"tokens/s over the steps after the first {WARMUP_STEPS}; {ROUNDS} interleaved rounds, the order "
                  f"rotated (first_in_round); ratio = median of the per-round ratios "
                  f"segtrain_r / pytorch_r [min, max], tokens/s = median of the rounds; {ceiling}; "
                  f"N = parameters in matmuls (all but the position table)"),
        "matmul_peak_gflops": [round(p["gflops"], 1) for p in peaks],
    }
    if CUDA:
        out["gpus"] = gpu["devices"]
        out["torch"] = gpu["torch"]
    out["results"] = rows
    print(json.dumps(out, indent=1))


def memory():
    benchmark = "gpu_train_memory" if CUDA else "train_memory"
    gpu = cuda_or_skip(benchmark) if CUDA else None
    check_segtrain()
    rows = []
    with tempfile.TemporaryDirectory(prefix="segtrain-memory-bench-") as work:
        for name, shape in selected_shapes(MEMORY_SHAPES).items():
            L = shape["length"]
            store = os.path.join(work, f"store-{name}")
            write_store(store, shape["vocab"], docs=16, doc_tokens=4 * L * 4)
            rss, gpu_mb, reserved_mb = {}, {}, {}
            for method, sample_length in (("truncate", L), ("chunk", L), ("full", 4 * L)):
                out = os.path.join(work, f"{name}-{method}")
                config = out + ".yaml"
                segtrain_config(config, out, store, shape, threads=THREADS, extended=4 * L, method=method,
                                max_positions=4 * L, sample_length=sample_length)
                rss[method] = run_child([str(SEGTRAIN), "train", config], out + ".log")
                if CUDA:
                    gpu_mb[method], reserved_mb[method] = gpu_peaks(metrics_rows(out), out)
                    log(f"{name} {method}: peak GPU {gpu_mb[method]:.0f} MiB allocated, "
                        f"{reserved_mb[method]:.0f} MiB reserved; peak RSS {rss[method]:.0f} MB")
                else:
                    log(f"{name} {method}: peak RSS {rss[method]:.0f} MB")
                shutil.rmtree(out)
            row = {"model": name, "device": DEVICE, "precision": PRECISION, "d_model": shape["d_model"],
                   "layers": shape["n_layers"], "vocab": shape["vocab"], "micro_batch": shape["micro_batch"],
                   "L_t": L, "L_e": 4 * L, "threads": THREADS}
            if CUDA:
                row.update({
                    "gpu": gpu["devices"][0],
                    "peak_gpu_mb_truncate": gpu_mb["truncate"], "peak_gpu_mb_chunk": gpu_mb["chunk"],
                    "peak_gpu_mb_full": gpu_mb["full"],
                    "chunk_over_truncate": round(gpu_mb["chunk"] / gpu_mb["truncate"], 3),
                    "full_over_truncate": round(gpu_mb["full"] / gpu_mb["truncate"], 3),
                    "peak_gpu_reserved_mb_truncate": reserved_mb["truncate"],
                    "peak_gpu_reserved_mb_chunk": reserved_mb["chunk"],
                    "peak_gpu_reserved_mb_full": reserved_mb["full"],
                })
            else:
                row.update({
                    "peak_rss_mb_truncate": round(rss["truncate"], 1), "peak_rss_mb_chunk": round(rss["chunk"], 1),
                    "peak_rss_mb_full": round(rss["full"], 1),
                    "chunk_over_truncate": round(rss["chunk"] / rss["truncate"], 3),
                    "full_over_truncate": round(rss["full"] / rss["truncate"], 3),
                })
            row["target_chunk_over_truncate"] = TARGET_CHUNK_OVER_TRUNCATE
            rows.append(row)
    if CUDA:
        setup = ("peak GPU memory of segtrain train in bf16 at L_e = 4 L_t: truncate (L_t tokens), chunk-0.25 at "
                 "L_e = 4 L_t, full (L_e tokens); same model (4 L_t position rows) and micro-batch; the CUDA caching "
                 "allocator's peak allocated MiB since the run started (the largest peak_gpu_mb of its metrics.jsonl; "
                 "reserved: peak_gpu_reserved_mb); target chunk <= 1.05 x truncate")
    else:
        setup = ("peak RSS (wait4) of segtrain train at L_e = 4 L_t: truncate (L_t tokens), chunk-0.25 at L_e = 4 L_t, "
                 "full (L_e tokens); same model (4 L_t position rows) and micro-batch; the whole process, final "
                 "checkpoint and evaluation included; target chunk <= 1.05 x truncate")
    print(json.dumps({"benchmark": benchmark, "setup": setup, "results": rows}, indent=1))


LOSS_CHUNK_SHAPE = dict(vocab=32000, d_model=256, n_layers=2, n_heads=4, length=2048)


def loss_chunk():
    """One training step with train.loss_chunk_tokens auto and 0: its peak RSS."""
    check_segtrain()
    shape = LOSS_CHUNK_SHAPE
    L, V = shape["length"], shape["vocab"]
    logits_mib = L * V * 4 / 2 ** 20
    step_rss, process_rss, loss = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="segtrain-loss-chunk-bench-") as work:
        store = os.path.join(work, "store")
        write_store(store, V, docs=2, doc_tokens=L)
        for setting in ("0", "auto"):
            out = os.path.join(work, f"chunk-{setting}")
            config = out + ".yaml"
            pathlib.Path(config).write_text(f"""run: {{name: bench, output_dir: {out}, threads: {THREADS}, log_level: warn, device: cpu}}
model: {{arch: gpt2, d_model: {shape['d_model']}, n_layers: {shape['n_layers']}, n_heads: {shape['n_heads']}, max_positions: {L}}}
data: {{store: {store}, train_length: {L}, extended_length: {L}, sampler: {{method: truncate}}}}
train: {{budget: {{tokens: {L}}}, micro_batch_size: 1, warmup_steps: 1, log_every: 1, checkpoint_every: 0,
        tensorboard: false, precision: fp32, loss_chunk_tokens: {setting}}}
eval: {{lengths: [{L}], max_sequences: 1, batch_size: 1}}
""")
            process_rss[setting] = run_child([str(SEGTRAIN), "train", config], out + ".log")
            rows = metrics_rows(out)
            if len(rows) != 1:
                raise SystemExit(f"train_bench: {out} ran {len(rows)} steps, expected 1")
            step_rss[setting], loss[setting] = rows[0]["peak_rss_mb"], rows[0]["loss"]
            log(f"loss_chunk_tokens {setting}: step peak RSS {step_rss[setting]:.0f} MiB, process "
                f"{process_rss[setting]:.0f} MB, loss {loss[setting]:.6f}")
            shutil.rmtree(out)
    saved = step_rss["0"] - step_rss["auto"]
    row = {"vocab": V, "length": L, "d_model": shape["d_model"], "layers": shape["n_layers"], "micro_batch": 1,
           "precision": "fp32", "threads": THREADS,
           "auto_chunk_tokens": max(1, (64 << 20) // (V * 4)),
           "step_peak_rss_mb_whole": round(step_rss["0"], 1), "step_peak_rss_mb_chunked": round(step_rss["auto"], 1),
           "saved_mb": round(saved, 1), "fp32_logits_mb": round(logits_mib, 1),
           "saved_over_logits": round(saved / logits_mib, 3),
           "process_peak_rss_mb_whole": round(process_rss["0"], 1),
           "process_peak_rss_mb_chunked": round(process_rss["auto"], 1),
           "loss_whole": loss["0"], "loss_chunked": loss["auto"]}
    setup = (f"peak RSS of one segtrain train step (gpt2, d_model {shape['d_model']}, {shape['n_layers']} layers, "
             f"vocab {V}, 1 x {L} tokens, fp32, {THREADS} thread(s)) with train.loss_chunk_tokens auto (the LM head and "
             f"cross-entropy over slices of {row['auto_chunk_tokens']} tokens) vs 0 (the whole logits): the step's "
             f"peak_rss_mb of metrics.jsonl (MiB, before the final checkpoint and evaluation), saved = their "
             f"difference, against the fp32 logits' size; process_*: the whole process's peak (wait4), evaluation "
             f"at {L} included")
    print(json.dumps({"benchmark": "loss_chunk_memory", "setup": setup, "results": [row]}, indent=1))


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "speed"
    if command == "loop" and len(sys.argv) in (5, 6) and (len(sys.argv) == 5 or sys.argv[5] in ("eager", "compiled")):
        pytorch_loop(sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], *sys.argv[5:])
    elif command == "speed":
        speed()
    elif command == "memory":
        memory()
    elif command == "loss_chunk":
        loss_chunk()
    elif command == "probe":
        probe()
    elif command == "peak":
        # `peak bf16-or-fp32`: the faster of the two on the CPU, the ceiling of a bf16 run there.
        matmul_peak(("float32", "bfloat16") if sys.argv[2:] == ["bf16-or-fp32"] else ("float32",))
    else:
        raise SystemExit(f"usage: {sys.argv[0]} speed|memory|loss_chunk|probe|peak (BENCH_DEVICE=cpu|cuda)")
