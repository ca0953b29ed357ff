"""bench/summarize.py on what a cut GPU call leaves: it never fails, and says what it could not show.

  summarize_test.py --python PYTHON

A whole LoRA/1B result and a speed result with the torch.compile reference show their headlines (figures and
verdicts), the composite, CUDA-graph and all-kernels variants theirs (graphs / compiled with its verdict; a failed variant
said); a file cut mid-way, an empty file, rows without the fields a headline needs, a result whose rows are
not rows, no rows at all, and a result named with --only that does not exist each show as a line saying so, the
other results still shown, exit 0.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402


LORA_ROW = {"phase": "lora", "device": "cuda", "shape": "llama-3-8b", "method": "lora", "train_length": 4096,
            "extended_length": 65536, "micro_batch": 1, "lora": {"rank": 16}, "tokens_per_s": 5000.0, "mfu": 0.3,
            "mfu_nominal": 0.25, "peak_gpu_mb": 18944.0, "peak_gpu_reserved_mb": 20480.0,
            "table_total_gib": 18.28, "base_load_s": 12.5, "start_to_step1_s": 30.1, "gpu": "NVIDIA H200",
            "target_gib": 22.0, "meets_target": True, "fits_24gb": True}
FULL_ROW = {"phase": "full-1b", "device": "cuda", "shape": "llama-3.2-1b", "method": "full", "train_length": 4096,
            "extended_length": 65536, "micro_batch": 4, "tokens_per_s": 40000.0, "mfu": 0.41, "mfu_nominal": 0.33,
            "peak_gpu_mb": 51200.0, "peak_gpu_reserved_mb": 55000.0, "base_load_s": 3.0, "gpu": "NVIDIA H200"}
SPEED_ROW = {"model": "gpt2-medium", "params": 355e6, "d_model": 1024, "layers": 24, "heads": 16, "vocab": 50257,
             "micro_batch": 8, "length": 1024, "gpu": "NVIDIA H200", "segtrain_tokens_per_s": 90000.0,
             "pytorch_tokens_per_s": 89000.0, "ratio": 1.01, "rounds": 3, "ratio_min": 0.99, "ratio_max": 1.02,
             "target_ratio": 1.0, "mfu_segtrain": 0.27, "mfu_pytorch": 0.27, "matmul_peak_gflops": 800000.0,
             "nominal_bf16_tflops": 989.0, "mfu_segtrain_nominal": 0.22, "mfu_pytorch_nominal": 0.22,
             "gpu_part": "H200", "target_mfu": 0.4, "compiled_tokens_per_s": 120000.0, "ratio_compiled": 0.75,
             "ratio_compiled_min": 0.74, "ratio_compiled_max": 0.76, "mfu_compiled": 0.36}


def summarize(python, folder, *extra):
    proc = subprocess.run([python, str(ROOT / "bench/summarize.py"), folder, *extra], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--python", default=sys.executable)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="summarize-test-") as d:
        folder = pathlib.Path(d)
        whole = {"benchmark": "gpu_lora_8b_bench", "setup": "s", "results": [LORA_ROW, FULL_ROW]}
        (folder / "gpu_lora_8b_bench.json").write_text(json.dumps(whole))
        (folder / "gpu_speed_bench.json").write_text(json.dumps({"benchmark": "gpu_train_speed", "results": [SPEED_ROW]}))
        code, out, err = summarize(args.python, d)
        check(code == 0, f"whole results: exit {code} {err[-800:]}")
        check("LoRA on one GPU, llama-3-8b shape" in out and "18.5 GiB allocated (20.0 reserved) against the table's "
              "18.3 GiB" in out and "reserved < 22 GiB: ✓ met" in out, "the LoRA row's headline")
        check("full fine-tuning on one GPU, llama-3.2-1b shape" in out and "MFU 41.0% of the measured peak (33.0% of "
              "nominal)" in out, "the 1B row's headline")
        check("torch.compile 120 K tokens/s, segtrain / compiled **0.75x** (0.74..0.76)" in out
              and ">= 1.0x compiled: ✗ **not met**" in out, "the compiled reference in the speed headline")
        # with the variants in the same rounds: their figures, each one / compiled's verdict where measured
        variants = dict(SPEED_ROW, composite_tokens_per_s=80000.0, ratio_composite=0.89, mfu_composite=0.24,
                        graph_tokens_per_s=126000.0, ratio_graph=1.4, mfu_graph=0.378, ratio_graph_compiled=1.05,
                        all_tokens_per_s=92000.0, ratio_all=1.02, mfu_all=0.276,
                        graph_all_tokens_per_s=117000.0, ratio_graph_all=1.3, mfu_graph_all=0.351,
                        ratio_graph_all_compiled=0.98)
        (folder / "gpu_speed_bench.json").write_text(json.dumps({"benchmark": "gpu_train_speed",
                                                                  "results": [variants]}))
        code, out, err = summarize(args.python, d, "--only", "gpu_speed_bench")
        check(code == 0 and "with ATen's composites 80 K tokens/s (0.89x segtrain's, MFU 24.0%)" in out
              and "with CUDA graphs 126 K tokens/s (1.40x segtrain's, MFU 37.8%), / compiled **1.05x**" in out
              and "graph >= 1.0x compiled: ✓ met" in out
              and "with CUDA graphs and SEGTRAIN_FUSED_KERNELS=all 117 K tokens/s (1.30x segtrain's, MFU 35.1%), "
                  "/ compiled **0.98x**" in out and "graph_all >= 1.0x compiled: ✗ **not met**" in out
              and "composite >= 1.0x" not in out
              and "with SEGTRAIN_FUSED_KERNELS=all (the kernels no GPU has run yet too) 92 K tokens/s (1.02x segtrain's, "
                  "MFU 27.6%)" in out, f"the variants in the speed headline: {out[-700:]}")
        failed = dict(SPEED_ROW, graph_error="segtrain: SEGTRAIN_CUDA_GRAPH=1 needs a CUDA device")
        (folder / "gpu_speed_bench.json").write_text(json.dumps({"benchmark": "gpu_train_speed",
                                                                  "results": [failed]}))
        code, out, err = summarize(args.python, d, "--only", "gpu_speed_bench")
        check(code == 0 and "with CUDA graphs: failed: segtrain: SEGTRAIN_CUDA_GRAPH=1 needs" in out
              and "graph >= 1.0x" not in out, f"a failed graph variant said: {out[-500:]}")
        (folder / "gpu_speed_bench.json").write_text(json.dumps({"benchmark": "gpu_train_speed",
                                                                  "results": [SPEED_ROW]}))
        # the kernels' bench: each kernel's step row is a headline, the shapes' rows the table
        kernels = {"benchmark": "gpu_kernels", "results": [
            {"kernel": "bias gradient", "case": "qkv", "tokens": 8192, "cols": 3072, "gelu": False, "aten_ms": 0.031,
             "kernel_ms": 0.015, "ratio": 2.07},
            {"kernel": "bias gradient", "case": "a GPT-2 medium step (24 blocks)", "aten_ms": 2.31, "kernel_ms": 1.1,
             "ratio": 2.1},
            {"kernel": "residual LayerNorm", "case": "one add and norm", "tokens": 8192, "cols": 1024, "aten_ms": 0.2,
             "kernel_ms": 0.25, "ratio": 0.8},
            {"kernel": "residual LayerNorm", "case": "a GPT-2 medium step (47 norms of 24 blocks)", "aten_ms": 4.8,
             "kernel_ms": 6.0, "ratio": 0.8}]}
        (folder / "gpu_kernel_bench.json").write_text(json.dumps(kernels))
        code, out, err = summarize(args.python, d, "--only", "gpu_kernel_bench")
        check(code == 0 and "| bias gradients, a GPT-2 medium step (24 blocks) | ATen 2.31 ms, the column-sum kernels "
              "1.10 ms = **2.10x** | faster than ATen's: ✓ met |" in out and "qkv" in out and "one add and norm" in out,
              f"the bias-gradient headline and table: {out[-900:]}")
        check("| residual add + LayerNorm, forward and backward, a GPT-2 medium step (47 norms of 24 blocks) | ATen 4.80 ms, the "
              "fused node 6.00 ms = **0.80x** | faster than ATen's: ✗ **not met** |" in out,
              f"the residual LayerNorm headline, a slower kernel said so: {out[-900:]}")
        # a row written before the kernel field: still a bias-gradient headline
        old = {"benchmark": "gpu_bias_gradient", "results": [kernels["results"][1] | {"kernel": None}]}
        del old["results"][0]["kernel"]
        (folder / "gpu_kernel_bench.json").write_text(json.dumps(old))
        code, out, err = summarize(args.python, d, "--only", "gpu_kernel_bench")
        check(code == 0 and "| bias gradients, a GPT-2 medium step (24 blocks) |" in out,
              f"a row without the kernel field: {out[-600:]}")
        (folder / "gpu_kernel_bench.json").unlink()

        cases = {
            "cut mid-way": json.dumps(whole)[:150],
            "empty": "",
            "rows without fields": json.dumps({"benchmark": "gpu_lora_8b_bench", "results": [{"phase": "lora"},
                                                                                             LORA_ROW]}),
            "rows that are not rows": json.dumps({"benchmark": "gpu_lora_8b_bench", "results": [1, "x", None]}),
            "results not a list": json.dumps({"benchmark": "gpu_lora_8b_bench", "results": "x"}),
            "no rows": json.dumps({"benchmark": "gpu_lora_8b_bench", "results": []}),
            "a list": json.dumps([LORA_ROW, {"train_length": 1}]),
            "a number": "3",
        }
        for what, text in cases.items():
            (folder / "gpu_lora_8b_bench.json").write_text(text)
            for extra in ((), ("--brief",), ("--only", "gpu_lora_8b_bench,gpu_speed_bench")):
                code, out, err = summarize(args.python, d, *extra)
                check(code == 0 and "Traceback" not in err, f"{what} {' '.join(extra)}: exit {code} {err[-600:]}")
                check("GPU training speed, gpt2-medium" in out, f"{what} {' '.join(extra)}: the other result shown")
            code, out, err = summarize(args.python, d)
            if what in ("cut mid-way", "empty"):
                check("unreadable: " in out and "is not a whole JSON result" in out, f"{what}: said unreadable")
            if what == "rows without fields":
                check("gpu_lora_8b_bench: incomplete row | KeyError: 'shape'" in out and "llama-3-8b shape" in out,
                      f"{what}: the incomplete row named, the whole one shown")
            if what == "no rows":
                check("### gpu_lora_8b_bench\n\nno rows" in out, f"{what}: said")
        (folder / "gpu_lora_8b_bench.json").unlink()
        code, out, err = summarize(args.python, d, "--only", "gpu_lora_8b_bench,gpu_speed_bench")
        check(code == 0 and "gpu_lora_8b_bench | no result: " in out and "does not exist" in out
              and "GPU training speed" in out, f"--only naming a missing result: exit {code}, said {err[-300:]}")
    finish()


if __name__ == "__main__":
    main()
