#!/usr/bin/env python3
"""`segtrain prepare` on a generated JSONL corpus: peak resident memory (the kernel's ru_maxrss of
the process), wall time, MB/s and tokens/s of the whole command and of its encoding (the second
reading: read, encoded on N threads and written, overlapped), at 1 thread and at every core, and
whether the stores they write are the same byte for byte. The tokenizer (sentencepiece, 4,096
pieces) is trained once on the corpus's first 16 MB and given to both runs, so the runs time the
streaming reader, the encoders and the writer. Documents: a pool of 2,000 generated documents of
200-6,000 words (data/synth's vocabulary is not needed: words drawn from 5,000 made-up ones with a
Zipf-like law), each written with its own number in front, until the corpus has --corpus-mb MB.
Prints one JSON object."""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time


def make_corpus(path, megabytes, seed=1234):
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 10))) for _ in range(5000)]
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    pool = []
    for _ in range(2000):
        n = rng.randint(200, 6000)
        text = " ".join(rng.choices(words, weights, k=n))
        pool.append(text)
    target = megabytes * 1_000_000
    written = documents = 0
    with open(path, "w") as f:
        while written < target:
            line = json.dumps({"text": f"document {documents}: " + pool[documents % len(pool)]}) + "\n"
            f.write(line)
            written += len(line)
            documents += 1
    return written, documents


def run_measured(cmd):
    """(returncode, stderr, wall seconds, peak RSS in MiB) of one command."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        err.seek(0)
        text = err.read().decode(errors="replace")
    return os.waitstatus_to_exitcode(status), text, seconds, usage.ru_maxrss / 1024.0


def store_digest(folder):
    h = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        h.update(name.encode())
        with open(os.path.join(folder, name), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--segtrain", required=True)
    ap.add_argument("--corpus-mb", type=int, default=256)
    ap.add_argument("--threads", type=int, nargs="*", default=None, help="default: 1 and every core")
    ap.add_argument("--work", default=None, help="a folder for the corpus and stores (default: a temporary one)")
    args = ap.parse_args()
    if not os.path.exists(args.segtrain):
        print(json.dumps({"benchmark": "prepare_bench", "skipped": f"{args.segtrain} not built"}))
        return
    work = args.work or tempfile.mkdtemp(prefix="segtrain-preparebench-")
    os.makedirs(work, exist_ok=True)
    try:
        corpus = os.path.join(work, "corpus.jsonl")
        corpus_bytes, documents = make_corpus(corpus, args.corpus_mb)
        sample = os.path.join(work, "sample.jsonl")
        with open(corpus) as f, open(sample, "w") as out:
            size = 0
            for line in f:
                out.write(line)
                size += len(line)
                if size >= 16_000_000:
                    break
        code, err, _, _ = run_measured([args.segtrain, "prepare", "--input", sample, "--out",
                                        os.path.join(work, "tokenizer-store"), "--vocab-size", "4096"])
        if code != 0:
            sys.exit(f"prepare_bench: training the tokenizer failed: {err.strip()[-2000:]}")
        tokenizer = os.path.join(work, "tokenizer-store", "tokenizer.model")
        cores = os.cpu_count() or 1
        rows, digests = [], {}
        for threads in args.threads or sorted({1, cores}):
            store = os.path.join(work, f"store-{threads}")
            code, err, seconds, rss = run_measured([args.segtrain, "prepare", "--input", corpus, "--out", store,
                                                    "--tokenizer", tokenizer, "--threads", str(threads)])
            if code != 0:
                sys.exit(f"prepare_bench: prepare at {threads} threads failed: {err.strip()[-2000:]}")
            m = re.search(r"encoded (\d+) documents, (\d+) bytes -> (\d+) tokens in ([0-9.e+-]+) s", err)
            if not m:
                sys.exit("prepare_bench: no 'encoded ...' line in segtrain's log")
            text_bytes, tokens, encode_seconds = int(m.group(2)), int(m.group(3)), float(m.group(4))
            digests[threads] = store_digest(store)
            rows.append({"threads": threads, "seconds": round(seconds, 1), "peak_rss_mib": round(rss, 1),
                         "mb_per_s": round(corpus_bytes / 1e6 / seconds, 2),
                         "encoding_seconds": round(encode_seconds, 1),
                         "encoding_mb_per_s": round(text_bytes / 1e6 / encode_seconds, 2),
                         "tokens_per_s": round(tokens / encode_seconds), "tokens": tokens})
            shutil.rmtree(store)
        print(json.dumps({"benchmark": "prepare_bench", "corpus_mb": round(corpus_bytes / 1e6, 1),
                          "documents": documents, "cores": cores, "runs": rows,
                          "stores_identical": len(set(digests.values())) == 1}))
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
