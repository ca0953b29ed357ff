#!/usr/bin/env bash
# ZeRO-1 on this machine: the same 2-rank run (gpt2, vocab 32,000, d_model x
# layers of BENCH_SHAPES) with distributed.shard_optimizer true vs false, side
# by side, through segtrain-launch with 1 thread a rank. Per rank (rank 0's metrics.jsonl, whose
# peak is that of the training steps, before the final checkpoint): optimizer
# state, peak RSS, and tokens/s after the first step. Prints JSON; run by
# bench/run.sh (`make bench`). BENCH_STEPS (default 8) steps a run.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
BIN=$BUILD_DIR/trainer/segtrain
LAUNCH=$BUILD_DIR/launch/segtrain-launch
STEPS=${BENCH_STEPS:-8}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$BENCH_PYTHON" -c "
import sys; sys.path.insert(0, 'bench')
from train_bench import write_store
write_store('$WORK/store', 32000, 32, 1024)"
# d_model x layers: the issue's example, and a wider model whose parameters outweigh the process's
# fixed ~0.5 GB (LibTorch, activations, logits) as they do at 1B+ on a GPU.
SHAPES=${BENCH_SHAPES:-512x8 1024x12}
for shape in $SHAPES; do
  d=${shape%x*}
  layers=${shape#*x}
  cat >"$WORK/run-$shape.yaml" <<YAML
run: {name: zero-bench, output_dir: $WORK/run, threads: 1, device: cpu, log_level: warn}
model: {arch: gpt2, d_model: $d, n_layers: $layers, n_heads: 8, max_positions: 256}
data: {store: $WORK/store, train_length: 256, extended_length: 256}
train: {budget: {tokens: $((STEPS * 512))}, micro_batch_size: 1, warmup_steps: 2, log_every: 1, checkpoint_every: 0,
        tensorboard: false}
eval: {lengths: [256], max_sequences: 1, batch_size: 1}
YAML
  for mode in plain sharded; do
    shard=false
    [[ $mode == sharded ]] && shard=true
    "$LAUNCH" --standalone --nproc-per-node 2 -- "$BIN" train "$WORK/run-$shape.yaml" \
      --set run.output_dir="$WORK/$shape-$mode" --set distributed.shard_optimizer=$shard >"$WORK/$mode.log" 2>&1 ||
      { cat "$WORK/$mode.log" >&2; exit 1; }
  done
done
"$BENCH_PYTHON" - "$WORK" $SHAPES <<'PY'
import json, sys
work, shapes = sys.argv[1], sys.argv[2:]
def summary(run):
    rows = [json.loads(l) for l in open(f"{work}/{run}/metrics.jsonl")]
    rates = [r["tokens_per_s"] for r in rows[1:]]
    return {"optimizer_state_mb": rows[-1]["optimizer_state_mb"], "peak_rss_mb": rows[-1]["peak_rss_mb"],
            "tokens_per_s": round(len(rates) / sum(1 / r for r in rates), 1), "steps": len(rows)}
results = []
for shape in shapes:
    plain, sharded = summary(f"{shape}-plain"), summary(f"{shape}-sharded")
    d, layers = map(int, shape.split("x"))
    params = 12 * layers * d * d + 32000 * d + 256 * d
    ratio = lambda key: round(sharded[key] / plain[key], 3)
    results.append({
        "setup": f"gpt2 d{d}x{layers}, vocab 32000 (~{params / 1e6:.0f}M parameters), 2 ranks x 1 thread (gloo, loopback), "
                 "1 x 256 tokens a rank a step, fp32",
        "plain": plain, "sharded": sharded,
        "optimizer_state_ratio": ratio("optimizer_state_mb"), "peak_rss_ratio": ratio("peak_rss_mb"),
        "tokens_per_s_ratio": ratio("tokens_per_s"),
        "targets": {"optimizer_state_ratio": "<= 0.55", "peak_rss_ratio": "<= 0.80", "tokens_per_s_ratio": ">= 0.9"}})
print(json.dumps({"benchmark": "sharded_optimizer", "results": results}))
PY
