#!/usr/bin/env bash
# What a step checkpoint costs the training loop of a sharded run on this
# machine: a Llama shape (BENCH_SHAPE d_model x layers, default 1024x16, about
# 270M parameters, vocab 32,000) with distributed.shard_optimizer on BENCH_RANKS
# (default "2 4") ranks of 1 thread through segtrain-launch, a checkpoint every 3
# of BENCH_STEPS (default 10) steps, written to this machine's disk (fsynced).
# Side by side in one run, each as its own run:
#   background  train.save_in_background: true (each rank copies its part to
#               host memory, training goes on while the thread writes)
#   blocking    train.save_in_background: false (each rank writes its part from
#               the live state; the step waits)
#   gathered    BENCH_BASELINE_BIN, a segtrain built before sharded checkpoints
#               (rank 0 gathers the whole optimizer state and writes it all while
#               the others wait in a barrier); left out when unset.
# Per run, from rank 0's metrics.jsonl: the seconds of each step (tokens a step /
# tokens_per_s); "held_s": the seconds the loop waited for each save (rank 0's
# checkpoint_wait_s of the step after it; the gathering baseline, which has no
# such count, waits for all of it: its step minus the median step that follows no
# save); "slower_s": the step after each save minus that median (the wait plus
# what the write's threads take from the step's cores); the run's seconds over all
# its steps against as many plain steps; rank 0's peak RSS.
# The ~1B shape the issue names does not fit this machine's 24 GiB at 2 ranks
# (fp32: 16 bytes a parameter a rank before any checkpoint). Prints JSON; run by
# bench/run.sh (`make bench`).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
BIN=$BUILD_DIR/trainer/segtrain
LAUNCH=$BUILD_DIR/launch/segtrain-launch
SHAPE=${BENCH_SHAPE:-1024x16}
STEPS=${BENCH_STEPS:-10}
RANKS=${BENCH_RANKS:-2 4}
LENGTH=64
WORK=$(mktemp -d "${BENCH_WORK_DIR:-/var/tmp}/segtrain-save-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
"$BENCH_PYTHON" -c "
import sys; sys.path.insert(0, 'bench')
from train_bench import write_store
write_store('$WORK/store', 32000, 16, 4096)"
d=${SHAPE%x*}
layers=${SHAPE#*x}
cat >"$WORK/run.yaml" <<YAML
run: {name: save-bench, output_dir: $WORK/run, threads: 1, device: cpu, log_level: warn}
model: {arch: llama, d_model: $d, n_layers: $layers, n_heads: 16, n_kv_heads: 4, d_ff: $((d * 11 / 4)),
        max_positions: $LENGTH}
data: {store: $WORK/store, train_length: $LENGTH, extended_length: $LENGTH}
train: {budget: {tokens: $((STEPS * 4 * LENGTH))}, micro_batch_size: 1, warmup_steps: 2, log_every: 1, checkpoint_every: 3,
        keep_last: 1, tensorboard: false}
distributed: {shard_optimizer: true}
eval: {lengths: [$LENGTH], max_sequences: 1, batch_size: 1}
YAML
modes="background blocking"
[[ -n ${BENCH_BASELINE_BIN:-} ]] && modes="$modes gathered"
for ranks in $RANKS; do
  for mode in $modes; do
    bin=$BIN
    sets=(--set train.save_in_background=$([[ $mode == background ]] && echo true || echo false))
    if [[ $mode == gathered ]]; then
      bin=$BENCH_BASELINE_BIN
      sets=()
    fi
    "$LAUNCH" --standalone --nproc-per-node "$ranks" -- "$bin" train "$WORK/run.yaml" \
      --set run.output_dir="$WORK/$ranks-$mode" --set train.grad_accum=$((4 / ranks)) "${sets[@]}" \
      >"$WORK/$ranks-$mode.log" 2>&1 || { cat "$WORK/$ranks-$mode.log" >&2; exit 1; }
    rm -rf "$WORK/$ranks-$mode/checkpoints" "$WORK/$ranks-$mode/final"  # the disk, before the next run
  done
done
"$BENCH_PYTHON" - "$WORK" "$SHAPE" "$LENGTH" "$modes" $RANKS <<'PY'
import json, statistics, sys
work, shape, length, modes, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(), sys.argv[5:]
d, layers = map(int, shape.split("x"))
d_ff = d * 11 // 4
params = layers * (2 * d * d + 2 * d * d // 4 + 3 * d * d_ff + 2 * d) + 2 * 32000 * d + d
def summary(run):
    rows = [json.loads(l) for l in open(f"{work}/{run}/metrics.jsonl")]
    seconds = {r["step"]: 4 * length / r["tokens_per_s"] for r in rows}  # 4 sequences a step in all
    after_save = [s for s in seconds if s > 1 and (s - 1) % 3 == 0]
    plain = statistics.median(t for s, t in seconds.items() if s > 1 and s not in after_save)
    steps = [s for s in seconds if s > 1]
    waits = {r["step"]: r.get("checkpoint_wait_s") for r in rows}
    slower = [round(seconds[s] - plain, 2) for s in after_save]
    return {"step_s": {str(s): round(t, 2) for s, t in seconds.items()},
            "plain_step_s": round(plain, 2),
            "held_s": [round(waits[s], 2) for s in after_save] if waits[after_save[0]] is not None else slower,
            "slower_s": slower,
            "extra_s_over_the_run": round(sum(seconds[s] for s in steps) - plain * len(steps), 2),
            "rank0_peak_rss_mb": rows[-1]["peak_rss_mb"], "saves": len(after_save)}
results = []
for n in ranks:
    runs = {mode: summary(f"{n}-{mode}") for mode in modes}
    row = {"setup": f"llama d{d}x{layers}, d_ff {d_ff}, vocab 32000 (~{params / 1e6:.0f}M parameters, fp32), "
                    f"{n} sharded ranks x 1 thread (gloo, loopback), 4 x {length} tokens a step, a checkpoint "
                    f"every 3 steps (~{params * 12 / 2**30:.1f} GiB, fsynced to this machine's disk)",
           **runs}
    if "gathered" in runs:
        for mode in ("background", "blocking"):
            row[f"{mode}_vs_gathered"] = {
                "held_s_ratio": round(statistics.mean(runs[mode]["held_s"]) / statistics.mean(runs["gathered"]["held_s"]), 3),
                "rank0_peak_rss_ratio": round(runs[mode]["rank0_peak_rss_mb"] / runs["gathered"]["rank0_peak_rss_mb"], 3)}
    results.append(row)
print(json.dumps({"benchmark": "checkpoint_save", "results": results}))
PY
