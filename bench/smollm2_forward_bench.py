"""Evaluation speed on the real base: one L-token forward of SmolLM2-135M (fp32, CPU),
segtrain vs transformers, printed as JSON.

  smollm2_forward_bench.py [--length 32768] [--rounds 3] [--threads 2]

Evaluation dominates the real-base study (docs/results/smollm2): every row scores
four 32,768-token windows. This measures what one such window costs each program.

Both sides score the same window: the first L tokens of one long document (the
kernel corpus's first file when runs/corpora/linux-c.jsonl exists, else this
repository's own sources concatenated), tokenized with the base's tokenizer.json.
- segtrain: `segtrain eval --model hf:BASE --data STORE --split train --lengths L
  --max-sequences 1 --precision fp32`; the time is eval.json's perplexity_seconds (the
  evaluation pass alone: the forward, the LM head and the loss, no loading).
- transformers: LlamaForCausalLM.from_pretrained(BASE, float32, attn_implementation
  "sdpa") in its own process; the time is `model(ids, labels=ids)` under no_grad
  (transformers' own shifted mean cross-entropy over the whole logits).
Each round runs both, the order alternated (segtrain first in even rounds), each
process on --threads threads (torch.set_num_threads / OMP_NUM_THREADS). The check:
both perplexities equal to 1e-3 relative (the same tokens and the same model). The
figures: each side's median over the rounds with min and max, and the median of the
per-round ratios segtrain / transformers (below 1: segtrain is faster).

Environment: BUILD_DIR (default build), SMOLLM2_BASE (default runs/bases/smollm2-135m:
`make real-base`). Without the base it prints {"benchmark": ..., "skipped": "why"}.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "smollm2_forward"


def long_text(min_chars):
    corpus = os.path.join(ROOT, "runs", "corpora", "linux-c.jsonl")
    if os.path.exists(corpus):
        with open(corpus) as f:
            for line in f:
                text = json.loads(line)["text"]
                if len(text) >= min_chars:
                    return text, "the first file of runs/corpora/linux-c.jsonl"
    parts = []
    for pattern in ("**/*.cpp", "**/*.h"):
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            if "/build" in path or "/.venv" in path or "/runs/" in path:
                continue
            with open(path, errors="replace") as f:
                parts.append(f.read())
    return "\n".join(parts), "this repository's *.cpp and *.h concatenated"


def transformers_child(args):
    """One transformers forward (a child process): prints {"seconds", "ppl"}."""
    import torch
    from transformers import LlamaForCausalLM

    torch.set_num_threads(args.threads)
    ids = torch.tensor([json.load(open(args.ids))], dtype=torch.long)
    model = LlamaForCausalLM.from_pretrained(args.base, torch_dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    with torch.no_grad():
        started = time.perf_counter()
        out = model(ids, labels=ids)
        seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "ppl": float(torch.exp(out.loss))}))


def run_segtrain(args, segtrain, store, work):
    out = os.path.join(work, "eval.json")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    cmd = [segtrain, "eval", "--model", "hf:" + args.base, "--data", store, "--split", "train",
           "--lengths", str(args.length), "--max-sequences", "1", "--precision", "fp32", "--out", out]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    j = json.load(open(out))
    return {"seconds": j["perplexity_seconds"], "ppl": j["results"][0]["ppl"]}


def run_transformers(args, ids_file):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    cmd = [sys.executable, os.path.abspath(__file__), "child", "--base", args.base, "--ids", ids_file,
           "--threads", str(args.threads)]
    done = subprocess.run(cmd, check=True, env=env, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


DEFAULT_BASE = os.environ.get("SMOLLM2_BASE", os.path.join(ROOT, "runs", "bases", "smollm2-135m"))


def segtrain_binary(base, name):
    """$BUILD_DIR's segtrain, or None after printing why the benchmark `name` is skipped."""
    segtrain = os.path.join(ROOT, os.environ.get("BUILD_DIR", "build"), "trainer", "segtrain")
    for needed, why in ((os.path.join(base, "config.json"), "no real base (make real-base)"),
                        (segtrain, "no segtrain binary (make build)")):
        if not os.path.exists(needed):
            print(json.dumps({"benchmark": name, "skipped": f"{why}: {needed} is missing"}))
            return None
    return segtrain


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", default="bench", choices=["bench", "child"])
    p.add_argument("--length", type=int, default=32768)
    p.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", "3")))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--base", default=DEFAULT_BASE)
    p.add_argument("--ids")
    args = p.parse_args()
    if args.mode == "child":
        return transformers_child(args)
    segtrain = segtrain_binary(args.base, NAME)
    if not segtrain:
        return
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(args.base, "tokenizer.json"))
    text, source = long_text(args.length * 6)
    work = tempfile.mkdtemp(prefix="forward-bench-")
    # The store segtrain reads: the one document, every document in the train split.
    doc = os.path.join(work, "doc.jsonl")
    with open(doc, "w") as f:
        f.write(json.dumps({"text": text}) + "\n")
    store = os.path.join(work, "store")
    subprocess.run([segtrain, "prepare", "--input", doc, "--out", store, "--tokenizer", args.base,
                    "--valid-fraction", "0"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    if len(ids) < args.length:
        print(json.dumps({"benchmark": NAME, "skipped": f"{source} has {len(ids)} tokens, below {args.length}"}))
        return
    ids_file = os.path.join(work, "ids.json")
    json.dump(ids[: args.length], open(ids_file, "w"))

    rounds = []
    for r in range(args.rounds):
        sides = ["segtrain", "transformers"] if r % 2 == 0 else ["transformers", "segtrain"]
        got = {}
        for side in sides:
            got[side] = run_segtrain(args, segtrain, store, work) if side == "segtrain" else run_transformers(args, ids_file)
        got["ratio"] = got["segtrain"]["seconds"] / got["transformers"]["seconds"]
        rounds.append(got)
        print(json.dumps({"round": r, **got}), file=sys.stderr)
    ppl_s, ppl_t = rounds[0]["segtrain"]["ppl"], rounds[0]["transformers"]["ppl"]
    print(json.dumps({
        "benchmark": NAME,
        "length": args.length,
        "threads": args.threads,
        "text": source,
        "rounds": rounds,
        "segtrain_seconds": spread([r["segtrain"]["seconds"] for r in rounds]),
        "transformers_seconds": spread([r["transformers"]["seconds"] for r in rounds]),
        "ratio_segtrain_over_transformers": spread([r["ratio"] for r in rounds]),
        "ppl_segtrain": ppl_s,
        "ppl_transformers": ppl_t,
        "same_ppl": abs(ppl_s - ppl_t) <= 1e-3 * ppl_t,
    }, indent=2))


if __name__ == "__main__":
    main()
