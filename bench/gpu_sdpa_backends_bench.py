"""Which of PyTorch's SDPA kernels take grouped-query attention on the GPU, and at what memory.

SmolLM2-135M's attention shape (9 query heads, 3 key/value heads, head dim 64, batch 1, causal),
at 8,192 and 32,768 tokens, fp32 and bf16, with k/v passed as they are (`enable_gqa=True`) and
repeated to the query heads; for each kernel forced (flash, memory-efficient, cuDNN, math) and
for PyTorch's own choice: milliseconds of one forward and the peak memory it adds over q, k and v
(the caching allocator's), or why no kernel ran. The math kernel is skipped at 32,768 tokens,
except as PyTorch's own choice. This is what models/modules/attention.cpp's repeats_kv_heads rests on.
Prints JSON; without a visible GPU, {"benchmark": ..., "skipped": "why"}.
"""
import json
import time

import torch
import torch.nn.functional as F

NAME = "gpu_sdpa_backends_bench"
HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64
BACKENDS = ("auto", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")


def one(q, k, v, mode, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    row = {"length": q.size(2), "dtype": str(q.dtype).removeprefix("torch."), "kv": mode, "kernel": backend}
    try:
        with sdpa_kernel([getattr(SDPBackend, backend)]) if backend != "auto" else torch.no_grad():
            start = time.perf_counter()
            if mode == "enable_gqa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                group = HEADS // KV_HEADS
                y = F.scaled_dot_product_attention(
                    q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), is_causal=True)
            torch.cuda.synchronize()
            row["ms"] = round((time.perf_counter() - start) * 1000, 2)
        row["peak_added_mb"] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
        del y
    except RuntimeError as e:
        row["error"] = str(e).splitlines()[0][:160]
    return row


def main():
    if not torch.cuda.is_available():
        print(json.dumps({"benchmark": NAME, "skipped": "no CUDA device is visible"}))
        return
    import warnings

    warnings.filterwarnings("ignore")  # each refused kernel warns why; the row says so
    rows = []
    with torch.no_grad():
        for length in (8192, 32768):
            for dtype in (torch.float32, torch.bfloat16):
                q = torch.randn(1, HEADS, length, HEAD_DIM, device="cuda", dtype=dtype)
                k = torch.randn(1, KV_HEADS, length, HEAD_DIM, device="cuda", dtype=dtype)
                v = torch.randn(1, KV_HEADS, length, HEAD_DIM, device="cuda", dtype=dtype)
                for mode in ("enable_gqa", "repeated"):
                    for backend in BACKENDS:
                        if length > 8192 and backend == "MATH":
                            continue
                        one(q, k, v, mode, backend)  # warm-up: the first call of a kernel compiles or loads it
                        rows.append(one(q, k, v, mode, backend))
    setup = (f"{torch.cuda.get_device_name()}, torch {torch.__version__}: SDPA forward, {HEADS} query heads, "
             f"{KV_HEADS} key/value heads, head dim {HEAD_DIM}, batch 1, causal; the second of two calls")
    print(json.dumps({"benchmark": NAME, "setup": setup, "results": rows}, indent=1))


if __name__ == "__main__":
    main()
