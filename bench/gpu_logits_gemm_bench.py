"""The LM head's three GEMMs with the vocabulary and the logits' rows 16-byte aligned or not, on the GPU.

segtrain's head (models/modules/lm_head_loss.h) runs a slice's 16-bit GEMMs (h W^T into the logits, and
d hidden = g W and d W = g^T h from their gradient g, written where the logits were) over head_gemm_width(V, bf16)
vocabulary rows (V rounded up to a multiple of 64; fp32 is not padded, the fp32 rows here show what it would
give), reading a copy of W with zero rows to that width. A [rows, V] tensor, as a PyTorch loop makes it, puts
GPT-2's rows (V = 50,257) at 2-byte offsets, and its odd V is a GEMM dimension, which cuBLAS's fastest kernels
do not take. For each layout:
  contiguous      [rows, V], rows V apart (a PyTorch loop's logits);
  padded_buffer   a [rows, V] view of a [rows, stride] buffer (segtrain's head until 2026-11-29: the rows
                  aligned, the GEMMs still V wide);
  padded_vocab    [rows, stride]: the vocabulary padded, as llm.c and Megatron pad it in the weights and
                  segtrain in its GEMMs' copy of W (V's GEMMs and more);
milliseconds of each GEMM (median of BENCH_REPEATS after warm-ups), TFLOP/s counting V's FLOPs, and the
largest difference of the padded buffer's results from the contiguous ones (the same GEMMs: a few ulps).

Shapes: GPT-2 medium's slice (1,024 tokens, the composite's auto slice of a trained head; d_model 1,024; V
50,257) in bf16 and fp32, its slice of 4,096 tokens in bf16 (the fused cross-entropy kernel's auto slice on
CUDA since 2026-11-30), and Llama-3's V (128,256: already aligned, a control). BENCH_DEVICE=cpu runs a tiny shape on the
CPU (a check of this script, not a measurement). Prints JSON; without a visible GPU,
{"benchmark": ..., "skipped": "why"}.
"""
import json
import os
import statistics
import time

import torch

NAME = "gpu_logits_gemm_bench"
ALIGNMENT = 64  # models/modules/lm_head_loss.h: kHeadGemmAlignment


def stride_of(vocab):
    return (vocab + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def timed(device, repeats, fn):
    """Median milliseconds of fn() over `repeats` calls, after two warm-ups."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def logits_tensor(layout, rows, vocab, dtype, device):
    if layout == "contiguous":
        return torch.empty(rows, vocab, dtype=dtype, device=device)
    if layout == "padded_buffer":
        return torch.empty(rows, stride_of(vocab), dtype=dtype, device=device)[:, :vocab]
    return torch.empty(rows, stride_of(vocab), dtype=dtype, device=device)  # padded_vocab


def shape_rows(device, repeats, rows, d_model, vocab, dtype):
    torch.manual_seed(0)
    h = torch.randn(rows, d_model, dtype=dtype, device=device)
    w_true = torch.randn(vocab, d_model, dtype=dtype, device=device) * 0.02
    out, results = [], {}
    for layout in ("contiguous", "padded_buffer", "padded_vocab"):
        logits = logits_tensor(layout, rows, vocab, dtype, device)
        w = w_true if layout != "padded_vocab" else torch.cat(
            [w_true, torch.zeros(stride_of(vocab) - vocab, d_model, dtype=dtype, device=device)])
        width = logits.size(1)
        gemms = {
            "logits = h W^T": lambda: torch.mm(h, w.t(), out=logits),
            "d hidden = g W": lambda: torch.mm(logits, w),
            "d W = g^T h": lambda: torch.mm(logits.t(), h),
        }
        torch.mm(h, w.t(), out=logits)
        results[layout] = [logits[:, :vocab].float().clone(), torch.mm(logits, w)[:, :].float(),
                           torch.mm(logits.t(), h)[:vocab].float()]
        for gemm, fn in gemms.items():
            ms = timed(device, repeats, fn)
            out.append({"dtype": str(dtype).removeprefix("torch."), "vocab": vocab, "rows": rows, "d_model": d_model,
                        "layout": layout, "row_stride": logits.stride(0), "gemm_width": width, "gemm": gemm,
                        "ms": round(ms, 4), "tflops": round(2 * rows * d_model * vocab / (ms / 1000) / 1e12, 1)})
    # The padded buffer computes the same GEMMs as the contiguous logits.
    difference = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
                     for a, b in zip(results["padded_buffer"], results["contiguous"]))
    for row in out:
        if row["layout"] == "padded_buffer":
            row["relative_difference_from_contiguous"] = difference
    return out


def main():
    device = os.environ.get("BENCH_DEVICE", "cuda")
    repeats = int(os.environ.get("BENCH_REPEATS", "20"))
    if device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"benchmark": NAME, "skipped": "no CUDA device is visible"}))
        return
    if device == "cuda":
        shapes = [(1024, 1024, 50257, torch.bfloat16), (1024, 1024, 50257, torch.float32),
                  (4096, 1024, 50257, torch.bfloat16), (512, 4096, 128256, torch.bfloat16)]
        card = torch.cuda.get_device_name()
    else:
        shapes = [(16, 32, 197, torch.float32), (48, 32, 197, torch.float32)]  # two row counts, as on the GPU
        card = "CPU (a check of the script, not a measurement)"
    rows = []
    with torch.no_grad():
        for shape in shapes:
            rows += shape_rows(device, repeats, *shape)
    # The headline: each GEMM's time with the padded buffer over the contiguous logits.
    for row in rows:
        if row["layout"] != "contiguous":
            base = next(r for r in rows if r["layout"] == "contiguous" and r["gemm"] == row["gemm"]
                        and r["dtype"] == row["dtype"] and r["vocab"] == row["vocab"]
                        and r["rows"] == row["rows"] and r["d_model"] == row["d_model"])
            row["contiguous_ms"] = base["ms"]  # the baseline the speedup is read against, said
            row["speedup_over_contiguous"] = round(base["ms"] / row["ms"], 2)
    setup = (f"{card}, torch {torch.__version__}: the LM head's GEMMs of one slice, median of {repeats} "
             f"after 2 warm-ups; TFLOP/s count the vocabulary's FLOPs")
    print(json.dumps({"benchmark": NAME, "setup": setup, "results": rows}, indent=1))


if __name__ == "__main__":
    main()
