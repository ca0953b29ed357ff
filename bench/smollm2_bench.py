"""Training on the real shape: SmolLM2-135M, segtrain vs transformers, printed as JSON.

  smollm2_bench.py [cpu|cuda] [--rounds N] [--threads N] [--length L] [--micro-batch B]
                   [--warmup W] [--steps S] [--precision fp32|bf16] [--init auto|hf|random]
  smollm2_bench.py loop ARGS_JSON OUT   one transformers training run (a child)

The shape is SmolLM2-135M's: llama, 30 layers, d_model 576, 9 heads, 3 key/value heads
(grouped-query attention), head_dim 64, SwiGLU d_ff 1536, RMSNorm eps 1e-5, RoPE theta
1e5, a tied 49,152-token vocabulary: 134,515,008 parameters. With --init hf (auto, when
runs/bases/smollm2-135m exists: `make real-base`) both programs start from its real
weights: segtrain `model.init: hf:runs/bases/smollm2-135m`, transformers
`LlamaForCausalLM.from_pretrained` of the same folder; --init random (auto without the
folder) is a seeded random initialisation of the same config on each side.

One round is one `segtrain train` and one transformers eager loop (LlamaForCausalLM,
sdpa attention, `labels=` so transformers' own shifted mean cross-entropy, AdamW with
fused=True, clip_grad_norm_ with foreach, zero_grad(set_to_none=True)), each in its own
process, the order alternated (segtrain first in even rounds). Both do the same work
per step: the same micro-batch of the same tokens (B x L tokens of README.md tokenized
with the base's tokenizer.json; every training document is that one window, so both
see the same batch whatever their data order), the loss over all B x (L - 1) next-token
targets, the same AdamW (lr 3e-4 constant, no warm-up, betas 0.9/0.95, eps 1e-8, weight
decay 0.1 on the 2-D weights but the norms, as segtrain's train.no_decay), clipping at 1.0,
the same precision and thread count. segtrain runs with its defaults otherwise, so its
LM head and cross-entropy go over slices of the tokens (train.loss_chunk_tokens auto:
while the head trains, slices of d_model = 576 tokens, 108 MiB of fp32 logits at vocab 49,152) where transformers
makes the whole [B, L, 49152] logits. The checks: equal parameter counts, equal loss
tokens per step and, from the real weights, the first step's loss and gradient norm
equal (same weights, same batch) to 1e-3.

tokens/s = B L x (timed steps) / their time, over the steps after the first --warmup
(first steps allocate the optimizer state and warm kernels up); segtrain's from its
metrics.jsonl (log_every 1), transformers' timed around each step in the child.
Peak RSS: the process's high-water mark (getrusage ru_maxrss) at the end of the last
training step on both sides (segtrain's metrics.jsonl peak_rss_mb; the child's own
getrusage), which includes loading the weights; also the whole process's (wait4), where
segtrain adds writing its final checkpoint and a one-window evaluation that the
transformers loop does not do. Ratios are segtrain / transformers: the median of the
per-round ratios with their min and max; tokens/s and RSS = the median of the rounds.

cuda: the same on the first GPU (segtrain run.device cuda; the model and batch on the
GPU, each step between torch.cuda.synchronize() calls; --precision bf16 is segtrain's
train.precision bf16 and torch.autocast(bfloat16) in the loop), plus peak GPU memory
(segtrain's peak_gpu_mb, torch.cuda.max_memory_allocated). Without a visible GPU, a
torch without CUDA or a segtrain built without it, it prints {"benchmark": ...,
"skipped": "why"} and exits 0.

Environment: BUILD_DIR (default build, build-cuda for cuda), BENCH_ROUNDS (default 5),
BENCH_THREADS (default 1, as bench/train_bench.py: on 2 cores one thread per process
keeps the side-by-side ratio stable while other jobs run), SMOLLM2_BASE (the HF folder).
The parent process stays small (no torch): a child's wait4 peak includes its parent's
at the fork.
"""
import argparse
import json
import math
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_bench import metrics_rows, read_split, safetensors_numel, write_split  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
BASE = pathlib.Path(os.environ.get("SMOLLM2_BASE", ROOT / "runs" / "bases" / "smollm2-135m"))
TEXT = ROOT / "README.md"  # the tokens both programs train on (content does not change speed)

# SmolLM2-135M (HuggingFaceTB/SmolLM2-135M's config.json).
SHAPE = dict(vocab=49152, d_model=576, n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64, d_ff=1536,
             rms_norm_eps=1e-5, rope_theta=1e5, max_positions=8192, tie_embeddings=True)
PARAMS = 134_515_008
LR, BETAS, EPS, WEIGHT_DECAY, CLIP = 3e-4, (0.9, 0.95), 1e-8, 0.1, 1.0
NO_DECAY = ("bias", "norm", "ln_")  # segtrain's train.no_decay default
# Per device: one round short enough that 5 rounds take minutes on 2 CPU cores.
DEFAULTS = {
    "cpu": dict(length=512, micro_batch=1, warmup=1, steps=3),
    "cuda": dict(length=2048, micro_batch=8, warmup=3, steps=10),
}
LOSS_TOLERANCE = 1e-3


def log(*args):
    print("[smollm2_bench]", *args, file=sys.stderr, flush=True)


def run_child(cmd, log_path):
    """Runs cmd to completion; returns its own peak RSS in MB (wait4)."""
    with open(log_path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.stderr.write(pathlib.Path(log_path).read_text()[-4000:])
        raise SystemExit(f"smollm2_bench: {' '.join(map(str, cmd[:3]))} ... failed with exit code {code}")
    return usage.ru_maxrss / 1024.0  # KiB on Linux


def steady(rates, warmup):
    """Tokens/s over the steps after the warm-up: equal tokens per step, so the harmonic mean."""
    timed = rates[warmup:]
    if not timed:
        raise SystemExit(f"smollm2_bench: no step left after the {warmup} warm-up steps")
    return len(timed) / sum(1.0 / r for r in timed)


# --- the token store ------------------------------------------------------------------


def text_tokens(count, init):
    """count token ids: README.md in the base's tokenizer (real weights), else seeded random ids."""
    if init == "hf":
        from tokenizers import Tokenizer

        ids = Tokenizer.from_file(str(BASE / "tokenizer.json")).encode(TEXT.read_text()).ids
        while len(ids) < count:
            ids = ids + ids
        return np.asarray(ids[:count], dtype=np.int64)
    return np.random.default_rng(0).integers(3, SHAPE["vocab"], count)


def write_store(directory, args):
    """Every training document is the same window of L tokens, so any data order gives both
    programs the same batch; the valid split (segtrain's final evaluation) is the next L."""
    L = args.length
    ids = text_tokens(2 * L, args.init)
    docs = 4 * args.micro_batch * (args.warmup + args.steps)
    os.makedirs(directory, exist_ok=True)
    write_split(os.path.join(directory, "train"), [ids[:L]] * docs, np.uint16)
    write_split(os.path.join(directory, "valid"), [ids[L:]], np.uint16)
    meta = {"vocab_size": SHAPE["vocab"], "tokenizer": "", "eos_id": 2, "documents": docs + 1,
            "tokens": (docs + 1) * L, "dtype": "uint16", "format": "megatron-indexed-dataset-v1"}
    pathlib.Path(directory, "meta.json").write_text(json.dumps(meta))


# --- segtrain -------------------------------------------------------------------------


def run_segtrain(work, store, args, tag):
    out = os.path.join(work, f"segtrain-{tag}")
    config = out + ".yaml"
    s = SHAPE
    if args.init == "hf":
        model = f"{{init: 'hf:{BASE}', arch: llama}}"
    else:
        model = (f"{{arch: llama, d_model: {s['d_model']}, n_layers: {s['n_layers']}, n_heads: {s['n_heads']}, "
                 f"n_kv_heads: {s['n_kv_heads']}, head_dim: {s['head_dim']}, d_ff: {s['d_ff']}, "
                 f"max_positions: {s['max_positions']}, layer_norm_eps: {s['rms_norm_eps']}, "
                 f"tie_embeddings: true, rope: {{theta: {s['rope_theta']}}}}}")
    L, B = args.length, args.micro_batch
    pathlib.Path(config).write_text(f"""run: {{name: bench, output_dir: {out}, threads: {args.threads}, log_level: warn, device: {args.device}}}
model: {model}
data: {{store: {store}, train_length: {L}, extended_length: {L}, sampler: {{method: truncate}}}}
train: {{budget: {{tokens: {(args.warmup + args.steps) * B * L}}}, micro_batch_size: {B}, warmup_steps: 0,
        schedule: constant, lr: {LR}, weight_decay: {WEIGHT_DECAY}, betas: [{BETAS[0]}, {BETAS[1]}], eps: {EPS},
        grad_clip: {CLIP}, log_every: 1, checkpoint_every: 0, tensorboard: false, precision: {args.precision}}}
eval: {{lengths: [{L}], max_sequences: 1, batch_size: 1}}
""")
    process_rss = run_child([str(args.segtrain), "train", config], out + ".log")
    rows = metrics_rows(out)
    resolved = resolved_model(os.path.join(out, "config.yaml"))
    result = {
        "tokens_per_s": steady([r["tokens_per_s"] for r in rows], args.warmup),
        "step_tokens_per_s": [r["tokens_per_s"] for r in rows],
        "loss": [r["loss"] for r in rows], "grad_norm": [r["grad_norm"] for r in rows],
        "loss_tokens": [r["loss_tokens"] for r in rows],
        "train_peak_rss_mb": rows[-1]["peak_rss_mb"], "process_peak_rss_mb": process_rss,
        "params": safetensors_numel(os.path.join(out, "final", "model.safetensors")),
        "model": resolved,
    }
    if args.device == "cuda":
        result["peak_gpu_mb"] = max(r["peak_gpu_mb"] for r in rows)
    shutil.rmtree(out)  # its final checkpoint: 1.6 GB with the optimizer state, per round
    return result


def resolved_model(path):
    """The model section segtrain resolved (written to the run's config.yaml)."""
    import yaml

    m = yaml.safe_load(pathlib.Path(path).read_text())["model"]
    # (YAML 1.1 reads 1e-05 without a dot as a string: the floats are converted here.)
    return {k: m[k] for k in ("arch", "vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim",
                              "d_ff", "tie_embeddings")} | {"layer_norm_eps": float(m["layer_norm_eps"]),
                                                           "rope_theta": float(m["rope"]["theta"])}


# --- transformers ---------------------------------------------------------------------


def run_transformers(work, store, args, tag):
    out = os.path.join(work, f"transformers-{tag}.json")
    child = {k: getattr(args, k) for k in ("device", "threads", "length", "micro_batch", "warmup", "steps",
                                           "precision", "init")}
    child["store"] = store
    process_rss = run_child([sys.executable, __file__, "loop", json.dumps(child), out], out + ".log")
    result = json.loads(pathlib.Path(out).read_text())
    result["tokens_per_s"] = steady(result["step_tokens_per_s"], args.warmup)
    result["process_peak_rss_mb"] = process_rss
    return result


def transformers_loop(a, out):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(a["threads"])
    torch.manual_seed(0)
    cuda = a["device"] == "cuda"
    dev = torch.device(a["device"])
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    L, B, s = a["length"], a["micro_batch"], SHAPE
    if a["init"] == "hf":
        model = LlamaForCausalLM.from_pretrained(str(BASE), dtype=torch.float32, attn_implementation="sdpa")
    else:
        config = LlamaConfig(vocab_size=s["vocab"], hidden_size=s["d_model"], num_hidden_layers=s["n_layers"],
                             num_attention_heads=s["n_heads"], num_key_value_heads=s["n_kv_heads"],
                             head_dim=s["head_dim"], intermediate_size=s["d_ff"], rms_norm_eps=s["rms_norm_eps"],
                             rope_theta=s["rope_theta"], max_position_embeddings=s["max_positions"],
                             tie_word_embeddings=True, hidden_act="silu", attention_bias=False, mlp_bias=False,
                             use_cache=False, bos_token_id=1, eos_token_id=2, pad_token_id=2)
        model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    model.to(dev).train()
    c = model.config
    assert c._attn_implementation == "sdpa", c._attn_implementation
    rope = getattr(c, "rope_parameters", None) or {}
    shape = {"arch": c.model_type, "vocab_size": c.vocab_size, "d_model": c.hidden_size,
             "n_layers": c.num_hidden_layers, "n_heads": c.num_attention_heads, "n_kv_heads": c.num_key_value_heads,
             "head_dim": c.head_dim, "d_ff": c.intermediate_size, "layer_norm_eps": c.rms_norm_eps,
             "tie_embeddings": c.tie_word_embeddings,
             "rope_theta": float(rope.get("rope_theta", getattr(c, "rope_theta", float("nan"))))}
    named = dict(model.named_parameters())  # the tied lm_head appears once, as in segtrain
    params = sum(p.numel() for p in named.values())

    def decays(name, p):
        return p.dim() >= 2 and not any(x in name for x in NO_DECAY)

    optimizer = torch.optim.AdamW(
        [{"params": [p for n, p in named.items() if decays(n, p)], "weight_decay": WEIGHT_DECAY},
         {"params": [p for n, p in named.items() if not decays(n, p)], "weight_decay": 0.0}],
        lr=LR, betas=BETAS, eps=EPS, fused=True)
    docs = read_split(os.path.join(a["store"], "train"))
    rates, losses, norms, loss_tokens, rss = [], [], [], [], []
    for step in range(a["warmup"] + a["steps"]):
        sync()
        start = time.perf_counter()
        batch = torch.from_numpy(np.stack([docs[(step * B + b) % len(docs)][:L] for b in range(B)]).astype(np.int64))
        batch = batch.to(dev, non_blocking=cuda)
        with torch.autocast(device_type=a["device"], dtype=torch.bfloat16, enabled=a["precision"] == "bf16"):
            # labels = the inputs: transformers shifts them, the mean over B x (L - 1) targets.
            loss = model(input_ids=batch, labels=batch, use_cache=False).loss
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        norms.append(grad_norm.item())
        sync()
        rates.append(B * L / (time.perf_counter() - start))
        loss_tokens.append(B * (L - 1))
        rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
    result = {"step_tokens_per_s": rates, "loss": losses, "grad_norm": norms, "loss_tokens": loss_tokens,
              "train_peak_rss_mb": rss[-1], "params": params, "model": shape,
              "torch": torch.__version__, "transformers": __import__("transformers").__version__}
    if cuda:
        result["peak_gpu_mb"] = torch.cuda.max_memory_allocated(dev) / 2 ** 20
    pathlib.Path(out).write_text(json.dumps(result))


# --- the benchmark --------------------------------------------------------------------


def probe(args):
    """None when the device can run, else why not (the cuda checks run in a child: no torch here)."""
    if not args.segtrain.exists():
        raise SystemExit(f"smollm2_bench: {args.segtrain} is not built")
    if args.device != "cuda":
        return None
    code = ("import json, torch; print(json.dumps([torch.__version__, torch.version.cuda, "
            "torch.cuda.device_count() if torch.version.cuda and torch.cuda.is_available() else 0, "
            "torch.cuda.get_device_name(0) if torch.version.cuda and torch.cuda.is_available() else None]))")
    version, cuda, count, name = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                                           text=True, check=True).stdout)
    if not cuda:
        return f"torch {version} ({sys.executable}) has no CUDA: run in the CUDA configuration (SEGTRAIN_CUDA=1)"
    if not count:
        return "no CUDA device visible"
    if "CUDA yes" not in subprocess.run([str(args.segtrain), "--version"], capture_output=True, text=True).stdout:
        return f"{args.segtrain} is built without CUDA (make build-cuda, BUILD_DIR=build-cuda)"
    args.gpu = name
    return None


def sha256(path):
    import hashlib

    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()[:16]


def ratio_stats(a, b):
    ratios = [x / y for x, y in zip(a, b)]
    return {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
            "max": round(max(ratios), 3), "rounds": [round(r, 3) for r in ratios]}


def bench(args):
    benchmark = "gpu_smollm2_train" if args.device == "cuda" else "smollm2_train"
    reason = probe(args)
    if reason:
        print(json.dumps({"benchmark": benchmark, "skipped": reason}, indent=1))
        return
    binary = sha256(args.segtrain)
    runs = {"segtrain": [], "transformers": []}
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="segtrain-smollm2-bench-") as work:
        store = os.path.join(work, "store")
        write_store(store, args)
        for r in range(args.rounds):
            order = ("segtrain", "transformers") if r % 2 == 0 else ("transformers", "segtrain")
            for who in order:
                fn = run_segtrain if who == "segtrain" else run_transformers
                run = fn(work, store, args, str(r))
                runs[who].append(run)
                log(f"round {r} {who}: {run['tokens_per_s']:.1f} tokens/s (steps "
                    f"{', '.join(f'{x:.1f}' for x in run['step_tokens_per_s'])}), peak RSS training "
                    f"{run['train_peak_rss_mb']:.0f} MB, process {run['process_peak_rss_mb']:.0f} MB, loss "
                    f"{', '.join(f'{x:.4f}' for x in run['loss'])}")
    if sha256(args.segtrain) != binary:
        raise SystemExit(f"smollm2_bench: {args.segtrain} changed while the benchmark ran: run it again")
    parent_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    # Same work: parameters, loss tokens, shape, and from the same weights the same first step.
    seg, hf = runs["segtrain"], runs["transformers"]
    for who, rows in runs.items():
        for row in rows:
            if row["params"] != PARAMS:
                raise SystemExit(f"smollm2_bench: {who} has {row['params']} parameters, expected {PARAMS}")
            if row["loss_tokens"] != [args.micro_batch * (args.length - 1)] * (args.warmup + args.steps):
                raise SystemExit(f"smollm2_bench: {who} scored {row['loss_tokens']} tokens per step")
    for key in seg[0]["model"]:
        a, b = seg[0]["model"][key], hf[0]["model"][key]
        same = math.isclose(a, b, rel_tol=1e-6) if isinstance(a, float) else a == b
        if not same:
            raise SystemExit(f"smollm2_bench: model {key}: segtrain {a!r}, transformers {b!r}")
    loss_diff = max(abs(s["loss"][0] - h["loss"][0]) for s in seg for h in hf)
    norm_diff = max(abs(s["grad_norm"][0] - h["grad_norm"][0]) / h["grad_norm"][0] for s in seg for h in hf)
    last_diff = max(abs(s["loss"][-1] - h["loss"][-1]) for s in seg for h in hf)
    if args.init == "hf" and args.precision == "fp32" and (loss_diff > LOSS_TOLERANCE or norm_diff > LOSS_TOLERANCE):
        raise SystemExit(f"smollm2_bench: the first step differs: loss by {loss_diff:.2e}, gradient norm by "
                         f"{norm_diff:.2e} (relative): the two loops do not do the same work")

    seg_rate = [r["tokens_per_s"] for r in seg]
    hf_rate = [r["tokens_per_s"] for r in hf]
    seg_rss = [r["train_peak_rss_mb"] for r in seg]
    hf_rss = [r["train_peak_rss_mb"] for r in hf]
    seg_proc = [r["process_peak_rss_mb"] for r in seg]
    hf_proc = [r["process_peak_rss_mb"] for r in hf]
    speed, memory, process = ratio_stats(seg_rate, hf_rate), ratio_stats(seg_rss, hf_rss), ratio_stats(seg_proc, hf_proc)
    row = {
        "model": "SmolLM2-135M", "init": args.init_note, "device": args.device, "precision": args.precision,
        "params": PARAMS, "length": args.length, "micro_batch": args.micro_batch, "threads": args.threads,
        "warmup_steps_excluded": args.warmup, "timed_steps": args.steps, "rounds": args.rounds,
        "segtrain_tokens_per_s": round(statistics.median(seg_rate), 2),
        "transformers_tokens_per_s": round(statistics.median(hf_rate), 2),
        "ratio": speed["median"], "ratio_min": speed["min"], "ratio_max": speed["max"],
        "segtrain_peak_rss_mb": round(statistics.median(seg_rss), 1),
        "transformers_peak_rss_mb": round(statistics.median(hf_rss), 1),
        "rss_ratio": memory["median"], "rss_ratio_min": memory["min"], "rss_ratio_max": memory["max"],
        "segtrain_process_peak_rss_mb": round(statistics.median(seg_proc), 1),
        "transformers_process_peak_rss_mb": round(statistics.median(hf_proc), 1),
        "process_rss_ratio": process["median"], "process_rss_ratio_min": process["min"],
        "process_rss_ratio_max": process["max"],
        "step1_loss_segtrain": round(seg[0]["loss"][0], 6), "step1_loss_transformers": round(hf[0]["loss"][0], 6),
        "step1_loss_max_abs_diff": float(f"{loss_diff:.3g}"), "step1_grad_norm_max_rel_diff": float(f"{norm_diff:.3g}"),
        "last_step_loss_max_abs_diff": float(f"{last_diff:.3g}"),
        "first_in_round": [("segtrain" if r % 2 == 0 else "transformers") for r in range(args.rounds)],
        "segtrain_rounds_tokens_per_s": [round(x, 2) for x in seg_rate],
        "transformers_rounds_tokens_per_s": [round(x, 2) for x in hf_rate],
        "ratio_rounds": speed["rounds"],
        "segtrain_rounds_peak_rss_mb": [round(x, 1) for x in seg_rss],
        "transformers_rounds_peak_rss_mb": [round(x, 1) for x in hf_rss],
        "rss_ratio_rounds": memory["rounds"],
    }
    if args.device == "cuda":
        row["gpu"] = args.gpu
        row["segtrain_peak_gpu_mb"] = round(statistics.median(r["peak_gpu_mb"] for r in seg), 1)
        row["transformers_peak_gpu_mb"] = round(statistics.median(r["peak_gpu_mb"] for r in hf), 1)
        row["gpu_ratio"] = round(row["segtrain_peak_gpu_mb"] / row["transformers_peak_gpu_mb"], 3)
    setup = (f"segtrain train vs transformers {hf[0]['transformers']} (torch {hf[0]['torch']}) LlamaForCausalLM eager "
             f"loop, SmolLM2-135M shape (llama, 30 x d576, 9 heads / 3 KV heads, SwiGLU 1536, RMSNorm, RoPE 1e5, tied "
             f"vocab 49152; {PARAMS:,} parameters), {args.init_note}; {args.precision} on {args.device}, "
             f"{args.threads} thread(s) each; {args.micro_batch} x {args.length} tokens per step, loss over all "
             f"{args.micro_batch * (args.length - 1)} next-token targets (segtrain's default train.loss_chunk_tokens "
             f"auto: LM head + cross-entropy over slices; transformers: the whole logits), AdamW fused (lr {LR} "
             f"constant, wd {WEIGHT_DECAY} on 2-D weights), clip {CLIP}; tokens/s over {args.steps} steps after "
             f"{args.warmup} warm-up step(s); peak RSS (MiB) = ru_maxrss at the end of the last step (weights' loading "
             f"included), process = wait4 of the whole process (segtrain's adds its final checkpoint and a one-window "
             f"eval); {args.rounds} interleaved rounds, the order alternated (segtrain first in even rounds); "
             f"ratios segtrain / transformers = median of the per-round ratios [min, max]; same work checked: equal "
             f"parameters, shape and loss tokens"
             + (", first-step loss and gradient norm equal (same weights, same batch)"
                if args.init == "hf" and args.precision == "fp32" else ""))
    print(json.dumps({"benchmark": benchmark, "setup": setup, "segtrain_sha256_16": binary,
                      "seconds": round(time.time() - started), "parent_peak_rss_mb": round(parent_rss, 1),
                      "results": [row]}, indent=1))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "loop":
        return transformers_loop(json.loads(sys.argv[2]), sys.argv[3])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("device", nargs="?", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", 5)))
    p.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", 1)))
    p.add_argument("--length", type=int)
    p.add_argument("--micro-batch", type=int)
    p.add_argument("--warmup", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--init", default="auto", choices=("auto", "hf", "random"))
    args = p.parse_args()
    for k, v in DEFAULTS[args.device].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    for k in ("rounds", "threads", "length", "micro_batch", "steps"):
        if getattr(args, k) < 1:
            raise SystemExit(f"smollm2_bench: --{k.replace('_', '-')} must be >= 1")
    if args.warmup < 0 or args.length < 2:
        raise SystemExit("smollm2_bench: --warmup must be >= 0 and --length >= 2")
    has_base = (BASE / "config.json").exists() and (BASE / "model.safetensors").exists()
    if args.init == "auto":
        args.init = "hf" if has_base else "random"
    if args.init == "hf" and not has_base:
        raise SystemExit(f"smollm2_bench: --init hf: {BASE} has no config.json/model.safetensors (make real-base)")
    args.init_note = (f"the real weights ({BASE.relative_to(ROOT) if BASE.is_relative_to(ROOT) else BASE}, hf: / "
                      f"from_pretrained)" if args.init == "hf" else
                      "random init of the same config" + ("" if has_base else f" ({BASE} absent: make real-base)"))
    build = pathlib.Path(os.environ.get("BUILD_DIR", "build-cuda" if args.device == "cuda" else "build"))
    args.segtrain = (build if build.is_absolute() else ROOT / build) / "trainer" / "segtrain"
    bench(args)


if __name__ == "__main__":
    main()
