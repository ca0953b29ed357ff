"""bench/kernel_bench.cpp in its CPU mode (a small shape, ATen's calls on both sides), so that it cannot fail
first on a GPU: the bias gradients' four projections and their step's total, each side timed, the step the sum of
24 blocks of the four, the sides' sums equal; the residual LayerNorm's and RMSNorm's rows and their steps (24 and
16 of them), the sides' gradients equal (LayerNorm) or within fp32 rounding (RMSNorm); on a build without CUDA (or no visible GPU) the default device says it skipped; a wrong
argument is refused, exit 2.

  kernel_bench_test.py --build-dir BUILD
"""
import argparse
import json
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    args = parser.parse_args()
    exe = pathlib.Path(args.build_dir) / "bench" / "kernel_bench"
    done = subprocess.run([str(exe), "--device", "cpu"], capture_output=True, text=True, timeout=300)
    check(done.returncode == 0, f"--device cpu exits 0 (stderr: {done.stderr[-300:]})")
    if done.returncode == 0:
        data = json.loads(done.stdout)
        rows = data["results"]
        step = "a GPT-2 medium step (24 blocks)"
        norm_step = "a GPT-2 medium step (47 norms of 24 blocks)"
        llama_step = "a Llama-3.2-1B step (32 norms of 16 blocks)"
        check([(r["kernel"], r["case"]) for r in rows] ==
              [("bias gradient", c) for c in ("qkv", "proj", "fc (GELU)", "fc_out", step)] +
              [("residual LayerNorm", "one add and norm"), ("residual LayerNorm", norm_step),
               ("residual RMSNorm", "one add and norm"), ("residual RMSNorm", llama_step)],
              f"the four projections and their step, one add and norm and its step for each norm: "
              f"{[(r['kernel'], r['case']) for r in rows]}")
        # a step: GPT-2's ln2 of 24 blocks and ln1 of 23 (its final LayerNorm stays apart); Llama's 16, 15 and its final norm
        for one, total, blocks in ((rows[5], rows[6], 47), (rows[7], rows[8], 32)):
            check(one["aten_ms"] > 0 and one["kernel_ms"] > 0, f"{one['kernel']}'s sides timed")
            for side in ("aten_ms", "kernel_ms"):
                check(abs(total[side] - blocks * one[side]) <= 1e-3 * max(1.0, blocks * one[side]) + 4e-3,
                      f"its step's {side} {total[side]} = {blocks} x {one[side]}")
        # On the CPU the LayerNorm node computes with ATen's add and LayerNorm: the same gradient; the RMSNorm
        # node's fp32 formula is within fp32 rounding of the composite's autograd.
        check(rows[5]["largest_relative_difference"] == 0,
              f"LayerNorm: the sides' d x equal: {rows[5]['largest_relative_difference']}")
        check(rows[7]["largest_relative_difference"] < 1e-5,
              f"RMSNorm: the sides' d x agree: {rows[7]['largest_relative_difference']}")
        blocks = rows[:4]
        check(all(r["aten_ms"] > 0 and r["kernel_ms"] > 0 and r["ratio"] > 0 for r in blocks), "every side timed")
        check([r["gelu"] for r in blocks] == [False, False, True, False], "GELU's gradient with fc's bias only")
        for side in ("aten_ms", "kernel_ms"):
            total = 24 * sum(r[side] for r in blocks)
            check(abs(rows[4][side] - total) <= 1e-3 * max(1.0, total) + 4e-3,
                  f"the step's {side} {rows[4][side]} = 24 blocks of the four ({total:.4f})")
        # The CPU's sides are ATen's sum in fp32 both: the same sums.
        check(all(r["largest_relative_difference"] < 1e-5 for r in blocks),
              f"the sides' sums agree: {[r['largest_relative_difference'] for r in blocks]}")
    default = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    if default.returncode == 0 and '"skipped"' in default.stdout:
        check("no CUDA" in default.stdout or "no CUDA device" in default.stdout, f"says why: {default.stdout}")
    else:
        check(default.returncode == 0, f"the default device (cuda) runs where a GPU is: exit {default.returncode}")
    wrong = subprocess.run([str(exe), "--device", "tpu"], capture_output=True, text=True, timeout=60)
    check(wrong.returncode == 2 and "--device tpu: expected cuda or cpu" in wrong.stderr,
          f"a wrong device refused, exit 2: {wrong.returncode} {wrong.stderr}")
    finish()


if __name__ == "__main__":
    main()
