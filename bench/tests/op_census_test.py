"""bench/op_census.py on this machine's build: the census library loads into `segtrain train`, and what it counts
a step is what segtrain's bf16 step is designed to run, each expectation taken from the model and the
configuration, not from an earlier census:
- every trainable tensor's gradient is summed into its flat bucket once a micro-batch (autograd's AccumulateGrad,
  one bf16 add each; the tensors counted in the run's own checkpoint);
- the master weights' fp32 gradient sums: one bucket, so one bf16 -> fp32 copy of the whole bucket (the step's first
  micro-batch) and one fp32 += bf16 add (its second), and one copy of the updated master back to the bf16 bucket,
  each as large as the model's parameters (the docs' "one kernel a range, not one a piece"); the bf16 gradient
  bucket zeroed once a micro-batch (after each but the last, and at the step's end);
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

    accumulated = sum(r["count"] for r in data["adds"]
                      if r["op"] == "aten::add_" and r.get("context") == "torch::autograd::AccumulateGrad")
    # GPT-2's tied table takes two gradients a micro-batch, summed by autograd before its one AccumulateGrad.
    expected = len(tensors) * micro_batches
    check(accumulated == expected, f"AccumulateGrad adds a step: {accumulated}, expected {len(tensors)} tensors x "
                                   f"{micro_batches} micro-batches = {expected}")

    whole = f"[{params}]"
    first_sum = calls_of(data, "aten::copy_", f"f32{whole},bf16{whole}")
    later_sums = calls_of(data, "aten::add_", f"f32{whole},bf16{whole}")
    copy_back = calls_of(data, "aten::copy_", f"bf16{whole},f32{whole}")
    # On the CPU an fp32 += bf16 add converts its bf16 operand with a copy of its own (counted among the copies).
    check(later_sums == micro_batches - 1, f"fp32 += bf16 adds of the whole bucket ({params} parameters) a step: "
                                           f"{later_sums}, expected {micro_batches - 1}")
    check(first_sum == 1 + later_sums, f"bf16 -> fp32 copies of the whole bucket a step: {first_sum}, expected 1 "
                                       f"(+ {later_sums} inside the CPU's mixed-dtype add)")
    check(copy_back == 1, f"copies of the master back to the bf16 bucket a step: {copy_back}, expected 1")
    zeroed = calls_of(data, "aten::zero_", f"bf16{whole}")
    check(zeroed == micro_batches, f"zeroings of the bf16 gradient bucket a step: {zeroed}, expected {micro_batches}"
                                   f" (between micro-batches, and once at the step's end)")

    adamw = sum(r["count"] for r in data["calls"] if r["op"] == "aten::_fused_adamw_")
    norms = sum(r["count"] for r in data["calls"] if r["op"] == "aten::_foreach_norm")
    check(adamw == 2, f"fused AdamW calls a step: {adamw}, expected 2 (decayed and not)")
    check(norms == 1, f"gradient norms a step: {norms}, expected 1")
    finish()


if __name__ == "__main__":
    main()
