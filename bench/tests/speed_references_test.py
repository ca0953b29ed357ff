"""bench/train_bench.py speed with the torch.compile reference beside the eager loop, on the CPU (the "tiny"
shape; compiled with the aot_eager backend: Dynamo and AOTAutograd without Inductor's code generation), so
that the GPU call's aggregation has run before it meets a GPU:

  speed_references_test.py --build-dir BUILD --python PYTHON

1. two rounds of segtrain, eager and compiled: the row holds the three programs' tokens/s and MFU side by side,
   ratio_compiled is the median of the rounds' segtrain / compiled ratios, MFU = tokens/s x flops_per_token /
   the measured peak for each, the order rotates (first_in_round), and speed() itself refuses a program whose
   parameter count differs;
   With the "composite" reference, segtrain again with SEGTRAIN_FUSED_KERNELS=0 in the same rounds: its
   tokens/s, MFU and ratio_composite (the median of composite / segtrain), the plain segtrain program's switch
   at its default (on); the "all" reference (SEGTRAIN_FUSED_KERNELS=all, which the CPU takes as its
   composites) likewise, ratio_all; and the
   "graph" reference (SEGTRAIN_CUDA_GRAPH=1), which segtrain refuses on the CPU: the row says why
   (graph_error, segtrain's own line), no graph figure, the other programs measured; so is "graph_all" (both
   switches); each variant / compiled round by round (ratio_{variant}_compiled) from runs as speed() collects
   them;
2. a compile that fails (a backend that does not exist): the row says so (compile_error) and still holds
   segtrain's and the eager loop's figures, exit 0.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402


def speed(args, rounds, backend, references="eager,compiled"):
    env = dict(os.environ, BUILD_DIR=args.build_dir, BENCH_DEVICE="cpu", BENCH_SHAPES="tiny",
               BENCH_ROUNDS=str(rounds), BENCH_REFERENCES=references, BENCH_COMPILE_BACKEND=backend)
    env.pop("SEGTRAIN_FUSED_KERNELS", None)
    proc = subprocess.run([args.python, str(ROOT / "bench/train_bench.py"), "speed"], env=env,
                          capture_output=True, text=True, cwd=ROOT)
    check(proc.returncode == 0, f"speed, backend {backend}: exit {proc.returncode} "
                                + ("" if proc.returncode == 0 else proc.stderr[-1500:]))
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", required=True)
    p.add_argument("--python", default=sys.executable)
    args = p.parse_args()

    result = speed(args, 2, "aot_eager", "eager,compiled,composite,graph,all,graph_all")
    if result:
        r = result["results"][0]
        check(r["model"] == "tiny" and r["rounds"] == 2, "the tiny shape, 2 rounds")
        for who in ("segtrain", "pytorch", "compiled", "composite", "all"):
            rate = r[f"{who}_tokens_per_s"]
            rounds = r[f"{who}_rounds_tokens_per_s"]
            check(rate > 0 and len(rounds) == 2 and abs(rate - statistics.median(rounds)) < 0.2,
                  f"{who}: {rate} tokens/s, the median of {rounds}")
            mfu = rate * r["flops_per_token"] / (r["matmul_peak_gflops"] * 1e9)
            key = {"segtrain": "mfu_segtrain", "pytorch": "mfu_pytorch", "compiled": "mfu_compiled",
                   "composite": "mfu_composite", "all": "mfu_all"}[who]
            check(abs(r[key] - mfu) < 1e-3, f"{who}: {key} {r[key]} = tokens/s x FLOPs / peak ({mfu:.4f})")
        ratios = [s / c for s, c in zip(r["segtrain_rounds_tokens_per_s"], r["compiled_rounds_tokens_per_s"])]
        check(abs(r["ratio_compiled"] - statistics.median(ratios)) < 2e-3
              and r["ratio_compiled_min"] <= r["ratio_compiled"] <= r["ratio_compiled_max"],
              f"ratio_compiled {r['ratio_compiled']} = the median of the rounds' ratios {ratios}")
        composite = [f / s for f, s in zip(r["composite_rounds_tokens_per_s"], r["segtrain_rounds_tokens_per_s"])]
        check(abs(r["ratio_composite"] - statistics.median(composite)) < 2e-3
              and r["ratio_composite_min"] <= r["ratio_composite"] <= r["ratio_composite_max"],
              f"ratio_composite {r['ratio_composite']} = the median of the rounds' composite / segtrain {composite}")
        every = [f / s for f, s in zip(r["all_rounds_tokens_per_s"], r["segtrain_rounds_tokens_per_s"])]
        check(abs(r["ratio_all"] - statistics.median(every)) < 2e-3,
              f"ratio_all {r['ratio_all']} = the median of the rounds' all / segtrain {every}")
        check("SEGTRAIN_FUSED_KERNELS=all" in result["setup"], "the setup says what all is")
        check(r["segtrain_fused_kernels"] is True and r["segtrain_cuda_graph"] == "0",
              "the plain segtrain program ran with the switches' defaults (fused kernels on, no graphs)")
        check("graph_tokens_per_s" not in r and "captures a CUDA device's step" in r.get("graph_error", ""),
              f"the graph program refused on the CPU, said: {r.get('graph_error')!r}")
        check("graph_all_tokens_per_s" not in r and "captures a CUDA device's step" in r.get("graph_all_error", ""),
              f"the graph_all program refused on the CPU, said: {r.get('graph_all_error')!r}")
        check("ratio_graph_compiled" not in r and "ratio_graph_all_compiled" not in r,
              "no graph / compiled ratio without a graph figure")
        every_compiled = [a / c for a, c in zip(r["all_rounds_tokens_per_s"], r["compiled_rounds_tokens_per_s"])]
        check(abs(r["ratio_all_compiled"] - statistics.median(every_compiled)) < 2e-3,
              f"ratio_all_compiled {r['ratio_all_compiled']} = the median of all_r / compiled_r {every_compiled}")
        check("SEGTRAIN_FUSED_KERNELS=0" in result["setup"], "the setup says what composite is")
        check(r["first_in_round"] == ["segtrain", "pytorch"], f"the order rotates: {r['first_in_round']}")
        check(r["compile_backend"] == "aot_eager" and r["compiled_first_step_s"] > 0, "the backend and first step")
        check("torch.compile" in result["setup"] and "ratio_compiled" in result["setup"], "the setup says so")
    # each variant / compiled, round by round (graph's and graph_all's: the figures that would make them the
    # default), from runs as speed() collects them; the CPU never has the graph programs'.
    sys.path.insert(0, str(ROOT / "bench"))
    os.environ.setdefault("BUILD_DIR", args.build_dir)
    import train_bench as tb
    runs = {tb.PROGRAM["graph"]: [{"tokens_per_s": t} for t in (110.0, 90.0, 126.0)],
            tb.PROGRAM["graph_all"]: [{"tokens_per_s": t} for t in (95.0, 105.0, 96.0)],
            "compiled": [{"tokens_per_s": t} for t in (100.0, 100.0, 120.0)]}
    fields = tb.variant_compiled_fields(runs)
    check(fields == {"ratio_graph_compiled": 1.05, "ratio_graph_compiled_rounds": [1.1, 0.9, 1.05],
                     "ratio_graph_all_compiled": 0.95, "ratio_graph_all_compiled_rounds": [0.95, 1.05, 0.8]},
          f"ratio_graph_compiled, ratio_graph_all_compiled: the medians of variant_r / compiled_r: {fields}")
    check(tb.variant_compiled_fields({"compiled": runs["compiled"]}) == {}, "nothing without a variant's program")
    check(tb.variant_compiled_fields({tb.PROGRAM["graph"]: runs[tb.PROGRAM["graph"]]}) == {},
          "nothing without the compiled program")
    failed = speed(args, 1, "no_such_backend")
    if failed:
        r = failed["results"][0]
        check("compile_error" in r and "compiled_tokens_per_s" not in r, "a failed compile is said, no figure")
        check(r["segtrain_tokens_per_s"] > 0 and r["pytorch_tokens_per_s"] > 0 and r["ratio"] > 0,
              "segtrain's and the eager loop's figures are kept")
    finish()


if __name__ == "__main__":
    main()
