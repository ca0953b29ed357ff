"""End-to-end training benchmarks of `segtrain train`, printed as JSON (bench/run.sh).

  train_bench.py speed    segtrain vs an equivalent PyTorch loop (HF GPT2LMHeadModel,
                          sdpa attention, fused AdamW) on the same token store, same
                          shape, micro-batch, threads and optimizer: tokens/s and model
                          FLOPs utilisation against this machine's fp32 matmul peak,
                          measured in the same run with the same thread count.
                          BENCH_ROUNDS interleaved rounds, the order alternated (round
                          r runs segtrain first when r is even); ratio = median over
                          the rounds of segtrain_r / pytorch_r, with its min and max
                          and every round's figures, since whichever program runs
                          first in a round can pay a cold start.
  train_bench.py memory   peak RSS of `segtrain train` with truncate at L_t, chunk-0.25
                          at L_e = 4 L_t and full at L_e, same model and micro-batch.
  train_bench.py loop ... one PyTorch training run (a child of `speed`).

Every run is its own child process; its peak RSS comes from os.wait4's rusage, so
no tool beyond Python is needed. Token stores are random tokens written here in the
Megatron indexed-dataset format segtrain reads (the content does not change speed).
Environment: BUILD_DIR (default build), BENCH_THREADS (default 1), BENCH_ROUNDS
(default 5), BENCH_SHAPES (e.g. quickstart; default all).

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
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD_DIR = pathlib.Path(os.environ.get("BUILD_DIR", "build"))
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
ROUNDS = positive_env("BENCH_ROUNDS", 5)
WARMUP_STEPS = 2  # first steps (allocation, kernel selection, optimizer state) are left out
# GPT-2's own "gelu_new" is the tanh GELU written as five Python tensor ops;
# "gelu_pytorch_tanh" is the same function as one fused kernel, which segtrain
# also uses, so the PyTorch side is not slowed down by the composite.
ACTIVATION = "gelu_pytorch_tanh"

# The two shapes of the issue: the quickstart model and GPT-2 small;
# target_ratio: the issues' targets for segtrain / PyTorch tokens/s.
SHAPES = {
    "quickstart": dict(vocab=1024, d_model=128, n_layers=4, n_heads=4, length=128, micro_batch=16, steps=40,
                       target_ratio=1.15),
    "gpt2-small": dict(vocab=50257, d_model=768, n_layers=12, n_heads=12, length=256, micro_batch=2, steps=8,
                       target_ratio=1.0),
}


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


def run_child(cmd, log_path):
    """Runs cmd to completion; returns its peak RSS in MB (its own, from wait4)."""
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.stderr.write(pathlib.Path(log_path).read_text()[-4000:])
        raise SystemExit(f"train_bench: {' '.join(map(str, cmd[:3]))} ... failed with exit code {proc.returncode}")
    return usage.ru_maxrss / 1024.0  # KiB on Linux


def segtrain_config(path, out_dir, store, shape, *, threads, extended=None, method="truncate", max_positions=None,
                    steps=None, sample_length=None):
    L = shape["length"]
    Le = extended or L
    tokens = (steps or shape["steps"]) * shape["micro_batch"] * (sample_length or L)
    config = f"""run: {{name: bench, output_dir: {out_dir}, threads: {threads}, log_level: warn}}
model: {{arch: gpt2, d_model: {shape['d_model']}, n_layers: {shape['n_layers']}, n_heads: {shape['n_heads']},
        max_positions: {max_positions or Le}}}
data: {{store: {store}, train_length: {L}, extended_length: {Le}, sampler: {{method: {method}, alpha: 0.25}}}}
train: {{budget: {{tokens: {tokens}}}, micro_batch_size: {shape['micro_batch']}, warmup_steps: 2, log_every: 1,
        checkpoint_every: 0, tensorboard: false, lr: 3.0e-4, weight_decay: 0.1, betas: [0.9, 0.95], grad_clip: 1.0}}
eval: {{lengths: [{L}], max_sequences: 1, batch_size: 1}}
"""
    pathlib.Path(path).write_text(config)


def steady_rate(rates):
    """Tokens/s over the steps after the warm-up: equal tokens per step, so the harmonic mean."""
    rates = rates[WARMUP_STEPS:]
    return len(rates) / sum(1.0 / r for r in rates)


def run_segtrain(work, store, shape, tag):
    out = os.path.join(work, f"segtrain-{tag}")
    config = os.path.join(work, f"segtrain-{tag}.yaml")
    segtrain_config(config, out, store, shape, threads=THREADS)
    rss = run_child([str(SEGTRAIN), "train", config], out + ".log")
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    params = safetensors_numel(os.path.join(out, "final", "model.safetensors"))
    return steady_rate([r["tokens_per_s"] for r in rows]), rss, params


def safetensors_numel(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")


def run_pytorch(work, store, shape, tag):
    out = os.path.join(work, f"pytorch-{tag}.json")
    rss = run_child([sys.executable, __file__, "loop", store, json.dumps(shape), out], out + ".log")
    result = json.loads(pathlib.Path(out).read_text())
    return steady_rate(result["tokens_per_s"]), rss, result["params"]


# --- the PyTorch loop -------------------------------------------------------------


def pytorch_loop(store, shape, out):
    import torch
    import torch.nn.functional as F
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    L, B, V = shape["length"], shape["micro_batch"], shape["vocab"]
    # segtrain's gpt2 block: pre-LN, tanh GELU, d_ff = 4 d, LayerNorm eps 1e-5,
    # learned positions with max_positions = L rows, tied head, no dropout anywhere.
    config = GPT2Config(vocab_size=V, n_positions=L, n_embd=shape["d_model"], n_layer=shape["n_layers"],
                        n_head=shape["n_heads"], n_inner=4 * shape["d_model"], activation_function=ACTIVATION,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
                        tie_word_embeddings=True, use_cache=False,
                        bos_token_id=None, eos_token_id=None)
    model = GPT2LMHeadModel._from_config(config, attn_implementation="sdpa")
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
    # of a window has none).
    docs = read_split(os.path.join(store, "train"))
    windows = [(d, s) for d in range(len(docs)) for s in range(0, len(docs[d]) - L + 1, L)]
    order = np.random.default_rng(1234).permutation(len(windows))
    positions = torch.arange(L).repeat(B, 1)
    rates = []
    for step in range(shape["steps"]):
        start = time.perf_counter()
        picks = [windows[order[(step * B + b) % len(windows)]] for b in range(B)]
        batch = torch.from_numpy(np.stack([docs[d][s:s + L] for d, s in picks]).astype(np.int64))
        targets = torch.full((B, L), -100, dtype=torch.long)
        targets[:, :-1] = batch[:, 1:]
        loss_tokens = int((targets != -100).sum())
        for group in optimizer.param_groups:
            group["lr"] = 3e-4 * min(1.0, (step + 1) / 2)
        logits = model(input_ids=batch, position_ids=positions, use_cache=False).logits
        loss = F.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1), ignore_index=-100, reduction="sum")
        (loss / loss_tokens).backward()
        loss_value = loss.item() / loss_tokens
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True).item()
        if math.isfinite(loss_value) and math.isfinite(grad_norm):
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        rates.append(B * L / (time.perf_counter() - start))
    pathlib.Path(out).write_text(json.dumps({"tokens_per_s": rates, "params": params, "loss": loss_value}))


# --- measurements -----------------------------------------------------------------


def matmul_peak_gflops(n=2048, seconds=1.5):
    """Best fp32 GFLOP/s of an n x n matmul on THREADS threads (the ceiling for MFU)."""
    import torch

    torch.set_num_threads(THREADS)
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)
    for _ in range(2):
        torch.mm(a, b, out=c)
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(3):
            torch.mm(a, b, out=c)
        best = max(best, 3 * 2 * n ** 3 / (time.perf_counter() - start) / 1e9)
    return best


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


def speed():
    if not SEGTRAIN.exists():
        raise SystemExit(f"train_bench: {SEGTRAIN} is not built")
    peaks = [matmul_peak_gflops()]
    results = []
    with tempfile.TemporaryDirectory(prefix="segtrain-train-bench-") as work:
        for name, shape in SHAPES.items():
            if os.environ.get("BENCH_SHAPES") and name not in os.environ["BENCH_SHAPES"].split(","):
                continue
            store = os.path.join(work, f"store-{name}")
            write_store(store, shape["vocab"], docs=64, doc_tokens=4 * shape["length"] * 4)
            runs = {"segtrain": [], "pytorch": []}
            for r in range(ROUNDS):
                # Alternate who goes first so a slow spell on the machine hits both.
                order = ("segtrain", "pytorch") if r % 2 == 0 else ("pytorch", "segtrain")
                for who in order:
                    fn = run_segtrain if who == "segtrain" else run_pytorch
                    rate, rss, params = fn(work, store, shape, f"{name}-{r}")
                    runs[who].append({"tokens_per_s": rate, "peak_rss_mb": rss, "params": params})
                    log(f"{name} round {r} {who}: {rate:.1f} tokens/s, peak RSS {rss:.0f} MB, {params} parameters")
            expected = param_count(shape)
            for who, rows in runs.items():
                for row in rows:
                    if row["params"] != expected:
                        raise SystemExit(f"train_bench: {who} {name} has {row['params']} parameters, expected {expected}")
            results.append((name, shape, runs))
    peaks.append(matmul_peak_gflops())
    peak = max(peaks)
    rows = []
    for name, shape, runs in results:
        # Rounds are pairs (both programs back to back, the order alternated):
        # the ratio is the median of the per-round ratios, with their spread.
        seg_rounds = [r["tokens_per_s"] for r in runs["segtrain"]]
        py_rounds = [r["tokens_per_s"] for r in runs["pytorch"]]
        ratios = [s / p for s, p in zip(seg_rounds, py_rounds)]
        seg, py = statistics.median(seg_rounds), statistics.median(py_rounds)
        fpt = flops_per_token(shape)
        rows.append({
            "model": name, "d_model": shape["d_model"], "layers": shape["n_layers"], "heads": shape["n_heads"],
            "d_ff": 4 * shape["d_model"], "vocab": shape["vocab"], "length": shape["length"],
            "micro_batch": shape["micro_batch"], "params": param_count(shape), "threads": THREADS,
            "steps": shape["steps"], "warmup_steps_excluded": WARMUP_STEPS, "rounds": ROUNDS,
            "segtrain_tokens_per_s": round(seg, 1), "pytorch_tokens_per_s": round(py, 1),
            "ratio": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3), "target_ratio": shape["target_ratio"],
            "mfu_segtrain": round(seg * fpt / (peak * 1e9), 4), "mfu_pytorch": round(py * fpt / (peak * 1e9), 4),
            "matmul_peak_gflops": round(peak, 1), "flops_per_token": fpt,
            "segtrain_peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs["segtrain"]), 1),
            "pytorch_peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs["pytorch"]), 1),
            "first_in_round": [("segtrain" if r % 2 == 0 else "pytorch") for r in range(ROUNDS)],
            "segtrain_rounds_tokens_per_s": [round(x, 1) for x in seg_rounds],
            "pytorch_rounds_tokens_per_s": [round(x, 1) for x in py_rounds],
            "ratio_rounds": [round(x, 3) for x in ratios],
        })
    print(json.dumps({
        "benchmark": "train_speed",
        "setup": (f"segtrain train vs a PyTorch loop (transformers GPT2LMHeadModel, sdpa, {ACTIVATION}, "
                  f"fused AdamW, foreach clip) on the same store, shape, micro-batch and {THREADS} thread(s); "
                  f"tokens/s over the steps after the first {WARMUP_STEPS}; {ROUNDS} interleaved rounds, the order "
                  f"alternated (segtrain first in even rounds); ratio = median of the per-round ratios "
                  f"segtrain_r / pytorch_r [min, max], tokens/s = median of the rounds; "
                  f"MFU = tokens/s x (6N + 12 layers d L) / fp32 {2048}^3 matmul GFLOP/s on as many threads, "
                  f"N = parameters in matmuls (all but the position table)"),
        "matmul_peak_gflops": [round(p, 1) for p in peaks],
        "results": rows}, indent=1))


def memory():
    if not SEGTRAIN.exists():
        raise SystemExit(f"train_bench: {SEGTRAIN} is not built")
    # The quickstart model; every method uses the same model (a 4 L_t position table)
    # and micro-batch, so only the sequences the sampler builds differ.
    shapes = {
        "quickstart": dict(vocab=1024, d_model=128, n_layers=4, n_heads=4, length=128, micro_batch=16, steps=8),
        "d512x8": dict(vocab=1024, d_model=512, n_layers=8, n_heads=8, length=256, micro_batch=8, steps=3),
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="segtrain-memory-bench-") as work:
        for name, shape in shapes.items():
            L = shape["length"]
            store = os.path.join(work, f"store-{name}")
            write_store(store, shape["vocab"], docs=16, doc_tokens=4 * L * 4)
            peaks = {}
            for method, sample_length in (("truncate", L), ("chunk", L), ("full", 4 * L)):
                out = os.path.join(work, f"{name}-{method}")
                config = out + ".yaml"
                segtrain_config(config, out, store, shape, threads=THREADS, extended=4 * L, method=method,
                                max_positions=4 * L, sample_length=sample_length)
                peaks[method] = run_child([str(SEGTRAIN), "train", config], out + ".log")
                log(f"{name} {method}: peak RSS {peaks[method]:.0f} MB")
            rows.append({
                "model": name, "d_model": shape["d_model"], "layers": shape["n_layers"], "vocab": shape["vocab"],
                "micro_batch": shape["micro_batch"], "L_t": L, "L_e": 4 * L, "threads": THREADS,
                "peak_rss_mb_truncate": round(peaks["truncate"], 1), "peak_rss_mb_chunk": round(peaks["chunk"], 1),
                "peak_rss_mb_full": round(peaks["full"], 1),
                "chunk_over_truncate": round(peaks["chunk"] / peaks["truncate"], 3),
                "full_over_truncate": round(peaks["full"] / peaks["truncate"], 3),
            })
    print(json.dumps({
        "benchmark": "train_memory",
        "setup": ("peak RSS (wait4) of segtrain train at L_e = 4 L_t: truncate (L_t tokens), chunk-0.25 at L_e = 4 L_t, "
                  "full (L_e tokens); same model (4 L_t position rows) and micro-batch; the whole process, final checkpoint and evaluation included; target chunk <= 1.05 x truncate"),
        "results": rows}, indent=1))


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "speed"
    if command == "loop":
        pytorch_loop(sys.argv[2], json.loads(sys.argv[3]), sys.argv[4])
    elif command == "speed":
        speed()
    elif command == "memory":
        memory()
    else:
        raise SystemExit(f"usage: {sys.argv[0]} speed|memory")
