"""Prints bench/results/*.json as markdown: first the headline figures with their
targets (training speed against PyTorch, peak memory by method, data pipeline
rates), then one table per benchmark with every figure. A benchmark that did not
run prints {"benchmark": ..., "skipped": "why"} and shows as "skipped: why".

  summarize.py [DIR] [--only NAME,...] [--brief]
    --only   only these results (file stems, e.g. gpu_speed_bench)
    --brief  the headline table alone (no per-benchmark tables)
"""
import argparse
import json
import pathlib

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("results", nargs="?", default="bench/results")
parser.add_argument("--only", default="", help="comma-separated result names (file stems)")
parser.add_argument("--brief", action="store_true", help="the headline table alone")
args = parser.parse_args()
results = pathlib.Path(args.results)
only = [n for n in args.only.split(",") if n]
for name in only:
    if not (results / f"{name}.json").exists():
        raise SystemExit(f"summarize: {results / name}.json does not exist")


def read(name):
    """The JSON of one result, or None when it is absent or not selected."""
    path = results / f"{name}.json"
    if (only and name not in only) or not path.exists():
        return None
    return json.loads(path.read_text())


def rows_of(data):
    if data is None or (isinstance(data, dict) and "skipped" in data):
        return []
    return data if isinstance(data, list) else data.get("results", [data])


def load(name):
    return rows_of(read(name))


def rate(x):
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g}"


def verdict(ok):
    return "✓ met" if ok else "✗ **not met**"


def pct(x):
    return f"{100 * x:.1f}%"


def spread(r):
    return f"**{r['ratio']:.2f}x** (median of {r['rounds']} rounds, {r['ratio_min']:.2f}..{r['ratio_max']:.2f})"


headline = []
for path in sorted(results.glob("*.json")):
    data = read(path.stem)
    if isinstance(data, dict) and "skipped" in data:
        headline.append((path.stem, f"skipped: {data['skipped']}", ""))
for r in load("train_speed_bench"):
    headline.append((
        f"training speed, {r['model']} (d {r['d_model']} x {r['layers']} layers, vocab {r['vocab']}, "
        f"{r['micro_batch']} x {r['length']} tokens, {r['threads']} thread{'s' if r['threads'] != 1 else ''})",
        f"segtrain {rate(r['segtrain_tokens_per_s'])} vs PyTorch {rate(r['pytorch_tokens_per_s'])} tokens/s = "
        f"{spread(r)}; MFU {pct(r['mfu_segtrain'])} vs {pct(r['mfu_pytorch'])} of "
        f"{r['matmul_peak_gflops']:.0f} GFLOP/s",
        f">= {r['target_ratio']}x: {verdict(r['ratio'] >= r['target_ratio'])}"))
for r in load("gpu_speed_bench"):
    mfu = (f"MFU {pct(r['mfu_segtrain'])} vs {pct(r['mfu_pytorch'])} of the measured bf16 matmul peak "
           f"{r['matmul_peak_gflops'] / 1000:.0f} TFLOP/s")
    if r["nominal_bf16_tflops"]:
        mfu += (f"; {pct(r['mfu_segtrain_nominal'])} vs {pct(r['mfu_pytorch_nominal'])} of {r['gpu_part']}'s "
                f"nominal {r['nominal_bf16_tflops']:g} TFLOP/s")
    target = f">= {r['target_ratio']}x: {verdict(r['ratio'] >= r['target_ratio'])}"
    if r["target_mfu"]:
        # Against the nominal peak when the GPU is in the table (the usual MFU), else the measured one.
        nominal = r["mfu_segtrain_nominal"] is not None
        got = r["mfu_segtrain_nominal"] if nominal else r["mfu_segtrain"]
        target += (f"; MFU >= {pct(r['target_mfu'])} ({'nominal' if nominal else 'measured'} peak): "
                   f"{verdict(got >= r['target_mfu'])}")
    headline.append((
        f"GPU training speed, {r['model']} ({r['params'] / 1e6:.0f}M: d {r['d_model']} x {r['layers']} layers, "
        f"{r['heads']} heads, vocab {r['vocab']}, {r['micro_batch']} x {r['length']} tokens, bf16, {r['gpu']})",
        f"segtrain {rate(r['segtrain_tokens_per_s'])} vs PyTorch {rate(r['pytorch_tokens_per_s'])} tokens/s = "
        f"{spread(r)}; {mfu}", target))
for name in ("smollm2_bench", "gpu_smollm2_bench"):
    for r in load(name):
        memory = (f"peak RSS {r['segtrain_peak_rss_mb']:.0f} vs {r['transformers_peak_rss_mb']:.0f} MiB = "
                  f"**{r['rss_ratio']:.2f}x** ({r['rss_ratio_min']:.2f}..{r['rss_ratio_max']:.2f})")
        if "gpu" in r:
            memory += (f"; peak GPU {r['segtrain_peak_gpu_mb']:.0f} vs {r['transformers_peak_gpu_mb']:.0f} MiB "
                       f"= {r['gpu_ratio']:.2f}x")
        headline.append((
            f"training speed and memory, {r['model']} ({r['params'] / 1e6:.0f}M, {r['init']}; {r['micro_batch']} x "
            f"{r['length']} tokens, {r['precision']} on {r.get('gpu', r['device'])}, {r['threads']} "
            f"thread{'s' if r['threads'] != 1 else ''}) against transformers",
            f"segtrain {r['segtrain_tokens_per_s']:.1f} vs transformers {r['transformers_tokens_per_s']:.1f} tokens/s = "
            f"{spread(r)}; {memory}; first-step loss equal to {r['step1_loss_max_abs_diff']:.1g}", ""))
for r in load("train_memory_bench"):
    headline.append((
        f"peak RSS, {r['model']} (d {r['d_model']} x {r['layers']} layers, micro-batch {r['micro_batch']}, "
        f"L_t {r['L_t']}, L_e {r['L_e']})",
        f"truncate {r['peak_rss_mb_truncate']:.0f} MB, chunk-0.25 {r['peak_rss_mb_chunk']:.0f} MB "
        f"(**{r['chunk_over_truncate']:.3f}x**), full {r['peak_rss_mb_full']:.0f} MB ({r['full_over_truncate']:.2f}x)",
        f"chunk <= {r['target_chunk_over_truncate']}x truncate: "
        f"{verdict(r['chunk_over_truncate'] <= r['target_chunk_over_truncate'])}"))
for r in load("loss_chunk_memory_bench"):
    headline.append((
        f"peak RSS of one training step, loss over slices (vocab {r['vocab']}, 1 x {r['length']} tokens, "
        f"d {r['d_model']}, {r['precision']})",
        f"whole logits {r['step_peak_rss_mb_whole']:.0f} MiB, slices of {r['auto_chunk_tokens']} tokens "
        f"{r['step_peak_rss_mb_chunked']:.0f} MiB: **{r['saved_mb']:.0f} MiB saved = {r['saved_over_logits']:.2f}x** "
        f"the {r['fp32_logits_mb']:.0f} MiB of fp32 logits",
        f"most of the logits' size: {verdict(r['saved_over_logits'] >= 0.5)}"))
for r in load("gpu_memory_bench"):
    headline.append((
        f"peak GPU memory, {r['model']} (d {r['d_model']} x {r['layers']} layers, micro-batch {r['micro_batch']}, "
        f"L_t {r['L_t']}, L_e {r['L_e']}, bf16, {r['gpu']})",
        f"truncate {r['peak_gpu_mb_truncate']:.0f} MiB, chunk-0.25 {r['peak_gpu_mb_chunk']:.0f} MiB "
        f"(**{r['chunk_over_truncate']:.3f}x**), full {r['peak_gpu_mb_full']:.0f} MiB ({r['full_over_truncate']:.2f}x)",
        f"chunk <= {r['target_chunk_over_truncate']}x truncate: "
        f"{verdict(r['chunk_over_truncate'] <= r['target_chunk_over_truncate'])}"))
for r in load("gpu_param_dtype_memory_bench"):
    headline.append((
        f"GPU memory a parameter, {r['mode']} (train.param_dtype {r['param_dtype']}, shard_optimizer "
        f"{str(r['shard_optimizer']).lower()}), {r['ranks']} rank{'s' if r['ranks'] != 1 else ''}, "
        f"{r['params'] / 1e6:.0f}M llama",
        f"optimizer {r['optimizer_bytes_per_param']:.3g} B (designed {r['designed_optimizer_bytes_per_param']:.3g}); "
        f"rank 0 peak {r['peak_gpu_mb_rank0']:.0f} MiB allocated ({r['peak_gpu_reserved_mb_rank0']:.0f} reserved) = "
        f"{r['device_bytes_per_param']:.3g} B (designed {r['designed_bytes_per_param']:.3g}, rest {r['rest_mb']:+.0f} MiB)",
        f"optimizer as designed: {verdict(r['optimizer_as_designed'])}; device >= designed: "
        f"{verdict(r['device_at_least_designed'])}"))
for r in load("gpu_lora_8b_bench"):
    if "peak_gpu_mb" not in r:
        continue
    headline.append((
        f"LoRA on one GPU, Llama-3-8B shape (random weights), chunk-0.25 L_t {r['train_length']} to L_e "
        f"{r['extended_length']}, rank {r['lora']['rank']} on q, k, v, o + norms, bf16 base",
        f"peak {r['peak_gpu_gib']:.1f} GiB allocated ({r['peak_gpu_reserved_mb'] / 1024:.1f} reserved) against the "
        f"table's {r['table_total_gib']:.1f} GiB; {rate(r['tokens_per_s'])} tokens/s",
        f"fits 24 GB: {verdict(r['fits_24gb'])}"))
data = load("data_bench")
samplers = [r for r in data if r.get("measure") == "sampler"]
if samplers:
    figures = ", ".join(f"{r['method']}{' (document targets)' if r['targets'] == 'document' else ''} "
                        f"{rate(r['tokens_per_s_1_core'])}" for r in samplers)
    slowest = min(r["tokens_per_s_1_core"] for r in samplers)
    headline.append(("samplers, one core (tokens/s)", figures, f">= 20 M: {verdict(slowest >= 20e6)}"))
for r in data:
    if r.get("measure", "").startswith("loader"):
        headline.append((f"{r['measure']} ({r['method']})", f"{rate(r['tokens_per_s_1_core'])} tokens/s", ""))
tokenize = [r for r in data if r.get("measure", "").startswith("tokenize")]
if tokenize:
    figures = ", ".join(f"{r['method']} {r['mb_per_s']:.1f} MB/s" for r in tokenize)
    ratio = next((r["segtrain_1_thread_over_spm_encode"] for r in tokenize if "segtrain_1_thread_over_spm_encode" in r), None)
    headline.append((tokenize[0]["measure"], figures + (f" (segtrain 1 thread = **{ratio:.2f}x** spm_encode)" if ratio else ""), ""))
for r in load("distributed_bench"):
    headline.append(("data parallel, " + r["setup"],
                     f"2 x 1 thread {rate(r['two_processes_1_thread_tokens_per_s'])} tokens/s = **{r['speedup']:.2f}x** "
                     f"1 x 1 thread; efficiency {100 * r['scaling_efficiency']:.0f}%", ""))

if headline:
    print("### Summary\n")
    print("| what | figure | target |")
    print("|---|---|---|")
    for row in headline:
        print("| " + " | ".join(row) + " |")
    print()

if args.brief:
    raise SystemExit(0)
for path in sorted(results.glob("*.json")):
    data = read(path.stem)
    if data is None:
        continue
    print(f"### {path.stem}\n")
    if isinstance(data, dict) and "skipped" in data:
        print(f"skipped: {data['skipped']}\n")
        continue
    if isinstance(data, dict) and data.get("setup"):
        print(data["setup"] + "\n")
    rows = rows_of(data)
    keys = []
    for row in rows:
        for k in row:
            if k not in keys and not isinstance(row[k], dict):
                keys.append(k)
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        cells = []
        for k in keys:
            v = row.get(k, "")
            if isinstance(v, list):
                v = ", ".join(f"{x:.4g}" if isinstance(x, float) else str(x) for x in v)
            cells.append(f"{v:.4g}" if isinstance(v, float) else str(v))
        print("| " + " | ".join(cells) + " |")
    print()
