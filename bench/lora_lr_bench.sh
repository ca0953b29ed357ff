#!/usr/bin/env bash
# The learning rate of an adapter run, measured: LoRA+ (rank 8, alpha 16 on q, k, v, o; norms and the
# tied embeddings trainable) on SmolLM2-135M with chunk-0.25 (L_t 256 from windows of 1,024), the same
# data and seed at each learning rate of LRS, then all weights trained at 2e-5 (the pretrained
# default) as the reference; each scored on the same held-out windows of 1,024 tokens. Prints one JSON
# line per run: {"trainable", "lr", "steps", "train_seconds", "loss_1024", "loss_256"} and the base's
# untrained loss first. Evidence for train.lr's auto value of adapter runs (trainer/config/config.h).
# Needs `make real-base` and a store tokenized with its tokenizer (STORE; `segtrain prepare --input
# runs/corpora/linux-c.jsonl --tokenizer runs/bases/smollm2-135m --out STORE`). About 20 minutes on 2 cores.
# Environment: STORE (required), BASE (runs/bases/smollm2-135m), LRS ("2e-5 1e-4 2e-4 5e-4 1e-3"),
#   TOKENS (65536), SEGTRAIN (BUILD_DIR/trainer/segtrain), OUT (a temporary folder, removed).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
: "${STORE:?STORE: a store tokenized with the tokenizer of the base}"
BASE=${BASE:-runs/bases/smollm2-135m}
LRS=${LRS:-2e-5 1e-4 2e-4 5e-4 1e-3}
TOKENS=${TOKENS:-65536}
SEGTRAIN=${SEGTRAIN:-$BUILD_DIR/trainer/segtrain}
[[ -f $BASE/config.json ]] || { echo "lora_lr_bench: no base at $BASE (make real-base)" >&2; exit 2; }
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
[[ -n ${OUT:-} ]] || trap 'rm -rf "$out"' EXIT

score() {  # score MODEL NAME: the held-out loss at 256 and 1,024 tokens, 16 windows each
  "$SEGTRAIN" eval --model "$1" --data "$STORE" --lengths 256,1024 --max-sequences 16 --precision fp32 \
    --out "$out/$2-eval.json" 2>"$out/$2-eval.log" || { tail -5 "$out/$2-eval.log" >&2; exit 1; }
  "$BENCH_PYTHON" -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; print(r[0]['loss'], r[1]['loss'])" \
    "$out/$2-eval.json"
}

read -r base256 base1024 < <(score "hf:$BASE" base)
echo "{\"trainable\": \"none (the base)\", \"lr\": 0, \"steps\": 0, \"train_seconds\": 0, \"loss_1024\": $base1024, \"loss_256\": $base256}"

train() {  # train NAME LR TRAINABLE [--set ...]   (TRAINABLE: train.trainable's groups; "" trains all weights)
  local name=$1 lr=$2 trainable=$3 start
  shift 3
  cat >"$out/$name.yaml" <<EOF
run: {name: $name, output_dir: $out/$name, seed: 1234}
model: {init: "hf:$BASE", arch: llama}
data: {store: $STORE, train_length: 256, extended_length: 1024, sampler: {method: chunk, alpha: 0.25}}
train: {budget: {tokens: $TOKENS}, micro_batch_size: 4, lr: $lr, min_lr: $(awk "BEGIN {print $lr / 10}"),
        warmup_steps: 4, weight_decay: 0.0, ${trainable:+trainable: [$trainable], }checkpoint_every: 100000}
eval: {tasks: [perplexity], lengths: [256], max_sequences: 4}
EOF
  start=$SECONDS
  "$SEGTRAIN" train "$out/$name.yaml" "$@" >"$out/$name.log" 2>&1 || { tail -5 "$out/$name.log" >&2; exit 1; }
  local seconds=$((SECONDS - start)) steps
  steps=$(grep -o '"step": *[0-9]*' "$out/$name/metrics.jsonl" | tail -1 | grep -o '[0-9]*$')
  read -r l256 l1024 < <(score "$out/$name" "$name")
  echo "{\"trainable\": \"${trainable:-all weights}\", \"lr\": $lr, \"steps\": ${steps:-0}, \"train_seconds\": $seconds, \"loss_1024\": $l1024, \"loss_256\": $l256}"
}

lora=(--set model.adapters.lora.rank=8 --set model.adapters.lora.alpha=16 --set "model.adapters.lora.targets=[q, k, v, o]")
for lr in $LRS; do
  train "lora-plus-$lr" "$lr" "adapters, norms, embeddings" "${lora[@]}"
done
train all-weights-2e-5 2e-5 ""
