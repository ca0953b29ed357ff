#!/usr/bin/env bash
# Data-parallel scaling on this machine: the same run (same global batch) as
# 1 process x 1 thread and as 2 processes x 1 thread through segtrain-launch.
# Prints JSON; run by bench/run.sh (`make bench`).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
BIN=$BUILD_DIR/trainer/segtrain
LAUNCH=$BUILD_DIR/launch/segtrain-launch
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$BIN" synth --out "$WORK/corpus" --docs 60 >/dev/null 2>&1
"$BIN" prepare --input "$WORK/corpus/train.jsonl" --out "$WORK/store" --vocab-size 1024 >/dev/null 2>&1
cat >"$WORK/run.yaml" <<YAML
run: {name: dp-bench, output_dir: $WORK/run, threads: 1, device: cpu}
model: {arch: gpt2, d_model: 256, n_layers: 4, n_heads: 8}
data: {store: $WORK/store, train_length: 256, extended_length: 256}
train: {budget: {tokens: 262144}, micro_batch_size: 8, warmup_steps: 2, log_every: 1, checkpoint_every: 0, tensorboard: false}
eval: {lengths: [256], max_sequences: 1}
YAML
# Tokens per second over the run's steps after the first (warm-up) one.
rate() { "$BENCH_PYTHON" -c "import json,sys; r=[json.loads(l)['tokens_per_s'] for l in open(sys.argv[1])][1:]; print(len(r)/sum(1/x for x in r))" "$1"; }
"$BIN" train "$WORK/run.yaml" --set run.output_dir="$WORK/one" >/dev/null 2>&1
one=$(rate "$WORK/one/metrics.jsonl")
"$LAUNCH" --standalone --nproc-per-node 2 -- "$BIN" train "$WORK/run.yaml" --set run.output_dir="$WORK/two" \
  --set train.micro_batch_size=4 >/dev/null 2>&1
two=$(rate "$WORK/two/metrics.jsonl")
"$BENCH_PYTHON" -c "
import json
one, two = $one, $two
print(json.dumps({'benchmark': 'distributed', 'results': [{'setup': 'gpt2 d256x4, 8 x 256 tokens per step (8 on 1 rank or 4 + 4), gloo on loopback',
  'one_process_1_thread_tokens_per_s': round(one, 1), 'two_processes_1_thread_tokens_per_s': round(two, 1),
  'speedup': round(two / one, 3), 'scaling_efficiency': round(two / one / 2, 3)}]}))"
