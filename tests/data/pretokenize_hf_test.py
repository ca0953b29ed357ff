#!/usr/bin/env python3
"""scripts/pretokenize_hf.py end to end, offline: the test trains a tiny byte-level
BPE with `tokenizers`, pretokenizes a corpus, checks the Megatron bytes and the
round trip, checks that segtrain reads the store, and that the train/valid split
is exactly the one `segtrain prepare` makes from the same documents and seed."""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from byte_level_bpe import gpt2_like_bpe  # noqa: E402
from checks import check, finish, work_dir  # noqa: E402


def read_split(prefix):
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\x00\x00", "magic"
    version = int(np.frombuffer(idx, np.uint64, 1, 9)[0])
    code = idx[17]
    n, d = (int(x) for x in np.frombuffer(idx, np.uint64, 2, 18))
    sizes = np.frombuffer(idx, np.int32, n, 34)
    pointers = np.frombuffer(idx, np.int64, n, 34 + 4 * n)
    doc_index = np.frombuffer(idx, np.int64, d, 34 + 12 * n)
    dtype = {8: np.uint16, 4: np.int32}[code]
    data = np.fromfile(prefix + ".bin", dtype=dtype)
    item = np.dtype(dtype).itemsize
    docs = [data[p // item:p // item + s].tolist() for p, s in zip(pointers, sizes)]
    return version, code, doc_index.tolist(), docs, len(idx) == 34 + 12 * n + 8 * d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--segtrain", required=True)
    ap.add_argument("--script", required=True)
    args = ap.parse_args()
    with work_dir("segtrain-hf-") as work:
        run(args, work)
    finish("pretokenize_hf")


def run(args, work):
    words = ("river tower garden machine letter window forest bridge market engine island valley "
             "recall the key of is quiet bright small").split()
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=int(rng.integers(40, 160)))) + f" number {i} ." for i in range(40)]

    tok = gpt2_like_bpe(texts, 300)
    tok_path = os.path.join(work, "tokenizer.json")
    tok.save(tok_path)
    eos = tok.token_to_id("<|endoftext|>")

    corpus = os.path.join(work, "corpus")
    os.makedirs(os.path.join(corpus, "txt"))
    with open(os.path.join(corpus, "a.jsonl"), "w") as f:
        for t in texts[:30]:
            f.write(json.dumps({"text": t}) + "\n")
        f.write(json.dumps({"text": "   "}) + "\n")
    for i, t in enumerate(texts[30:]):
        with open(os.path.join(corpus, "txt", f"{i:02d}.txt"), "w") as f:
            f.write(t)
    with open(os.path.join(corpus, "txt", "bad.txt"), "wb") as f:
        f.write(b"\xff\xfe broken")

    def pretokenize(out, fraction, *extra):
        return subprocess.run([sys.executable, args.script, "--tokenizer", tok_path, "--input", corpus, "--out", out,
                               "--valid-fraction", str(fraction), "--seed", "5", *extra],
                              capture_output=True, text=True)

    store = os.path.join(work, "store")
    r = pretokenize(store, 0.3)
    check(r.returncode == 0, f"pretokenize failed: {r.stderr}")
    check("skipped 1 empty and 1 invalid UTF-8" in r.stderr, f"counts not reported: {r.stderr}")
    meta = json.load(open(os.path.join(store, "meta.json")))
    check(meta["eos_id"] == eos and meta["vocab_size"] == tok.get_vocab_size() and meta["dtype"] == "uint16",
          f"meta.json: {meta}")
    check(meta["documents"] == 40 and meta["splits"]["valid"]["documents"] == 12, f"split sizes: {meta}")

    # Megatron bytes, and every document decodes back to its text followed by EOS.
    decoded = []
    for split in ("train", "valid"):
        version, code, doc_index, docs, exact = read_split(os.path.join(store, split))
        check(version == 1 and code == 8 and exact, f"{split}: header")
        check(doc_index == list(range(len(docs) + 1)), f"{split}: document index")
        for d in docs:
            check(d[-1] == eos and eos not in d[:-1], f"{split}: EOS ends each document")
            decoded.append(tok.decode(d[:-1]))
    check(sorted(decoded) == sorted(texts), "documents decode back to the corpus")

    # segtrain reads the store.
    config = os.path.join(work, "c.yaml")
    with open(config, "w") as f:
        f.write(f"data:\n  store: {store}\n  train_length: 16\n  extended_length: 16\n  sampler: {{method: truncate}}\n")
    r = subprocess.run([args.segtrain, "sample", config, "--count", "5", "--out", os.path.join(work, "s.jsonl")],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"segtrain sample on the HF store: {r.stderr}")

    # Same split as segtrain's: re-split an unsplit store with `segtrain prepare`.
    whole = os.path.join(work, "whole")
    check(pretokenize(whole, 0.0).returncode == 0, "pretokenize without a split")
    resplit = os.path.join(work, "resplit")
    r = subprocess.run([args.segtrain, "prepare", "--input", os.path.join(whole, "train.bin"), "--out", resplit,
                        "--vocab-size", str(meta["vocab_size"]), "--valid-fraction", "0.3", "--seed", "5"],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"segtrain prepare from the HF store: {r.stderr}")
    for name in ("train.bin", "train.idx", "valid.bin", "valid.idx"):
        same = open(os.path.join(store, name), "rb").read() == open(os.path.join(resplit, name), "rb").read()
        check(same, f"{name}: the Python split differs from segtrain's")

    # A vocabulary smaller than the tokenizer's is refused with exit 2.
    r = pretokenize(os.path.join(work, "small"), 0.1, "--vocab-size", "10")
    check(r.returncode == 2 and "--vocab-size" in r.stderr, f"small vocabulary: {r.returncode} {r.stderr}")
    # int32 when the vocabulary needs it.
    r = pretokenize(os.path.join(work, "wide"), 0.1, "--vocab-size", "70000")
    check(r.returncode == 0 and read_split(os.path.join(work, "wide", "train"))[1] == 4, "int32 store")


if __name__ == "__main__":
    main()
