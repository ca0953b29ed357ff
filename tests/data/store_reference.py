"""What the corpus-format tests share: a store of the documents as plain JSONL, which every other
form of the same documents must reproduce byte for byte, and `segtrain prepare` with the
tokenizer that store trained."""
import os
import subprocess


def prepare(segtrain, inputs, out, tokenizer, *extra):
    return subprocess.run([segtrain, "prepare", "--input", *inputs, "--out", out, "--tokenizer", tokenizer,
                           "--valid-fraction", "0.1", *extra], capture_output=True, text=True)


def store_files(folder):
    """Every file of a store, by name."""
    return {name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))}


def reference_store(segtrain, jsonl, work):
    """(tokenizer, files of the store `jsonl` makes with it), or (None, prepare's stderr) when it fails:
    a 300-piece sentencepiece model trained on `jsonl`, then the store of `jsonl` with it."""
    trained = subprocess.run([segtrain, "prepare", "--input", jsonl, "--out", os.path.join(work, "tok"),
                              "--vocab-size", "300"], capture_output=True, text=True)
    if trained.returncode != 0:
        return None, f"training the tokenizer: {trained.stderr[-2000:]}"
    tokenizer = os.path.join(work, "tokenizer.model")
    os.rename(os.path.join(work, "tok", "tokenizer.model"), tokenizer)
    reference = prepare(segtrain, [jsonl], os.path.join(work, "reference"), tokenizer)
    if reference.returncode != 0:
        return None, f"plain JSONL: {reference.stderr[-2000:]}"
    return tokenizer, store_files(os.path.join(work, "reference"))
