#!/usr/bin/env bash
# Regenerates the seed corpora (tests/fuzz/corpus/<target>/) and the sharded HF
# fixture (tests/fuzz/fixtures/) from real files: what `segtrain synth`, `prepare`,
# `train`, `export` and `config check` write, what transformers and the
# safetensors package write (tests/fuzz/make_seeds.py), and the repository's
# own configs and tests/configs fixtures. Run from anywhere after `make build`;
# the output is committed, so neither the fuzz build nor the replay test needs
# this script.   Environment: SEGTRAIN_BIN (build/trainer/segtrain), PYTHON (.venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BIN=${SEGTRAIN_BIN:-$ROOT/build/trainer/segtrain}
PY=${PYTHON:-$ROOT/.venv/bin/python}
OUT=$ROOT/tests/fuzz/corpus
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1

for t in config experiment safetensors safetensors_index hf_config model_config megatron_idx store_meta jsonl trainer_state hf_tokenizer optimizer_state converters base_record adapter_config jsonl_zst parquet rng_state; do
  rm -rf "${OUT:?}/$t"
  mkdir -p "$OUT/$t"
done

# --- a tiny corpus, store and three tiny runs (one per architecture) --------------
cd "$WORK"
"$BIN" synth --out corpus --docs 12 --min-tokens 40 --max-tokens 120 --seed 7 >/dev/null 2>&1
"$BIN" prepare --input corpus/train.jsonl --out store --vocab-size 64 --valid-fraction 0.25 --threads 1 >/dev/null 2>&1
for arch in gpt2 gpt_neox bloom; do
  cat >"run_$arch.yaml" <<YAML
run: {name: seed-$arch, output_dir: runs/$arch, seed: 1, device: cpu, threads: 1}
model: {arch: $arch, d_model: 8, n_layers: 1, n_heads: 2}
data: {store: store, train_length: 16, extended_length: 32, sampler: {method: chunk, alpha: 0.5}}
train: {budget: {tokens: 256}, micro_batch_size: 2, warmup_steps: 1, checkpoint_every: 2, log_every: 1, tensorboard: false}
eval: {lengths: [16, 32], max_sequences: 2}
YAML
done
sed -i 's/model: {arch: gpt2,/model: {arch: gpt2, extension: {method: interpolate},/' run_gpt2.yaml
for arch in gpt2 gpt_neox bloom; do
  "$BIN" train "run_$arch.yaml" >/dev/null 2>&1
  "$BIN" config check "run_$arch.yaml" >"$OUT/config/resolved_$arch.yaml" 2>/dev/null
  cp "runs/$arch/final/model_config.json" "$OUT/model_config/$arch.json"
  cp "runs/$arch/final/trainer_state.json" "$OUT/trainer_state/final_$arch.json"
done
cp runs/gpt2/checkpoints/step-*/trainer_state.json "$OUT/trainer_state/step.json" 2>/dev/null || true
# A mixture (data.mixture): its resolved config and a state with a cursor and tokens a source.
"$BIN" train run_gpt_neox.yaml --set run.output_dir=runs/mixture \
  --set "data.mixture=[{name: a, weight: 3}, {name: b, weight: 1, extended_length: 16, sampler: {method: truncate}}]" \
  >/dev/null 2>&1
"$BIN" config check run_gpt_neox.yaml \
  --set "data.mixture=[{name: a, weight: 3}, {name: b, weight: 1, extended_length: 16, sampler: {method: truncate}}]" \
  >"$OUT/config/resolved_mixture.yaml" 2>/dev/null
cp runs/mixture/final/trainer_state.json "$OUT/trainer_state/final_mixture.json"
# A bf16 run on the CPU: its state records what its matmuls computed in (fp32 here, forced: fast).
SEGTRAIN_CPU_MATMUL=fp32 "$BIN" train run_gpt2.yaml --set run.output_dir=runs/bf16 --set train.precision=bf16 \
  >/dev/null 2>&1
cp runs/bf16/final/trainer_state.json "$OUT/trainer_state/final_bf16.json"
cp runs/gpt2/final/rng_state.json "$OUT/rng_state/final_gpt2.json"
# Converted runs from the gpt_neox run: LoRA (adapters and norms) and train.freeze.
"$BIN" train run_gpt_neox.yaml --set run.output_dir=runs/lora --set model.init=checkpoint:runs/gpt_neox/final \
  --set model.adapters.lora.rank=2 --set "model.adapters.lora.targets=[qkv, o]" \
  --set "train.trainable=[adapters, norms]" >/dev/null 2>&1
"$BIN" train run_gpt_neox.yaml --set run.output_dir=runs/freeze --set model.init=checkpoint:runs/gpt_neox/final \
  --set 'train.freeze=["*", "!*ln*"]' >/dev/null 2>&1
cp runs/lora/final/converters.json "$OUT/converters/lora.json"
cp runs/freeze/final/converters.json "$OUT/converters/freeze.json"
cp runs/lora/final/base.json "$OUT/base_record/lora.json"
"$BIN" export --model runs/lora --adapter --out export_lora_adapter >/dev/null 2>&1
cp export_lora_adapter/adapter_config.json "$OUT/adapter_config/segtrain_export_gpt_neox.json"
cp runs/gpt_neox/final/model.safetensors "$OUT/safetensors/segtrain_gpt_neox.safetensors"
last_step=$(ls -d runs/bloom/checkpoints/step-* | sort -t- -k2 -n | tail -1)
cp "$last_step/optimizer-00000-of-00001.safetensors" "$OUT/safetensors/segtrain_optimizer_bloom.safetensors"
cp "$last_step/optimizer-00000-of-00001.safetensors" "$OUT/optimizer_state/segtrain_bloom_rank0.safetensors"
"$BIN" export --model runs/gpt2 --out export_gpt2 >/dev/null 2>&1
"$BIN" export --model runs/bloom --out export_bloom --set model.extension.method=ntk_alibi --set model.extension.factor=2 >/dev/null 2>&1
for ext in interpolate ntk dynamic_ntk yarn llama3; do
  "$BIN" export --model runs/gpt_neox --out "export_neox_$ext" --set model.extension.method=$ext \
    --set model.extension.factor=2 >/dev/null 2>&1
  cp "export_neox_$ext/config.json" "$OUT/hf_config/segtrain_export_gpt_neox_$ext.json"
done
cp export_gpt2/config.json "$OUT/hf_config/segtrain_export_gpt2.json"
cp export_bloom/config.json "$OUT/hf_config/segtrain_export_bloom_ntk_alibi.json"
cp export_gpt2/model.safetensors "$OUT/safetensors/segtrain_export_gpt2.safetensors"
cp store/meta.json "$OUT/store_meta/meta.json"
for split in train valid; do
  "$PY" - "store/$split" "$OUT/megatron_idx/$split" <<'PY'
import struct, sys
idx = open(sys.argv[1] + ".idx", "rb").read()
bin_ = open(sys.argv[1] + ".bin", "rb").read()
open(sys.argv[2], "wb").write(struct.pack("<I", len(idx)) + idx + bin_)
PY
done
head -c 3000 corpus/valid.jsonl >"$OUT/jsonl/synth_valid_head.jsonl"
head -n 2 corpus/train.jsonl | gzip -9n >"$OUT/jsonl/synth_train.jsonl.gz"

# --- transformers, safetensors and hand-made edge cases ---------------------------
"$PY" "$ROOT/tests/fuzz/make_seeds.py" "$OUT" "$ROOT/tests/fuzz/fixtures" "$WORK/py"
"$PY" "$ROOT/tests/fuzz/make_adapter_seeds.py" "$OUT" "$WORK/peft"

# --- the repository's configs ------------------------------------------------------
cd "$ROOT"
cp configs/quickstart.yaml configs/quickstart-extend.yaml "$OUT/config/"
cp configs/experiments/*.yaml "$OUT/experiment/"
# tests/configs/broken: its `# args: --set k=v` lines become the NUL-separated overrides.
for f in tests/configs/broken/*.yaml; do
  "$PY" - "$f" "$OUT/config/broken_$(basename "$f")" <<'PY'
import re, sys
text = open(sys.argv[1]).read().replace("@STORE@", "store")
args = []
for line in text.splitlines():
    m = re.match(r"# args:(.*)", line)
    if m:
        args += re.findall(r"--set\s+(\S+)", m.group(1))
open(sys.argv[2], "wb").write(text.encode() + b"".join(b"\0" + a.encode() for a in args))
PY
done
# An experiment as tests/trainer/experiment_test.cpp writes them.
cat >"$OUT/experiment/tiny.yaml" <<'YAML'
experiment:
  name: tiny
  output_dir: runs/tiny
  factors: [2]
  methods: [da, chunk-0.5, prefix-0.5, randompos, pose]
  ootb: [interpolate, ntk, yarn]
  corpora:
    - {name: synthetic, synthetic: {docs: 40, min_tokens: 200, max_tokens: 400, seed: 3}, vocab_size: 128, valid_fraction: 0.2}
    - {name: given, store: store, base: hf:model}
  base: {set: {train.budget.tokens: 20000, train.lr: 1.0e-3}}
  extend: {set: {train.weight_decay: 0.01}}
run: {seed: 5, device: cpu}
model: {arch: gpt_neox, d_model: 32, n_layers: 2, n_heads: 4}
data: {train_length: 32}
train: {micro_batch_size: 4, warmup_steps: 2}
eval: {max_sequences: 4}
YAML
printf 'experiment:\n  factors: [2, 4]\n  corpora: [{name: s, synthetic: {docs: 20}}]\nmodel: {arch: bloom}\n\0train.lr=1e-3\0model.n_heads=8' \
  >"$OUT/experiment/with_overrides.yaml"
# --- compressed and columnar corpora ---------------------------------------------------------
# The jsonl seeds as Python's zstandard and pyarrow write them: one frame and two (one checksummed);
# Parquet row groups of 3 rows with nulls, and a zstd-compressed large_string column.
OUT="$OUT" "$PY" - <<'PYTHON'
import json, os, zstandard, pyarrow as pa, pyarrow.parquet as pq
out = os.environ["OUT"]
edge = open(f"{out}/jsonl/edge.jsonl", "rb").read()
open(f"{out}/jsonl_zst/edge.jsonl.zst", "wb").write(zstandard.ZstdCompressor(level=3).compress(edge))
docs = [json.loads(line)["text"] for line in open(f"{out}/jsonl/synth_valid_head.jsonl")][:8]
half = len(docs) // 2
frame = lambda part, **kw: zstandard.ZstdCompressor(**kw).compress("".join(json.dumps({"text": d}) + "\n" for d in part).encode())
open(f"{out}/jsonl_zst/two_frames.jsonl.zst", "wb").write(frame(docs[:half], write_checksum=True) + frame(docs[half:]))
table = pa.table({"id": list(range(len(docs))), "text": pa.array([d if i % 3 else None for i, d in enumerate(docs)])})
pq.write_table(table, f"{out}/parquet/row_groups.parquet", row_group_size=3, compression="none")
pq.write_table(pa.table({"text": pa.array(docs, pa.large_string())}), f"{out}/parquet/large_string_zstd.parquet", compression="zstd")
PYTHON
echo "seeds: $(find "$OUT" -type f | wc -l) files, $(du -sh "$OUT" | cut -f1) in tests/fuzz/corpus"
