"""bench/op_census.py on this machine's build: the census library loads into `segtrain train`, and what it counts
a step is what segtrain's bf16 step is designed to run, each expectation taken from the model and the
configuration, not from an earlier census:
- one process with master weights keeps no bf16 gradient buffer: every trainable tensor's gradient, as autograd's
  AccumulateGrad leaves it (taken over, not copied: no bf16 copy, no bf16 add there), is summed into its piece of the
  fp32 sums by the optimizer's hook once a micro-batch (the tensors counted in the run's own checkpoint; one bucket
  of one segment, so a piece a tensor): a bf16 -> fp32 copy the step's first micro-batch, an fp32 += bf16 add each
  later one; one copy of the updated master back to the bf16 bucket, as large as the model's parameters; nothing
  zeroes a bf16 gradient buffer;
- the update: one fused AdamW call for each of the two decay groups, one gradient norm for the clipping.

  op_census_test.py --build-dir BUILD --python PYTHON
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "bench"))
from checks import check, finish  # noqa: E402
from train_bench import safetensors_sizes  # noqa: E402


def calls_of(data, op, inputs):
    return sum(r["count"] for r in data["calls"] if r["op"] == op and r["inputs"] == inputs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="op-census-test-") as work:
        done = subprocess.run([args.python, str(ROOT / "bench/op_census.py"), "--steps", "2", "--keep", work],
                              capture_output=True, text=True, timeout=550,
                              env={**os.environ, "BUILD_DIR": args.build_dir})
        check(done.returncode == 0, f"op_census.py exits 0 (stderr: {done.stderr[-500:]})")
        if done.returncode != 0:
            finish()
        data = json.loads(done.stdout)
        tensors = safetensors_sizes(os.path.join(work, "steps2", "final", "model.safetensors"))
    micro_batches = data["shape"]["grad_accum"]
    params = sum(tensors.values())
    check(data["steps"] == 2 and data["kernel_ops_per_step"] > 0, f"a census of 2 steps: {data['kernel_ops_per_step']}"
          " kernel ops a step")

    # Into a bf16 destination: the bucket path's add into the gradient's bucket view, or AccumulateGrad's copy of a
    # gradient it cannot take over (new_empty_strided + copy_); the hook's own sums write fp32.
    in_accumulate = [r for r in data["adds"] + data["copies"]
                     if r.get("context") == "torch::autograd::AccumulateGrad" and r["inputs"].startswith("bf16")]
    check(not in_accumulate, f"bf16 adds or copies in AccumulateGrad (a bucket's add, a gradient copied rather than "
                             f"taken over): {in_accumulate}, expected none")
    by_size = {}
    for numel in tensors.values():
        by_size[numel] = by_size.get(numel, 0) + 1
    for numel, count in sorted(by_size.items()):
        piece = f"f32[{numel}],bf16[{numel}]"
        copies = sum(r["count"] for r in data["copies"]
                     if r["inputs"] == piece and r.get("context") == "torch::autograd::AccumulateGrad")
        adds = calls_of(data, "aten::add_", piece)
        # On the CPU an fp32 += bf16 add converts its bf16 operand with a copy of its own (counted among the copies).
        check(adds == count * (micro_batches - 1), f"fp32 += bf16 sums of {count} tensor(s) of {numel} a step: {adds}, "
                                                   f"expected {count} x {micro_batches - 1} later micro-batch(es)")
        check(copies == count + adds, f"bf16 -> fp32 sums of {count} tensor(s) of {numel} in AccumulateGrad a step: "
                                      f"{copies}, expected {count} (+ {adds} inside the CPU's mixed-dtype add)")

    whole = f"[{params}]"
    copy_back = calls_of(data, "aten::copy_", f"bf16{whole},f32{whole}")
    check(copy_back == 1, f"copies of the master back to the bf16 bucket ({params} parameters) a step: {copy_back}, "
                          "expected 1")
    zeroed = sum(r["count"] for r in data["calls"] if r["op"] == "aten::zero_" and r["inputs"] == f"bf16{whole}")
    check(zeroed == 0, f"zeroings of a bf16 gradient bucket a step: {zeroed}, expected 0 (there is none)")

    adamw = sum(r["count"] for r in data["calls"] if r["op"] == "aten::_fused_adamw_")
    norms = sum(r["count"] for r in data["calls"] if r["op"] == "aten::_foreach_norm")
    check(adamw == 2, f"fused AdamW calls a step: {adamw}, expected 2 (decayed and not)")
    check(norms == 1, f"gradient norms a step: {norms}, expected 1")
    finish()


if __name__ == "__main__":
    main()
