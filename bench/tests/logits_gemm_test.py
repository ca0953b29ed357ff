"""bench/gpu_logits_gemm_bench.py in its CPU mode (two tiny shapes), so that it cannot fail first on a GPU:
every layout times every GEMM, the padded buffer's rows lie 256 elements apart for a vocabulary of 197 (the
multiple of 64 above it, models/modules/lm_head_loss.h) and compute the contiguous GEMMs' results, and
without a visible GPU the script says it skipped.

  logits_gemm_test.py --python PYTHON
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402


def run(python, **env):
    done = subprocess.run([python, str(ROOT / "bench/gpu_logits_gemm_bench.py")], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)
    check(done.returncode == 0, f"the bench exits 0 with {env} (stderr: {done.stderr[-300:]})")
    return json.loads(done.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    data = run(args.python, BENCH_DEVICE="cpu", BENCH_REPEATS="2")
    rows = data["results"]
    layouts = {r["layout"] for r in rows}
    gemms = {r["gemm"] for r in rows}
    check(layouts == {"contiguous", "padded_buffer", "padded_vocab"}, f"three layouts: {sorted(layouts)}")
    check(len(gemms) == 3 and len(rows) == 18, f"three GEMMs a layout, two row counts: {len(rows)} rows")
    stride = {r["layout"]: r["row_stride"] for r in rows}
    check(stride == {"contiguous": 197, "padded_buffer": 256, "padded_vocab": 256}, f"row strides {stride}")
    check(all(r["gemm_width"] == 197 for r in rows if r["layout"] != "padded_vocab"), "the buffer's GEMMs are V wide")
    padded = [r for r in rows if r["layout"] == "padded_buffer"]
    check(all(r["relative_difference_from_contiguous"] < 1e-5 for r in padded),
          f"the padded buffer computes the contiguous results: {padded[0]['relative_difference_from_contiguous']}")
    check(all(r["ms"] > 0 and "speedup_over_contiguous" in r for r in rows if r["layout"] != "contiguous"),
          "each padded layout's GEMM is timed against the contiguous one")
    # ... of its own shape: two shapes share dtype and vocabulary and differ in rows.
    for r in rows:
        if r["layout"] != "contiguous":
            base = [b for b in rows if b["layout"] == "contiguous" and b["gemm"] == r["gemm"] and b["rows"] == r["rows"]]
            check(len(base) == 1 and r["contiguous_ms"] == base[0]["ms"]
                  and r["speedup_over_contiguous"] == round(r["contiguous_ms"] / r["ms"], 2),
                  f"{r['layout']} {r['gemm']} at {r['rows']} rows against the contiguous GEMM of {r['rows']} rows")
    if not subprocess.run([args.python, "-c", "import torch; assert torch.cuda.is_available()"],
                          capture_output=True).returncode == 0:
        skipped = run(args.python)
        check(skipped == {"benchmark": "gpu_logits_gemm_bench", "skipped": "no CUDA device is visible"},
              f"without a GPU the bench says it skipped: {skipped}")
    finish()


if __name__ == "__main__":
    main()
