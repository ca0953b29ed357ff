"""Decoding speed on the real base after a long prompt: tokens/s of KV-cache steps of
SmolLM2-135M (fp32, CPU; CUDA with --device cuda), segtrain generate vs transformers'
generate, printed as JSON.

  smollm2_decode_bench.py [--prompt 16384] [--new 32] [--rounds 5] [--threads 2] [--device cpu]

Both sides read the same prompt (the first --prompt tokens of one long document, as
bench/smollm2_forward_bench.py takes them) and write --new tokens greedily, past EOS:
- segtrain: `segtrain generate --model BASE --prompt-ids ... --max-new-tokens N
  --ignore-eos --out J`; J's prefill_seconds (the prompt up to the first new token) and
  decode_seconds (the N-1 tokens after it, one cached step each);
- transformers: LlamaForCausalLM (fp32, sdpa) `generate(do_sample=False,
  min_new_tokens=N, max_new_tokens=N)` with a streamer that stamps each new token: the
  prefill is the time to the first new token, the decode the N-1 after it.
Each round runs both, in their own processes, the order alternated. The check: the same
new tokens (greedy on the same model). The figures: each side's decode tokens/s and
prefill seconds as the median over the rounds with min and max, and the median of the
per-round ratios of decode tokens/s segtrain / transformers (above 1: segtrain faster).

Environment: BUILD_DIR (default build), SMOLLM2_BASE (default runs/bases/smollm2-135m:
`make real-base`). Without the base it prints {"benchmark": ..., "skipped": "why"}.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smollm2_forward_bench import DEFAULT_BASE, long_text, segtrain_binary, spread  # noqa: E402

NAME = "smollm2_decode"


def transformers_child(args):
    """One transformers generate (a child process): prints {"prefill_seconds", "decode_seconds", "ids"}."""
    import torch
    from transformers import LlamaForCausalLM
    from transformers.generation.streamers import BaseStreamer

    class Stamps(BaseStreamer):
        def __init__(self):
            self.times, self.calls = [], 0

        def put(self, value):  # first the prompt, then each new token
            self.calls += 1
            if self.calls > 1:
                self.times.append(time.perf_counter())

        def end(self):
            pass

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    ids = torch.tensor([json.load(open(args.ids))], dtype=torch.long, device=device)
    model = LlamaForCausalLM.from_pretrained(args.base, torch_dtype=torch.float32, attn_implementation="sdpa")
    model.to(device).eval()
    stamps = Stamps()
    with torch.no_grad():
        started = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=args.new,
                             min_new_tokens=args.new, streamer=stamps, pad_token_id=0)
    new = out[0, ids.size(1):].tolist()
    print(json.dumps({"prefill_seconds": stamps.times[0] - started, "decode_seconds": stamps.times[-1] - stamps.times[0],
                      "decoded_tokens": len(stamps.times) - 1, "ids": new}))


def run_segtrain(args, segtrain, ids, work):
    out = os.path.join(work, "generate.json")
    cmd = [segtrain, "generate", "--model", args.base, "--prompt-ids", ",".join(map(str, ids)),
           "--max-new-tokens", str(args.new), "--ignore-eos", "--threads", str(args.threads),
           "--device", args.device, "--out", out]
    subprocess.run(cmd, check=True, env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)),
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    j = json.load(open(out))
    return {k: j[k] for k in ("prefill_seconds", "decode_seconds", "decoded_tokens")} | {"ids": j["output_ids"]}


def run_transformers(args, ids_file):
    cmd = [sys.executable, os.path.abspath(__file__), "child", "--base", args.base, "--ids", ids_file,
           "--threads", str(args.threads), "--new", str(args.new), "--device", args.device]
    done = subprocess.run(cmd, check=True, env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)),
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", default="bench", choices=["bench", "child"])
    p.add_argument("--prompt", type=int, default=16384)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", "5")))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--base", default=DEFAULT_BASE)
    p.add_argument("--ids")
    args = p.parse_args()
    if args.mode == "child":
        return transformers_child(args)
    segtrain = segtrain_binary(args.base, NAME)
    if not segtrain:
        return
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(json.dumps({"benchmark": NAME, "skipped": "no CUDA device is visible"}))
            return
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(args.base, "tokenizer.json"))
    text, source = long_text(args.prompt * 6)
    ids = tokenizer.encode(text, add_special_tokens=False).ids[: args.prompt]
    if len(ids) < args.prompt:
        print(json.dumps({"benchmark": NAME, "skipped": f"{source} has {len(ids)} tokens, below {args.prompt}"}))
        return
    work = tempfile.mkdtemp(prefix="decode-bench-")
    ids_file = os.path.join(work, "ids.json")
    json.dump(ids, open(ids_file, "w"))

    rounds = []
    for r in range(args.rounds):
        sides = ["segtrain", "transformers"] if r % 2 == 0 else ["transformers", "segtrain"]
        got = {}
        for side in sides:
            got[side] = run_segtrain(args, segtrain, ids, work) if side == "segtrain" else run_transformers(args, ids_file)
            got[side]["decode_tokens_per_s"] = got[side]["decoded_tokens"] / got[side]["decode_seconds"]
        got["ratio"] = got["segtrain"]["decode_tokens_per_s"] / got["transformers"]["decode_tokens_per_s"]
        got["same_tokens"] = got["segtrain"]["ids"] == got["transformers"]["ids"]
        rounds.append(got)
        print(json.dumps({"round": r, **{k: v for k, v in got.items()}}), file=sys.stderr)
    print(json.dumps({
        "benchmark": NAME,
        "prompt_tokens": args.prompt,
        "new_tokens": args.new,
        "threads": args.threads,
        "device": args.device,
        "text": source,
        "rounds": [{side: {k: v for k, v in r[side].items() if k != "ids"} for side in ("segtrain", "transformers")}
                   | {"ratio": r["ratio"]} for r in rounds],
        "segtrain_decode_tokens_per_s": spread([r["segtrain"]["decode_tokens_per_s"] for r in rounds]),
        "transformers_decode_tokens_per_s": spread([r["transformers"]["decode_tokens_per_s"] for r in rounds]),
        "segtrain_prefill_seconds": spread([r["segtrain"]["prefill_seconds"] for r in rounds]),
        "transformers_prefill_seconds": spread([r["transformers"]["prefill_seconds"] for r in rounds]),
        "decode_ratio_segtrain_over_transformers": spread([r["ratio"] for r in rounds]),
        "same_tokens": all(r["same_tokens"] for r in rounds),
    }, indent=2))


if __name__ == "__main__":
    main()
