"""What a training step of `segtrain train` runs, op by op, on the CPU: ATen's leaf ops a step (about a GPU's kernel
launches), by op, input dtypes and where each ran (the autograd node, else the outermost op), and the copies and
adds among them. Prints JSON (bench/run.sh).

  op_census.py [--steps N] [--keep DIR]      (bench/op_census_bench.sh: `make bench`)

bench/op_census.cpp, built here with g++ against the LibTorch segtrain links, is loaded into two runs of the same
configuration with LD_PRELOAD: N and 2N optimizer steps (default 4). What the longer run counted beyond the shorter
is N steps' ops (start-up, the first steps' allocations, the final checkpoint and evaluation cancel out), divided
by N. The configuration is the bf16 path of a GPU run: a GPT-2 block (the GPT-2 medium bench's architecture,
small), train.precision bf16 and train.param_dtype bf16 (bf16 parameters in flat buckets, fp32 master weights
and gradient sums), 2 micro-batches a step, a vocabulary that is no multiple of 64 (the LM head's GEMMs over a
padded vocabulary) and SEGTRAIN_CPU_MATMUL=bf16 (bf16 matmuls, as on a GPU, however slow this CPU's). What the CPU
runs differently from a GPU: the fused kernels are CUDA's (the CPU computes ATen's composites), SDPA's kernel
and autocast's LayerNorm; the optimizer, the flat buckets, the master weights and the LM head run the same ops.
Counts are exact and the same on every run (no timing): a change that removes a copy shows as a smaller count.
"""
import argparse
import csv
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_bench as tb  # noqa: E402

SHAPE = dict(vocab=1000, d_model=64, n_layers=2, n_heads=2, length=64, micro_batch=2, grad_accum=2)
COPY_OPS = {"aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"}
ADD_OPS = {"aten::add", "aten::add_", "aten::_foreach_add_", "aten::sum", "aten::_foreach_add"}


def build_library(work):
    """bench/op_census.cpp as a shared library against torch's own headers and libraries."""
    import torch  # the venv's: the LibTorch segtrain is built against
    # C++20, as the project's (torch 2.14's headers need it).
    root = pathlib.Path(torch.__file__).parent
    out = os.path.join(work, "libop_census.so")
    includes = [f"-I{root / 'include'}", f"-I{root / 'include/torch/csrc/api/include'}"]
    lib = root / "lib"
    cmd = [os.environ.get("CXX", "g++"), "-std=c++20", "-O2", "-DNDEBUG", "-shared", "-fPIC", "-o", out,
           str(tb.ROOT / "bench/op_census.cpp"), *includes,
           f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}", f"-L{lib}", "-ltorch_cpu", "-lc10",
           f"-Wl,-rpath,{lib}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"op_census: building the census library failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return out


def write_config(path, out_dir, store, steps):
    s = SHAPE
    tokens = steps * s["micro_batch"] * s["grad_accum"] * s["length"]
    pathlib.Path(path).write_text(f"""run: {{name: census, output_dir: {out_dir}, threads: 1, log_level: warn, device: cpu}}
model: {{arch: gpt2, d_model: {s['d_model']}, n_layers: {s['n_layers']}, n_heads: {s['n_heads']},
        max_positions: {s['length']}}}
data: {{store: {store}, train_length: {s['length']}, extended_length: {s['length']}, sampler: {{method: truncate}}}}
train: {{budget: {{tokens: {tokens}}}, micro_batch_size: {s['micro_batch']}, grad_accum: {s['grad_accum']},
        warmup_steps: 1, log_every: 1, checkpoint_every: 0, tensorboard: false, lr: 3.0e-4, weight_decay: 0.1,
        grad_clip: 1.0, precision: bf16, param_dtype: bf16}}
eval: {{lengths: [{s['length']}], max_sequences: 1, batch_size: 1}}
""")


def census_run(work, library, store, steps):
    """{(kind, op, inputs, context): (count, elements)} of one run of `steps` steps."""
    tag = f"steps{steps}"
    config, out, table = (os.path.join(work, f"{tag}{suffix}") for suffix in (".yaml", "", ".csv"))
    shutil.rmtree(out, ignore_errors=True)  # a kept folder's earlier run
    write_config(config, out, store, steps)
    env = {**os.environ, "LD_PRELOAD": library, "SEGTRAIN_OP_CENSUS": table, "SEGTRAIN_CPU_MATMUL": "bf16"}
    tb.run_child([str(tb.SEGTRAIN), "train", config], out + ".log", env=env)
    if not os.path.exists(table):
        raise SystemExit(f"op_census: {tb.SEGTRAIN} wrote no census ({table}): was the library loaded?")
    with open(table, newline="") as f:
        return {(r["kind"], r["op"], r["inputs"], r["context"]): (int(r["count"]), int(r["elements"]))
                for r in csv.DictReader(f)}


def per_step(short, long, steps):
    """What the longer run counted beyond the shorter, a step: [(kind, op, inputs, context, count, elements)]."""
    rows = []
    for key, (count, elements) in long.items():
        base_count, base_elements = short.get(key, (0, 0))
        extra = count - base_count
        if extra % steps:
            raise SystemExit(f"op_census: {key}: {extra} calls in {steps} steps is no whole number a step")
        if extra:
            rows.append((*key, extra // steps, (elements - base_elements) // steps))
    return sorted(rows, key=lambda r: (r[0], -r[4], r[1], r[2], r[3]))


def summary(rows):
    kernels = [r[1:] for r in rows if r[0] == "kernel"]
    by_op = defaultdict(int)
    for op, _, _, count, _ in kernels:
        by_op[op] += count

    def listed(table, ops=None):
        return [{"op": op, "inputs": inputs, **({"context": context} if context else {}), "count": count,
                 "elements": elements} for op, inputs, context, count, elements in table if ops is None or op in ops]

    return {"kernel_ops_per_step": sum(by_op.values()),
            "copies_per_step": sum(r[3] for r in kernels if r[0] in COPY_OPS),
            "adds_per_step": sum(r[3] for r in kernels if r[0] in ADD_OPS),
            "kernel_ops": dict(sorted(by_op.items(), key=lambda kv: (-kv[1], kv[0]))),
            "copies": listed(kernels, COPY_OPS), "adds": listed(kernels, ADD_OPS), "kernels": listed(kernels),
            "calls": listed(r[1:] for r in rows if r[0] == "call")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--keep", help="a folder to keep the runs' logs and census tables in")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps {args.steps}: expected a whole number >= 1")  # exit 2, as any bad input
    tb.check_segtrain()
    with tempfile.TemporaryDirectory(prefix="op-census-") as scratch:
        work = args.keep or scratch
        os.makedirs(work, exist_ok=True)
        library = build_library(work)
        store = os.path.join(work, "store")
        tb.write_store(store, SHAPE["vocab"], docs=8, doc_tokens=4 * SHAPE["length"])
        short = census_run(work, library, store, args.steps)
        long = census_run(work, library, store, 2 * args.steps)
        census = summary(per_step(short, long, args.steps))
        result = {"benchmark": "op_census_bench", "device": "cpu", "shape": SHAPE, "steps": args.steps,
                  "setup": (f"segtrain train, gpt2 {SHAPE['n_layers']} x {SHAPE['d_model']}, vocabulary "
                            f"{SHAPE['vocab']}, {SHAPE['grad_accum']} micro-batches of {SHAPE['micro_batch']} x "
                            f"{SHAPE['length']} tokens a step, precision bf16, param_dtype bf16, "
                            f"SEGTRAIN_CPU_MATMUL=bf16: ATen ops a step (the copies and adds below; every kernel op "
                            f"and call in the JSON)"),
                  **census, "results": census["copies"] + census["adds"]}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
