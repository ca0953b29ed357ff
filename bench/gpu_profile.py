"""Where a training step's GPU time goes, by kernel class: segtrain and the PyTorch references (eager and
torch.compile) on GPT-2 medium at L_t 1,024, side by side. Writes profile.md and profile.json.

  gpu_profile.py run --out DIR [--until EPOCH_SECONDS]
                                        profile the programs (BENCH_DEVICE=cuda: bench/gpu_profile.sh)
  gpu_profile.py table [--skip N] [--steps K] NAME=FORMAT:PATH ...
                                        the table of existing traces (FORMAT: chrome, nsys, cupti)

What is profiled, a few steps after the first ones (allocation, cuBLAS's choices, compiling):
  eager, compiled  bench/train_bench.py's PyTorch loop (the gpu_speed_bench reference) under torch.profiler
                   (BENCH_PROFILE_WAIT 4 steps, 1 warm-up, BENCH_PROFILE_STEPS 3 recorded); its Chrome trace.
  segtrain         `segtrain train` of the same shape, store and micro-batch. segtrain has no profiler hook
                   (trainer/ has none, and a benchmark does not add one), so it is traced from outside the
                   process, whole, and the same steps are cut out of the trace afterwards: with nsys when the
                   machine has it (`nsys profile --trace=cuda`, then `nsys stats --report cuda_gpu_trace`), else
                   with bench/cupti_kernel_trace.cpp, a CUPTI injection library built here with g++ against the
                   CUPTI of the CUDA toolkit or torch's nvidia-cuda-cupti wheel (CUDA_INJECTION64_PATH, what nsys
                   does itself). Which one ran, or why none could, is in the report. torch.profiler cannot see
                   another process's kernels, and LibTorch's Kineto would need a call inside segtrain.
  segtrain_all     the same with SEGTRAIN_FUSED_KERNELS=all (the kernels no GPU has run yet), profiled second.
The order is what a short call must not lose: segtrain's two steps first (what the next defaults are decided
on), then torch.compile (the target), then the eager loop (every speed round measures it). With --until (a
time, as `date +%s` gives it: the caller's limit less what it keeps), a program that would not finish by then
is not started, and the table says so: a program is expected to take the longest program so far, and at least
PROGRAM_SECONDS (torch.compile's compiling more), with MARGIN_SECONDS kept. A SIGTERM (the caller's timeout)
kills the program being profiled (under nsys, nsys itself), and profile.json and profile.md are replaced
whole, never left half-written.
Steps are found in a trace by the optimizer: a step ends with its AdamW kernels (STEP_END), and AdamW kernels
with no GEMM between them belong to one step. A whole-run trace (segtrain) skips the first --skip steps'
ends and keeps --steps steps from there; a torch.profiler trace starts at a step's start and keeps them all.
The window is from the start to the last step's last AdamW kernel; idle is the window less the union of every
kernel, memcpy and memset in it (kernels on several streams at once show as overlap: their classes then sum to
more than the busy time). Every kernel is put in the first class of KERNEL_CLASSES whose regex finds its
(demangled) name, ignoring case; "other" holds what none finds (the top kernels of each program are listed
with their class, to see what a class holds). BENCH_DEVICE=cpu profiles the references on the CPU with a tiny
shape (torch.profiler's CPU ops, each op's self time; compiled with BENCH_COMPILE_BACKEND aot_eager unless set)
and says why segtrain is not: the table-making code's own check, no figure to quote.
"""
import argparse
import csv
import glob
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_bench as tb  # noqa: E402

# The kernel classes, in the order they are tried (the first whose regex is found in the name decides, case
# ignored). GPU names: cuBLAS (sm90_xmma_gemm_*, nvjet_*, *s16816gemm*, cutlass::Kernel2<...gemm...>, gemv2T_*,
# splitKreduce_*), PyTorch's flash and memory-efficient attention (pytorch_flash::flash_fwd_kernel,
# fmha_cutlassF_*), cuDNN's SDPA (cudnn_generated_fort_native_sdpa_*), ATen's LayerNorm (vectorized_layer_norm_*,
# GammaBetaBackward*), log-softmax (cunn_SoftMaxForward<...LogSoftMaxForwardEpilogue>) and nll_loss, fused
# AdamW (multi_tensor_apply_kernel<...FusedAdamMathFunctor...>), Inductor's Triton kernels (triton_poi_/
# triton_red_/triton_per_fused_<ops>, triton_tem_fused_mm for its GEMM templates). CPU op names (aten::addmm,
# aten::_fused_adamw_, ...) match the same table.
KERNEL_CLASSES = [
    # the update, gradient clipping (norms and scaling of every gradient) and the bf16 master-weight copies
    ("optimizer", r"adam|FusedOptimizer|multi_tensor_apply|_foreach_|foreach_tensor|LpNorm|L2Norm|clip_grad"),
    ("loss", r"nll_loss|cross_entropy|log_?softmax"),
    ("attention", r"flash|fmha|attention|sdpa|_attn_|mha_"),
    ("GEMM", r"gemm|gemv|xmma|nvjet|cublas|cutlass|wgmma|splitKreduce|triton_tem_fused_(mm|bmm|addmm)|"
             r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_addmm_activation)$"),
    # segtrain's own: the residual add fused with the norm (kernels/residual_norm_cuda.cu)
    ("norm", r"layer_?norm|rms_?norm|GammaBeta|RowwiseMoments|ComputeInternalGradients|welford|group_norm|"
             r"add_norm_|norm_weight_partials"),
    # ... and segtrain's column sums (the linears' bias gradients, kernels/bias_gradient_cuda.cu)
    ("elementwise", r"elementwise|vectorized|unrolled|reduce_kernel|column_partials|sum_partials|"
                    r"triton_(poi|red|per)_|index|gather|scatter|"
                    r"embedding|copy|^aten::(add|mul|sub|div|gelu|silu|tanh|pow|neg|exp|where|masked_fill|cat|"
                    r"fill|zero|clone|contiguous|sum|mean|rsqrt|softmax|_softmax|threshold|sigmoid)|cat_|fill|"
                    r"gelu|silu|swiglu|softmax|rope|rotary"),
    ("memory", r"^memcpy|^memset|CUDA mem(cpy|set)"),
]
COMPILED_CLASSES = [(name, re.compile(pattern, re.IGNORECASE)) for name, pattern in KERNEL_CLASSES]
CLASS_ORDER = [name for name, _ in KERNEL_CLASSES] + ["other"]
# The elementwise class by what its kernels do, the first regex found (case ignored): the class that separated
# segtrain from torch.compile most (20.7 against 7.7 ms a step on the H200, 2026-11-29), so that the table
# says which of its passes to remove next: Inductor's fused pointwise kernels (several ops in one), sums
# (the linears' bias gradients, ATen's reduce_kernel), copies and casts, fills and zeroing, activations
# (GELU, SwiGLU, their backwards), RoPE, gathers (embeddings, index), and the arithmetic that remains (the
# residual adds, gradient accumulation, masks).
ELEMENTWISE_KINDS = [
    ("fused pointwise", r"triton_poi_"),
    ("reduction", r"reduce_kernel|column_partials|sum_partials|triton_(red|per)_|^aten::(sum|mean)$"),
    ("copy or cast", r"copy|^aten::(clone|contiguous|to)$"),
    ("fill or zero", r"(?<!masked_)fill|zero"),  # masked_fill is a mask: arithmetic
    ("activation", r"gelu|silu|swiglu|tanh|sigmoid|threshold"),
    ("rope", r"rope|rotary"),
    ("gather or index", r"index|gather|scatter|embedding"),
    ("arithmetic", r"add|mul|sub|div|where|masked|neg|exp|pow|rsqrt|functor"),
]
COMPILED_KINDS = [(name, re.compile(pattern, re.IGNORECASE)) for name, pattern in ELEMENTWISE_KINDS]
KIND_ORDER = [name for name, _ in ELEMENTWISE_KINDS] + ["other elementwise"]
STEP_END = re.compile(r"adam", re.IGNORECASE)
PROFILE_STEPS = 3
SKIP_STEPS = 4  # steps whose ends are skipped in a whole-run trace: as torch.profiler's wait + warm-up


def classify(name):
    for cls, pattern in COMPILED_CLASSES:
        if pattern.search(name):
            return cls
    return "other"


def elementwise_kind(name):
    """What an elementwise kernel does (ELEMENTWISE_KINDS), for the class's own table."""
    for kind, pattern in COMPILED_KINDS:
        if pattern.search(name):
            return kind
    return "other elementwise"


# --- traces: (name, start_us, end_us) of every GPU kernel, memcpy and memset -----------------------------------


def read_chrome(path):
    """torch.profiler's Chrome trace: its GPU activities when it has any (CUDA), else its CPU ops with each
    op's self time (the op less the ops it called), so that nested ops are not counted twice."""
    trace = json.loads(pathlib.Path(path).read_text())
    events = [e for e in trace.get("traceEvents", trace if isinstance(trace, list) else [])
              if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e and "ts" in e]
    gpu = [(e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
           if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if gpu:
        return gpu, "gpu"
    return self_times([e for e in events if e.get("cat") == "cpu_op"]), "cpu"


def self_times(ops):
    """CPU ops as (name, start, end, self_us): nested ops on one thread; an op's self time is its span less
    its children's spans."""
    out = []
    by_thread = {}
    for e in ops:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(
            [e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"]), float(e["dur"])])
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda o: (o[1], -o[2]))
        stack = []
        for op in thread_ops:
            while stack and stack[-1][2] <= op[1]:
                stack.pop()
            if stack and op[2] <= stack[-1][2] + 1e-3:
                stack[-1][3] -= op[2] - op[1]
            stack.append(op)
        out.extend(tuple(o[:3]) + (max(o[3], 0.0),) for o in thread_ops)
    return out


def read_csv_trace(path, fmt):
    """nsys's cuda_gpu_trace report (Start (ns), Duration (ns), Name) or cupti_kernel_trace.cpp's CSV."""
    rows = []
    dropped = 0
    with open(path, newline="") as f:
        lines = [line for line in f if line.strip() and not line.startswith(("#", "Generating", "Processing"))]
    reader = csv.DictReader(lines)
    for row in reader:
        if fmt == "cupti":
            if row["kind"] == "dropped":
                dropped = int(row["name"])
                continue
            start, end = int(row["start_ns"]) / 1e3, int(row["end_ns"]) / 1e3
            name = row["name"]
        else:
            start_key = next(k for k in row if k.startswith("Start"))
            duration_key = next(k for k in row if k.startswith("Duration"))
            start = float(row[start_key]) / 1e3
            end = start + float(row[duration_key]) / 1e3
            name = row.get("Name") or row.get("name") or "?"
        rows.append((name, start, end))
    return rows, dropped


# --- the window and the table ----------------------------------------------------------------------------------


def step_ends(events):
    """The end times of the steps: a group of STEP_END events with no GEMM between them ends a step."""
    ends, in_group = [], False
    for name, _start, end, *_ in sorted(events, key=lambda e: e[1]):
        if STEP_END.search(name):
            if in_group:
                ends[-1] = max(ends[-1], end)
            else:
                ends.append(end)
                in_group = True
        elif classify(name) == "GEMM":
            in_group = False
    return ends


def window(events, skip, steps):
    """(start, end, steps, note): from the end of the skip-th step (the trace's start when skip is 0) over
    `steps` steps (all there are when None)."""
    ends = step_ends(events)
    first = min(e[1] for e in events)
    last = max(e[2] for e in events)
    if not ends:
        return first, last, None, "no optimizer kernel found: the whole trace"
    if skip >= len(ends):
        return first, last, None, f"only {len(ends)} steps in the trace, {skip} to skip: the whole trace"
    start = first if skip == 0 else ends[skip - 1]
    chosen = ends[skip:] if steps is None else ends[skip:skip + steps]
    note = "" if steps is None or len(chosen) == steps else f"{len(chosen)} of the {steps} steps asked for"
    return start, chosen[-1], len(chosen), note


def union_length(intervals):
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total


def table(events, kind, skip=0, steps=None, dropped=0):
    """The time by class (ms) of the events inside the window, idle, overlap and the top kernels."""
    if not events:
        return {"note": "the trace holds no GPU kernel or CPU op"}
    start, end, n_steps, note = window(events, skip, steps)
    by_class = {c: 0.0 for c in CLASS_ORDER}
    by_kind = {k: 0.0 for k in KIND_ORDER}
    by_name = {}
    busy = []
    for event in events:
        name, s, e = event[:3]
        s, e = max(s, start), min(e, end)
        if e <= s:
            continue
        # CPU ops: their self time; GPU activities: their span.
        spent = event[3] * (e - s) / (event[2] - event[1]) if len(event) > 3 and event[2] > event[1] else e - s
        cls = classify(name)
        by_class[cls] += spent
        if cls == "elementwise":
            by_kind[elementwise_kind(name)] += spent
        count, total = by_name.get(name, (0, 0.0))
        by_name[name] = (count + 1, total + spent)
        busy.append((s, e))
    span = end - start
    busy_us = union_length(busy)
    summed = sum(by_class.values())
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:12]
    result = {
        "kind": kind, "window_ms": round(span / 1e3, 3), "steps": n_steps,
        "per_step_ms": round(span / 1e3 / n_steps, 3) if n_steps else None,
        "ms": {c: round(v / 1e3, 3) for c, v in by_class.items()},
        "elementwise_ms": {k: round(v / 1e3, 3) for k, v in by_kind.items()},
        "idle_ms": round((span - busy_us) / 1e3, 3), "busy_ms": round(busy_us / 1e3, 3),
        "overlap_ms": round(max(summed - busy_us, 0.0) / 1e3, 3) if kind == "gpu" else None,
        "share": {c: round(v / span, 4) for c, v in by_class.items()} if span > 0 else {},
        "idle_share": round((span - busy_us) / span, 4) if span > 0 else None,
        "top": [{"name": n[:160], "class": classify(n), "count": c, "ms": round(t / 1e3, 3),
                 **({"kind": elementwise_kind(n)} if classify(n) == "elementwise" else {})} for n, (c, t) in top],
    }
    if note:
        result["note"] = note
    if dropped:
        result["dropped_records"] = dropped
    return result


def markdown(profiles):
    """One table, a column per program: ms a step (share of the window) by class, then idle and the window."""
    names = list(profiles)
    lines = ["| class | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]

    def cell(p, ms, share):
        if "ms" not in p:
            return "-"
        steps = p.get("steps") or 1
        return f"{ms / steps:.2f} ms ({100 * share:.1f}%)" if share is not None else f"{ms / steps:.2f} ms"

    for cls in CLASS_ORDER:
        lines.append(f"| {cls} | " + " | ".join(cell(profiles[n], profiles[n].get("ms", {}).get(cls, 0.0),
                                                       profiles[n].get("share", {}).get(cls)) for n in names) + " |")
    lines.append("| **idle** | " + " | ".join(cell(profiles[n], profiles[n].get("idle_ms", 0.0),
                                                    profiles[n].get("idle_share")) for n in names) + " |")
    lines.append("| overlap (concurrent kernels) | " + " | ".join(
        "-" if profiles[n].get("overlap_ms") is None else
        f"{profiles[n]['overlap_ms'] / (profiles[n].get('steps') or 1):.2f} ms" for n in names) + " |")
    lines.append("| window a step | " + " | ".join(
        f"{profiles[n]['per_step_ms']:.2f} ms" if profiles[n].get("per_step_ms") else "-" for n in names) + " |")
    lines.append("| steps in the window | " + " | ".join(str(profiles[n].get("steps", "-")) for n in names) + " |")
    out = "\n".join(lines) + "\n"
    out += "\n| elementwise by kind | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names) + "\n"
    for kind in KIND_ORDER:
        out += f"| {kind} | " + " | ".join(
            "-" if "elementwise_ms" not in profiles[n] else
            f"{profiles[n]['elementwise_ms'].get(kind, 0.0) / (profiles[n].get('steps') or 1):.2f} ms"
            for n in names) + " |\n"
    for n in names:
        p = profiles[n]
        out += f"\n{n}: " + "; ".join(f"{k}: {p[k]}" for k in ("source", "note", "why", "dropped_records", "tokens_per_s")
                                      if p.get(k) is not None) + "\n"
        if p.get("top"):
            out += "\n| top kernels of " + n + " | class | calls | ms |\n|---|---|---:|---:|\n"
            out += "".join(f"| `{t['name'][:110]}` | {t['class']}{': ' + t['kind'] if t.get('kind') else ''} | "
                           f"{t['count']} | {t['ms']:.2f} |\n" for t in p["top"])
    return out


def profile_of(fmt, path, skip, steps):
    if fmt == "chrome":
        events, kind = read_chrome(path)
        return table(events, kind, skip, steps)
    events, dropped = read_csv_trace(path, fmt)
    return table(events, "gpu", skip, steps, dropped)


# --- running the programs --------------------------------------------------------------------------------------


def find_nsys():
    found = shutil.which("nsys")
    if found:
        return found
    for pattern in ("/usr/local/cuda*/bin/nsys", "/opt/nvidia/nsight-systems*/*/bin/nsys",
                    "/usr/local/cuda*/nsight-systems*/bin/nsys", "/opt/nvidia/nsight-systems/*/bin/nsys"):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def cupti_dirs():
    """(include, lib) folders that hold cupti.h and libcupti.so: the CUDA toolkit's, then torch's wheels'."""
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(pathlib.Path(nvcc).resolve().parent.parent))
    candidates = []
    for root in filter(None, roots):
        candidates += [(f"{root}/include", f"{root}/lib64"), (f"{root}/include", f"{root}/lib"),
                       (f"{root}/extras/CUPTI/include", f"{root}/extras/CUPTI/lib64")]
    for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        for sub in ("nvidia/cu13", "nvidia/cuda_cupti", "nvidia/cu12"):
            candidates.append((f"{site}/{sub}/include", f"{site}/{sub}/lib"))
    for include, lib in candidates:
        if os.path.exists(f"{include}/cupti_activity.h") and glob.glob(f"{lib}/libcupti.so*"):
            return include, lib
    return None


def build_cupti_tracer(work):
    """bench/cupti_kernel_trace.cpp as a shared library; (path, None) or (None, why not)."""
    dirs = cupti_dirs()
    if not dirs:
        return None, "no cupti_activity.h with a libcupti.so beside it (CUDA toolkit or nvidia-cuda-cupti wheel)"
    include, lib = dirs
    cuda_include = [f"-I{d}" for d in ("/usr/local/cuda/include", f"{os.environ.get('CUDA_HOME', '')}/include")
                    if os.path.exists(f"{d}/cuda.h")]
    libcupti = sorted(glob.glob(f"{lib}/libcupti.so*"))[0]
    out = os.path.join(work, "libcupti_kernel_trace.so")
    if os.path.exists(out):  # built for an earlier program of this run (seconds of the device's time each)
        return out, None
    compiler = os.environ.get("CXX", "g++")
    cmd = [compiler, "-std=c++17", "-O2", "-shared", "-fPIC", "-o", out, str(tb.ROOT / "bench/cupti_kernel_trace.cpp"),
           f"-I{include}", *cuda_include, libcupti, f"-Wl,-rpath,{lib}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, f"building the CUPTI tracer failed: {' '.join(cmd)}: {proc.stderr.strip()[-300:]}"
    return out, None


def segtrain_profile(work, store, shape, steps, variant=None):
    """segtrain (with a train_bench SEGTRAIN_VARIANTS switch on, if given) under nsys, else the CUPTI tracer;
    (profile, None) or (None, why not)."""
    if not tb.CUDA:
        return None, ("not profiled on the CPU: segtrain has no profiler hook (trainer/ has none) and nsys and the "
                      "CUPTI tracer record GPU kernels only")
    name = "segtrain" + (f"-{variant}" if variant else "")
    out = os.path.join(work, f"{name}-run")
    config = out + ".yaml"
    tb.segtrain_config(config, out, store, shape, threads=tb.THREADS, steps=steps)
    segtrain = [str(tb.SEGTRAIN), "train", config]
    switches = dict(os.environ, **(tb.SEGTRAIN_VARIANTS[variant] if variant else {}))
    nsys = find_nsys()
    if nsys:
        prefix = os.path.join(work, name)
        tb.run_child([nsys, "profile", "--trace=cuda", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
                      f"--output={prefix}", *segtrain], out + ".log", env=switches)
        for report in ("cuda_gpu_trace", "gputrace"):
            subprocess.run([nsys, "stats", "--force-export=true", "--report", report, "--format", "csv",
                            "--output", prefix, prefix + ".nsys-rep"], capture_output=True, text=True)
            found = glob.glob(f"{prefix}_{report}*.csv")
            if found:
                p = profile_of("nsys", found[0], SKIP_STEPS, PROFILE_STEPS)
                p["source"] = f"nsys ({nsys}), report {report}, steps {SKIP_STEPS + 1}..{SKIP_STEPS + PROFILE_STEPS}"
                return p, None
        return None, f"nsys ({nsys}) ran but `nsys stats --report cuda_gpu_trace` wrote no CSV ({out}.log)"
    tracer, why = build_cupti_tracer(work)
    if not tracer:
        return None, f"nsys is not on this machine (which nsys: none) and {why}"
    trace = os.path.join(work, f"{name}-kernels.csv")
    env = dict(switches, CUDA_INJECTION64_PATH=tracer, SEGTRAIN_KERNEL_TRACE=trace)
    with open(out + ".log", "w") as log:
        code = subprocess.run(segtrain, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tb.ROOT).returncode
    if code != 0 or not os.path.exists(trace):
        # The log is in `work`, which goes with the run: its last lines are the reason.
        tail = " | ".join(pathlib.Path(out + ".log").read_text(errors="replace").strip().splitlines()[-3:])
        return None, (f"segtrain under the CUPTI tracer exited {code}, trace "
                      f"{'written' if os.path.exists(trace) else 'absent'}: {tail[-600:]}")
    p = profile_of("cupti", trace, SKIP_STEPS, PROFILE_STEPS)
    p["source"] = (f"nsys is not on this machine (which nsys: none); bench/cupti_kernel_trace.cpp injected "
                   f"(CUDA_INJECTION64_PATH), steps {SKIP_STEPS + 1}..{SKIP_STEPS + PROFILE_STEPS}")
    return p, None


def reference_profile(work, store, shape, variant):
    trace = os.path.join(work, f"{variant}-trace.json")
    out = os.path.join(work, f"{variant}.json")
    env_before = dict(os.environ)
    os.environ.update({"BENCH_PROFILE_TRACE": trace, "BENCH_PROFILE_WAIT": str(SKIP_STEPS - 1),
                       "BENCH_PROFILE_STEPS": str(PROFILE_STEPS)})
    if not tb.CUDA:
        os.environ.setdefault("BENCH_COMPILE_BACKEND", "aot_eager")
    try:
        tb.run_child([sys.executable, str(tb.ROOT / "bench/train_bench.py"), "loop", store, json.dumps(shape), out,
                      variant], out + ".log")
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    p = profile_of("chrome", trace, 0, None)
    rates = json.loads(pathlib.Path(out).read_text())["tokens_per_s"]
    p["source"] = (f"torch.profiler, steps {SKIP_STEPS + 1}..{SKIP_STEPS + PROFILE_STEPS}"
                   + (f", torch.compile backend {os.environ.get('BENCH_COMPILE_BACKEND', 'inductor' if tb.CUDA else 'aot_eager')}"
                      if variant == "compiled" else ""))
    p["tokens_per_s"] = round(sorted(rates[1:])[len(rates[1:]) // 2], 1)  # median past the first, under the profiler
    return p


# The order a short call keeps (module docstring); the least each program is expected to take (the H200's
# 2026-11-29 profile: about 32 s a program, compiling included), and the margin kept before --until.
PROGRAMS = ("segtrain", "segtrain_all", "compiled", "eager")
PROGRAM_SECONDS = {"segtrain": 35, "segtrain_all": 35, "compiled": 45, "eager": 35}
MARGIN_SECONDS = 5


def expected_seconds(program, longest):
    """What `program` is expected to take, the longest program so far having taken `longest` seconds."""
    return max(PROGRAM_SECONDS[program], longest)


class Terminated(BaseException):
    """A SIGTERM: not an Exception, so no program's `except` takes it for that program's failure."""


def on_sigterm(signum, frame):
    raise Terminated()


def run(out_dir, until=None):
    benchmark = "gpu_profile"
    started = time.time()
    gpu = tb.cuda_or_skip(benchmark) if tb.CUDA else None
    tb.check_segtrain()
    os.makedirs(out_dir, exist_ok=True)
    name = "gpt2-medium" if tb.CUDA else "tiny"
    shape = dict(tb.SHAPES[name])
    steps = SKIP_STEPS + PROFILE_STEPS + 2  # the references' profiler: wait + warm-up + active, and one more
    shape["steps"] = steps
    profiles = {}
    with tempfile.TemporaryDirectory(prefix="segtrain-profile-") as work:
        store = os.path.join(work, "store")
        tb.write_store(store, shape["vocab"], docs=64, doc_tokens=16 * shape["length"])
        longest = 0.0
        for program in PROGRAMS:
            t0 = time.time()
            need = expected_seconds(program, longest)
            if until is not None and t0 + need + MARGIN_SECONDS > until:
                profiles[program] = {"why": f"not profiled: {until - t0:.0f} s left before --until, it takes about "
                                            f"{need:.0f} s (+{MARGIN_SECONDS} kept)", "seconds": 0.0}
                tb.log(f"{program}: {profiles[program]['why']}")
                write(out_dir, benchmark, gpu, name, shape, profiles, started)
                continue
            try:
                if program.startswith("segtrain"):
                    p, why = segtrain_profile(work, store, shape, steps, program.partition("_")[2] or None)
                    p = p or {"why": why}
                else:
                    p = reference_profile(work, store, shape, program)
            except (SystemExit, Exception) as e:  # a run or a trace that failed: said, and the others still run
                p = {"why": f"failed: {type(e).__name__}: {e}"}
            p["seconds"] = round(time.time() - t0, 1)
            longest = max(longest, p["seconds"])
            profiles[program] = p
            tb.log(f"{program}: {p.get('source') or p.get('why')} ({p['seconds']} s)")
            write(out_dir, benchmark, gpu, name, shape, profiles, started)
    return profiles


def write(out_dir, benchmark, gpu, name, shape, profiles, started):
    """profile.json and profile.md, rewritten after each program (a killed call keeps those that finished)."""
    setup = (f"{name} (d {shape['d_model']} x {shape['n_layers']} layers, vocab {shape['vocab']}, "
             f"{shape['micro_batch']} x {shape['length']} tokens, {tb.PRECISION}) on {gpu or 'the CPU'}; "
             f"{'GPU time by kernel class' if tb.CUDA else 'CPU ops at their self time, by class (a check of the table'}"
             f"{'' if tb.CUDA else ', no figure to quote)'} over steps {SKIP_STEPS + 1}..{SKIP_STEPS + PROFILE_STEPS}, "
             f"ms a step (share of the window); classes by bench/gpu_profile.py's KERNEL_CLASSES")
    result = {"benchmark": benchmark, "device": tb.DEVICE, "gpu": gpu, "setup": setup,
              "classes": KERNEL_CLASSES, "seconds": round(time.time() - started, 1), "profiles": profiles}
    # Each replaced whole (a SIGTERM between the write and the rename leaves the last whole file).
    for name, text in (("profile.json", json.dumps(result, indent=1) + "\n"),
                       ("profile.md", f"# Profile\n\n{setup}\n\n{markdown(profiles)}")):
        pathlib.Path(out_dir, name + ".tmp").write_text(text)
        os.replace(pathlib.Path(out_dir, name + ".tmp"), pathlib.Path(out_dir, name))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--until", type=int, default=None,
                   help="start no program that would not finish by this time (seconds since the epoch, as date +%%s)")
    t = sub.add_parser("table")
    t.add_argument("--skip", type=int, default=0, help="step ends to skip (a whole-run trace)")
    t.add_argument("--steps", type=int, default=None)
    t.add_argument("--json", action="store_true", help="the profiles as JSON instead of markdown")
    t.add_argument("traces", nargs="+", help="NAME=FORMAT:PATH, FORMAT chrome, nsys or cupti")
    args = parser.parse_args()
    if args.command == "run":
        if args.until is not None and args.until <= time.time():
            raise SystemExit(f"gpu_profile: --until {args.until}: expected a time to come (date +%s is {time.time():.0f})")
        signal.signal(signal.SIGTERM, on_sigterm)
        try:
            run(args.out, args.until)
            print(pathlib.Path(args.out, "profile.md").read_text())
        except Terminated:
            sys.stderr.write("gpu_profile: stopped by SIGTERM; profile.json keeps the programs that finished\n")
            sys.exit(128 + signal.SIGTERM)
        return
    profiles = {}
    for spec in args.traces:
        m = re.fullmatch(r"([^=]+)=(chrome|nsys|cupti):(.+)", spec)
        if not m:
            raise SystemExit(f"gpu_profile: '{spec}': expected NAME=FORMAT:PATH with FORMAT chrome, nsys or cupti")
        profiles[m.group(1)] = profile_of(m.group(2), m.group(3), args.skip, args.steps)
    print(json.dumps(profiles, indent=1) if args.json else markdown(profiles))


if __name__ == "__main__":
    main()
