#!/usr/bin/env bash
# The quickstart (`make demo`): synthetic corpus -> token store -> tiny base model
# at L_t -> chunk-0.25 extension to 4 L_t -> perplexity of both at 1..4 x L_t.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/trainer/segtrain
OUT=runs/quickstart
mkdir -p "$OUT"

step() {
  local title=$1; shift
  printf '\n== %s\n$ segtrain %s\n' "$title" "$*" >&2
  "$BIN" "$@" || { rc=$?; echo "quickstart: '$title' failed with exit code $rc" >&2; exit "$rc"; }
}

"$BIN" --version
step "synthetic corpus" synth --out "$OUT/corpus" --docs 120
step "token store" prepare --input "$OUT/corpus/train.jsonl" "$OUT/corpus/valid.jsonl" --out "$OUT/store" --vocab-size 1024
step "check configs" config check configs/quickstart.yaml >"$OUT/base-config.yaml"
# --resume auto: a second `make demo` continues (finished runs train nothing more) instead of refusing.
step "pretrain the base at L_t=128" train configs/quickstart.yaml --resume auto
step "extend with chunk-0.25 to L_e=512" train configs/quickstart-extend.yaml --resume auto
step "evaluate the base at L_t" eval --model "$OUT/base/final" --data "$OUT/store" --lengths 128 --out "$OUT/base-native-eval.json"
step "evaluate the base out of the box (interpolated to 512)" eval --model "$OUT/base/final" --data "$OUT/store" --lengths 128,256,384,512 \
  --set model.extension.method=interpolate --set model.extension.factor=4 --out "$OUT/base-eval.json"
step "evaluate the extended model" eval --model "$OUT/chunk/final" --data "$OUT/store" --lengths 128,256,384,512 \
  --out "$OUT/chunk-eval.json"

# The comparison: perplexity on held-out documents at 1..4 x L_t.
.venv/bin/python - "$OUT/base-native-eval.json" "$OUT/base-eval.json" "$OUT/chunk-eval.json" <<'PY'
import json, sys
native, base, chunk = (json.load(open(p))["results"] for p in sys.argv[1:4])
print("\n== perplexity on held-out documents (lower is better)\n")
print("| model | " + " | ".join(f"L={r['length']}" for r in base) + " |")
print("|---|" + "---|" * len(base))
print("| base, trained at L_t=128 | " + f"{native[0]['ppl']:.2f} | " + "n/a (no positions) | " * (len(base) - 1))
for name, rows in (("base, table interpolated to 512, no training", base), ("chunk-0.25, extended to 512", chunk)):
    print(f"| {name} | " + " | ".join("-" if r["ppl"] is None else f"{r['ppl']:.2f}" for r in rows) + " |")
beyond = [(b["ppl"], c["ppl"]) for b, c in zip(base, chunk) if b["length"] > 128 and b["ppl"] and c["ppl"]]
wins = sum(c < b for b, c in beyond)
print(f"\nthe extended model beats the base at {wins} of {len(beyond)} lengths beyond L_t")
PY
