"""Reference for train.param_dtype: bf16, written independently of segtrain's
optimizer: PyTorch's own torch.optim.AdamW (single-tensor loop, not the fused
kernel) on fp32 master weights, each step's gradient the fp32 sum of its
micro-batches' bf16 gradients, and the bf16 parameters the master rounded.

  python master_adamw_reference.py IN.safetensors OUT.safetensors OPTIONS_JSON

IN: "param.<name>" (fp32 initial weights) and "grad.<step>.<micro>.<name>"
(bf16 values stored as fp32). OPTIONS_JSON: lr (a list, one a step), betas,
eps, weight_decay, no_decay (name substrings). OUT: "master.<name>" (fp32)
and "bf16.<name>" (bf16 values stored as fp32) after every step.
"""
import json
import sys

import torch
from safetensors.torch import load_file, save_file


def main():
    inputs, out, options = load_file(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    names = sorted(k[len("param."):] for k in inputs if k.startswith("param."))
    master = {n: inputs["param." + n].clone().requires_grad_() for n in names}
    decayed = [master[n] for n in names if master[n].dim() >= 2 and not any(s in n for s in options["no_decay"])]
    plain = [master[n] for n in names if not any(p is master[n] for p in decayed)]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": options["weight_decay"]},
                             {"params": plain, "weight_decay": 0.0}],
                            lr=options["lr"][0], betas=tuple(options["betas"]), eps=options["eps"],
                            foreach=False, fused=False)
    for step, lr in enumerate(options["lr"]):
        for n in names:
            micro = sorted(k for k in inputs if k.startswith(f"grad.{step}.") and k.endswith("." + n))
            total = torch.zeros_like(master[n])
            for k in micro:
                assert torch.equal(inputs[k], inputs[k].bfloat16().float()), k + " is not a bf16 value"
                total += inputs[k]
            master[n].grad = total
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    result = {}
    for n in names:
        result["master." + n] = master[n].detach().clone()
        result["bf16." + n] = master[n].detach().bfloat16().float()
    save_file(result, out)


if __name__ == "__main__":
    main()
