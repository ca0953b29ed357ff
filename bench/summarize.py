"""Prints bench/results/*.json as markdown: first the headline figures with their
targets (training speed against PyTorch, peak memory by method, data pipeline
rates), then one table per benchmark with every figure. A benchmark that did not
run prints {"benchmark": ..., "skipped": "why"} and shows as "skipped: why".
It never fails on what a cut run leaves: a result file that is missing (named with --only), empty or cut
mid-way shows as a line saying so, and a row without a field its headline needs as "incomplete row" with
the field's name; the other rows and results are shown as usual (exit 0).

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


def read(name):
    """The JSON of one result, None when it is absent or not selected, or {"unreadable": why} when its
    file is empty or not JSON (a benchmark cut while writing it)."""
    path = results / f"{name}.json"
    if (only and name not in only) or not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return {"benchmark": name, "unreadable": f"{path} is not a whole JSON result ({str(e)[:80]})"}


def not_shown(data):
    """Why a result has no rows to show (skipped, unreadable), else None."""
    if isinstance(data, dict):
        if "skipped" in data:
            return f"skipped: {data['skipped']}"
        if "unreadable" in data:
            return f"unreadable: {data['unreadable']}"
    return None


def rows_of(data):
    if data is None or not_shown(data):
        return []
    rows = data if isinstance(data, list) else data.get("results", [data]) if isinstance(data, dict) else []
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


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
for name in only:
    if not (results / f"{name}.json").exists():
        headline.append((name, f"no result: {results / name}.json does not exist", ""))
for path in sorted(results.glob("*.json")):
    data = read(path.stem)
    if not_shown(data):
        headline.append((path.stem, not_shown(data), ""))


def headlines(name, make):
    """make(row) -> a headline (what, figure, target) or None, for each row of `name`; a row lacking a field
    (a benchmark of another version, or cut) becomes a line saying which, not a crash."""
    for r in load(name):
        try:
            line = make(r)
        except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError) as e:
            line = (f"{name}: incomplete row", f"{type(e).__name__}: {e}", "")
        if line:
            headline.append(line)


def train_speed(r):
    return (
        f"training speed, {r['model']} (d {r['d_model']} x {r['layers']} layers, vocab {r['vocab']}, "
        f"{r['micro_batch']} x {r['length']} tokens, {r['threads']} thread{'s' if r['threads'] != 1 else ''})",
        f"segtrain {rate(r['segtrain_tokens_per_s'])} vs PyTorch {rate(r['pytorch_tokens_per_s'])} tokens/s = "
        f"{spread(r)}; MFU {pct(r['mfu_segtrain'])} vs {pct(r['mfu_pytorch'])} of "
        f"{r['matmul_peak_gflops']:.0f} GFLOP/s",
        f">= {r['target_ratio']}x: {verdict(r['ratio'] >= r['target_ratio'])}")


def gpu_speed(r):
    mfu = (f"MFU {pct(r['mfu_segtrain'])} vs {pct(r['mfu_pytorch'])} of the measured bf16 matmul peak "
           f"{r['matmul_peak_gflops'] / 1000:.0f} TFLOP/s")
    if r["nominal_bf16_tflops"]:
        mfu += (f"; {pct(r['mfu_segtrain_nominal'])} vs {pct(r['mfu_pytorch_nominal'])} of {r['gpu_part']}'s "
                f"nominal {r['nominal_bf16_tflops']:g} TFLOP/s")
    figure = (f"segtrain {rate(r['segtrain_tokens_per_s'])} vs PyTorch eager {rate(r['pytorch_tokens_per_s'])} "
              f"tokens/s = {spread(r)}")
    target = f">= {r['target_ratio']}x eager: {verdict(r['ratio'] >= r['target_ratio'])}"
    if r.get("compiled_tokens_per_s"):
        figure += (f"; torch.compile {rate(r['compiled_tokens_per_s'])} tokens/s, segtrain / compiled "
                   f"**{r['ratio_compiled']:.2f}x** ({r['ratio_compiled_min']:.2f}..{r['ratio_compiled_max']:.2f}), "
                   f"compiled MFU {pct(r['mfu_compiled'])}")
        target += f"; >= 1.0x compiled: {verdict(r['ratio_compiled'] >= 1.0)}"
    elif r.get("compile_error"):
        figure += f"; torch.compile reference failed: {r['compile_error'][-120:]}"
    for variant, words in (("composite", "with ATen's composites"), ("graph", "with CUDA graphs"),
                           ("all", "with SEGTRAIN_FUSED_KERNELS=all (the kernels no GPU has run yet too)"),
                           ("graph_all", "with CUDA graphs and SEGTRAIN_FUSED_KERNELS=all")):
        if r.get(f"{variant}_tokens_per_s"):
            figure += (f"; {words} {rate(r[f'{variant}_tokens_per_s'])} tokens/s ({r[f'ratio_{variant}']:.2f}x "
                       f"segtrain's, MFU {pct(r[f'mfu_{variant}'])})")
            if r.get(f"ratio_{variant}_compiled") is not None:
                figure += f", / compiled **{r[f'ratio_{variant}_compiled']:.2f}x**"
                target += f"; {variant} >= 1.0x compiled: {verdict(r[f'ratio_{variant}_compiled'] >= 1.0)}"
        elif r.get(f"{variant}_error"):
            figure += f"; {words}: failed: {r[f'{variant}_error'][-120:]}"
    if r["target_mfu"]:
        # Against the nominal peak when the GPU is in the table (the usual MFU), else the measured one.
        nominal = r["mfu_segtrain_nominal"] is not None
        got = r["mfu_segtrain_nominal"] if nominal else r["mfu_segtrain"]
        target += (f"; MFU >= {pct(r['target_mfu'])} ({'nominal' if nominal else 'measured'} peak): "
                   f"{verdict(got >= r['target_mfu'])}")
    return (
        f"GPU training speed, {r['model']} ({r['params'] / 1e6:.0f}M: d {r['d_model']} x {r['layers']} layers, "
        f"{r['heads']} heads, vocab {r['vocab']}, {r['micro_batch']} x {r['length']} tokens, bf16, {r['gpu']})",
        f"{figure}; {mfu}", target)


def smollm2(r):
    memory = (f"peak RSS {r['segtrain_peak_rss_mb']:.0f} vs {r['transformers_peak_rss_mb']:.0f} MiB = "
              f"**{r['rss_ratio']:.2f}x** ({r['rss_ratio_min']:.2f}..{r['rss_ratio_max']:.2f})")
    if "gpu" in r:
        memory += (f"; peak GPU {r['segtrain_peak_gpu_mb']:.0f} vs {r['transformers_peak_gpu_mb']:.0f} MiB "
                   f"= {r['gpu_ratio']:.2f}x")
    return (
        f"training speed and memory, {r['model']} ({r['params'] / 1e6:.0f}M, {r['init']}; {r['micro_batch']} x "
        f"{r['length']} tokens, {r['precision']} on {r.get('gpu', r['device'])}, {r['threads']} "
        f"thread{'s' if r['threads'] != 1 else ''}) against transformers",
        f"segtrain {r['segtrain_tokens_per_s']:.1f} vs transformers {r['transformers_tokens_per_s']:.1f} tokens/s = "
        f"{spread(r)}; {memory}; first-step loss equal to {r['step1_loss_max_abs_diff']:.1g}", "")


def train_memory(r):
    return (
        f"peak RSS, {r['model']} (d {r['d_model']} x {r['layers']} layers, micro-batch {r['micro_batch']}, "
        f"L_t {r['L_t']}, L_e {r['L_e']})",
        f"truncate {r['peak_rss_mb_truncate']:.0f} MB, chunk-0.25 {r['peak_rss_mb_chunk']:.0f} MB "
        f"(**{r['chunk_over_truncate']:.3f}x**), full {r['peak_rss_mb_full']:.0f} MB ({r['full_over_truncate']:.2f}x)",
        f"chunk <= {r['target_chunk_over_truncate']}x truncate: "
        f"{verdict(r['chunk_over_truncate'] <= r['target_chunk_over_truncate'])}")


def loss_chunk_memory(r):
    return (
        f"peak RSS of one training step, loss over slices (vocab {r['vocab']}, 1 x {r['length']} tokens, "
        f"d {r['d_model']}, {r['precision']})",
        f"whole logits {r['step_peak_rss_mb_whole']:.0f} MiB, slices of {r['auto_chunk_tokens']} tokens "
        f"{r['step_peak_rss_mb_chunked']:.0f} MiB: **{r['saved_mb']:.0f} MiB saved = {r['saved_over_logits']:.2f}x** "
        f"the {r['fp32_logits_mb']:.0f} MiB of fp32 logits",
        f"most of the logits' size: {verdict(r['saved_over_logits'] >= 0.5)}")


def gpu_memory(r):
    return (
        f"peak GPU memory, {r['model']} (d {r['d_model']} x {r['layers']} layers, micro-batch {r['micro_batch']}, "
        f"L_t {r['L_t']}, L_e {r['L_e']}, bf16, {r['gpu']})",
        f"truncate {r['peak_gpu_mb_truncate']:.0f} MiB, chunk-0.25 {r['peak_gpu_mb_chunk']:.0f} MiB "
        f"(**{r['chunk_over_truncate']:.3f}x**), full {r['peak_gpu_mb_full']:.0f} MiB ({r['full_over_truncate']:.2f}x)",
        f"chunk <= {r['target_chunk_over_truncate']}x truncate: "
        f"{verdict(r['chunk_over_truncate'] <= r['target_chunk_over_truncate'])}")


def gpu_param_dtype_memory(r):
    return (
        f"GPU memory a parameter, {r['mode']} (train.param_dtype {r['param_dtype']}, shard_optimizer "
        f"{str(r['shard_optimizer']).lower()}), {r['ranks']} rank{'s' if r['ranks'] != 1 else ''}, "
        f"{r['params'] / 1e6:.0f}M llama",
        f"optimizer {r['optimizer_bytes_per_param']:.3g} B (designed {r['designed_optimizer_bytes_per_param']:.3g}); "
        f"rank 0 peak {r['peak_gpu_mb_rank0']:.0f} MiB allocated ({r['peak_gpu_reserved_mb_rank0']:.0f} reserved) = "
        f"{r['device_bytes_per_param']:.3g} B (designed {r['designed_bytes_per_param']:.3g}, rest {r['rest_mb']:+.0f} MiB)",
        f"optimizer as designed: {verdict(r['optimizer_as_designed'])}; device >= designed: "
        f"{verdict(r['device_at_least_designed'])}")


def gpu_kernels(r):
    """Each kernel's step row alone: the per-shape rows are in the table below the summary."""
    if not str(r.get("case", "")).endswith(" blocks)"):
        return None
    kernel = r.get("kernel", "bias gradient")  # rows written before the residual LayerNorm joined have none
    words = {"bias gradient": ("bias gradients", "the column-sum kernels"),
             "residual LayerNorm": ("residual add + LayerNorm, forward and backward", "the fused node"),
             "residual RMSNorm": ("residual add + RMSNorm, forward and backward", "the fused node")}
    what, ours = words.get(kernel, (kernel, "the kernels"))
    return (f"{what}, {r['case']}", f"ATen {r['aten_ms']:.2f} ms, {ours} {r['kernel_ms']:.2f} ms "
            f"= **{r['ratio']:.2f}x**", f"faster than ATen's: {verdict(r['ratio'] > 1.0)}")


def gpu_lora_8b(r):
    """One phase of bench/gpu_lora_8b_bench.py (lora, lora-long, lora-auto, full-1b); an older single row (no phase) too."""
    on = r.get("gpu", r.get("device", "?"))
    lora = r.get("method", "lora") == "lora"
    where = "one GPU" if r.get("device", "cuda") == "cuda" else "the CPU"
    what = (f"{'LoRA' if lora else 'full fine-tuning'} on {where}, {r['shape']} shape (random weights), "
            f"chunk-0.25 L_t {r['train_length']} to L_e {r['extended_length']}, "
            + (f"rank {r['lora']['rank']} on q, k, v, o + norms, frozen bf16 base, activation checkpointing"
               + (f" auto within {r['batch_memory_gib']:g} GiB: {r['recomputed_blocks']} of {r['layers']} blocks "
                  f"recomputed" if r.get("activation_checkpointing") == "auto" and r.get("recomputed_blocks")
                  is not None else "")
               if lora else f"micro-batch {r.get('micro_batch', 1)}, train.param_dtype bf16") + f", {on}")
    figure = f"{rate(r['tokens_per_s'])} tokens/s" if r.get("tokens_per_s") else "no steady rate (too few steps)"
    if r.get("mfu") is not None:
        figure += f", MFU {pct(r['mfu'])} of the measured peak"
        if r.get("mfu_nominal") is not None:
            figure += f" ({pct(r['mfu_nominal'])} of nominal)"
    if "peak_gpu_mb" in r:
        figure += (f"; peak {r['peak_gpu_mb'] / 1024:.1f} GiB allocated ({r['peak_gpu_reserved_mb'] / 1024:.1f} "
                   f"reserved)")
        if r.get("table_total_gib") is not None:
            figure += f" against the table's {r['table_total_gib']:.1f} GiB"
    if r.get("base_load_s") is not None:
        figure += f"; base loaded in {r['base_load_s']:.1f} s"
    if r.get("start_to_step1_s") is not None:
        figure += f", first step done {r['start_to_step1_s']:.1f} s after the start"
    target = ""
    if r.get("meets_target") is not None:
        target = f"reserved < {r['target_gib']:g} GiB: {verdict(r['meets_target'])}"
    elif r.get("fits_24gb") is not None:
        target = f"fits 24 GB: {verdict(r['fits_24gb'])}"
    return what, figure, target


def distributed(r):
    return ("data parallel, " + r["setup"],
            f"2 x 1 thread {rate(r['two_processes_1_thread_tokens_per_s'])} tokens/s = **{r['speedup']:.2f}x** "
            f"1 x 1 thread; efficiency {100 * r['scaling_efficiency']:.0f}%", "")


headlines("train_speed_bench", train_speed)
headlines("gpu_speed_bench", gpu_speed)
headlines("smollm2_bench", smollm2)
headlines("gpu_smollm2_bench", smollm2)
headlines("train_memory_bench", train_memory)
headlines("loss_chunk_memory_bench", loss_chunk_memory)
headlines("gpu_memory_bench", gpu_memory)
headlines("gpu_param_dtype_memory_bench", gpu_param_dtype_memory)
headlines("gpu_lora_8b_bench", gpu_lora_8b)
headlines("gpu_kernel_bench", gpu_kernels)


def data_bench(data):
    samplers = [r for r in data if r.get("measure") == "sampler"]
    if samplers:
        figures = ", ".join(f"{r['method']}{' (document targets)' if r['targets'] == 'document' else ''} "
                            f"{rate(r['tokens_per_s_1_core'])}" for r in samplers)
        slowest = min(r["tokens_per_s_1_core"] for r in samplers)
        headline.append(("samplers, one core (tokens/s)", figures, f">= 20 M: {verdict(slowest >= 20e6)}"))
    for r in data:
        if str(r.get("measure", "")).startswith("loader"):
            headline.append((f"{r['measure']} ({r['method']})", f"{rate(r['tokens_per_s_1_core'])} tokens/s", ""))
    tokenize = [r for r in data if str(r.get("measure", "")).startswith("tokenize")]
    if tokenize:
        figures = ", ".join(f"{r['method']} {r['mb_per_s']:.1f} MB/s" for r in tokenize)
        ratio = next((r["segtrain_1_thread_over_spm_encode"] for r in tokenize
                      if "segtrain_1_thread_over_spm_encode" in r), None)
        headline.append((tokenize[0]["measure"],
                         figures + (f" (segtrain 1 thread = **{ratio:.2f}x** spm_encode)" if ratio else ""), ""))


try:
    data_bench(load("data_bench"))
except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError) as e:
    headline.append(("data_bench: incomplete rows", f"{type(e).__name__}: {e}", ""))
headlines("distributed_bench", distributed)

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
    if not_shown(data):
        print(not_shown(data) + "\n")
        continue
    if isinstance(data, dict) and data.get("setup"):
        print(str(data["setup"]) + "\n")
    rows = rows_of(data)
    if not rows:
        print("no rows\n")
        continue
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
