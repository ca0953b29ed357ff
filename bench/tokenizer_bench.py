#!/usr/bin/env python3
"""Encode throughput of `segtrain prepare --tokenizer DIR` against the Python `tokenizers`
library (Rust) on the same corpus, side by side: the Debian linux-doc corpus and the
tokenizer folders tests/data/hf_tokenizer_test.py builds (GPT-2-, Llama-3- and Qwen2-like
byte-level BPEs, vocabulary 3000; a Llama-2-like sentencepiece). segtrain's figure is the
encoding time `prepare` logs (its second reading of the corpus, encoded on N threads while it is
read and the store written, data/encode_pipeline.h; the first reading, which counts the
documents, excluded); Python's is the
time of encode() per document (1 thread) or encode_batch (all threads), with the same
special tokens. Prints one JSON object."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
import hf_tokenizer_test as t  # noqa: E402


def native(segtrain, corpus, folder, store, threads):
    r = subprocess.run([segtrain, "prepare", "--input", corpus, "--out", store, "--tokenizer", folder,
                        "--valid-fraction", "0", "--threads", str(threads)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tokenizer_bench: segtrain prepare failed: {r.stderr.strip()}")
    m = re.search(r"encoded (\d+) documents, (\d+) bytes -> (\d+) tokens in ([0-9.e+-]+) s", r.stderr + r.stdout)
    if not m:
        sys.exit("tokenizer_bench: no 'encoded ...' line in segtrain's log")
    return int(m.group(2)), int(m.group(3)), float(m.group(4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--segtrain", required=True)
    ap.add_argument("--corpus-bytes", type=int, default=8_000_000)
    args = ap.parse_args()
    if not os.path.exists(args.segtrain):
        print(json.dumps({"benchmark": "tokenizer_bench", "skipped": f"{args.segtrain} not built"}))
        return
    work = tempfile.mkdtemp(prefix="segtrain-tokbench-")
    docs = t.linux_doc(args.corpus_bytes)
    corpus = os.path.join(work, "corpus.jsonl")
    with open(corpus, "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    nbytes = sum(len(d.encode()) for d in docs)
    refs, folders = t.build_tokenizers(work, docs[: len(docs) // 8])
    threads = os.cpu_count() or 1
    rows = []
    for name, ref in refs.items():
        backend = ref.backend_tokenizer
        row = {"tokenizer": name, "kind": "sentencepiece" if name.startswith("llama2") else "byte-level BPE"}
        for n in (1, threads):
            b, tokens, seconds = native(args.segtrain, corpus, folders[name], os.path.join(work, f"s-{name}"), n)
            row[f"segtrain_mb_s_{n}t"] = round(b / 1e6 / seconds, 2)
        start = time.perf_counter()
        for d in docs:
            backend.encode(d)
        row["tokenizers_mb_s_1t"] = round(nbytes / 1e6 / (time.perf_counter() - start), 2)
        start = time.perf_counter()
        backend.encode_batch(docs)
        row[f"tokenizers_mb_s_{threads}t"] = round(nbytes / 1e6 / (time.perf_counter() - start), 2)
        row["tokens"] = tokens
        rows.append(row)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"benchmark": "tokenizer_bench", "corpus": "linux-doc-6.1", "documents": len(docs),
                      "bytes": nbytes, "threads": threads, "vocab": 3000, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
