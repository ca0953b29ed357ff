#!/usr/bin/env python3
"""Pretokenize text with a Hugging Face tokenizer.json into a segtrain token store.

The store is the one `segtrain prepare` writes (docs/architecture.md, "Token store"): Megatron-LM
indexed dataset v1 (`train.{bin,idx}`, `valid.{bin,idx}`), `meta.json`, plus a copy of
the tokenizer. Use it to continue real checkpoints (GPT-2, Pythia, BLOOM) whose
vocabulary is not sentencepiece:

    .venv/bin/python scripts/pretokenize_hf.py --tokenizer gpt2/tokenizer.json \
        --input corpus/ more.jsonl --out store --valid-fraction 0.05

`segtrain prepare --tokenizer HF_DIR` does the same natively (ids equal to transformers,
tests/data/hf_tokenizer_test.py) and also adds BOS where the folder's tokenizer does and
records bos_id/eos_id in meta.json; this script encodes without special tokens and needs
only a tokenizer.json.

Inputs are read like `segtrain prepare` reads them: directories (recursively, sorted)
of .txt/.md/.rst and .gz forms, one document per file; .jsonl(.gz), one document per
line in --text-field. Empty and invalid UTF-8 documents are skipped and counted. EOS
(--eos-token, by default the first of <|endoftext|>, </s>, <eos> in the vocabulary)
follows every document. The train/valid split uses the same rule as segtrain, so the
same documents, seed and fraction give the same split.
"""
import argparse
import gzip
import json
import math
import os
import sys
import tempfile

import numpy as np

MASK = (1 << 64) - 1
MAGIC = b"MMIDIDX\x00\x00"
UINT16_VOCAB_LIMIT = 65500


def fail(message):
    print(f"pretokenize_hf: error: {message}", file=sys.stderr)
    sys.exit(2)


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def mix(a, b):
    return splitmix64(splitmix64(a) ^ ((b * 0xD1342543DE82EF95 + 1) & MASK))


def choose_valid(n, fraction, seed):
    """data::choose_valid_documents: the round(f*n) documents with the smallest keys."""
    if n < 2 or fraction <= 0:
        return set()
    count = min(max(math.floor(fraction * n + 0.5), 1), n - 1)  # std::llround for positive values
    keys = sorted((mix(seed & MASK, d), d) for d in range(n))
    return {d for _, d in keys[:count]}


def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return f.read()
    except OSError as e:
        fail(f"{path}: cannot read ({e})")


def base_name(path):
    return path[:-3] if path.endswith(".gz") else path


def is_text(path):
    return base_name(path).endswith((".txt", ".md", ".rst"))


def is_jsonl(path):
    return base_name(path).endswith((".jsonl", ".json"))


class Corpus:
    def __init__(self, field):
        self.field = field
        self.docs = []
        self.empty = self.invalid = self.files = 0

    def keep(self, raw):
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError:
            self.invalid += 1
            return
        if not text.strip():
            self.empty += 1
            return
        self.docs.append(text)

    def read_jsonl(self, path):
        for number, line in enumerate(read_text(path).split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                self.invalid += 1
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                fail(f"{path}:{number}: not valid JSON ({e})")
            if not isinstance(obj, dict) or not isinstance(obj.get(self.field), str):
                fail(f"{path}:{number}: expected a JSON object with a string field '{self.field}'")
            self.keep(obj[self.field])

    def read(self, path, explicit):
        if is_jsonl(path):
            self.files += 1
            self.read_jsonl(path)
        elif is_text(path):
            self.files += 1
            self.keep(read_text(path))
        elif explicit:
            fail(f"{path}: unsupported input (expected a directory, .txt/.md/.rst or .jsonl, optionally .gz)")

    def add(self, path):
        if os.path.isdir(path):
            files = []
            for root, _, names in os.walk(path):
                files += [os.path.join(root, n) for n in names]
            for f in sorted(files):
                self.read(f, False)
        elif os.path.exists(path):
            self.read(path, True)
        else:
            fail(f"{path}: no such file or directory")


def write_atomic(path, chunks):
    fd, temp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.remove(temp)
        raise


def write_split(prefix, docs, dtype):
    """One Megatron v1 indexed dataset, one sequence per document."""
    item = np.dtype(dtype).itemsize
    sizes = np.array([len(d) for d in docs], dtype=np.int32)
    pointers = np.zeros(len(docs), dtype=np.int64)
    if len(docs) > 1:
        pointers[1:] = np.cumsum(sizes[:-1].astype(np.int64)) * item
    write_atomic(prefix + ".bin", (np.asarray(d, dtype=dtype).tobytes() for d in docs))
    header = MAGIC + np.uint64(1).tobytes() + bytes([8 if dtype == np.uint16 else 4])
    header += np.uint64(len(docs)).tobytes() + np.uint64(len(docs) + 1).tobytes()
    write_atomic(prefix + ".idx", [header, sizes.tobytes(), pointers.tobytes(),
                                   np.arange(len(docs) + 1, dtype=np.int64).tobytes()])
    return int(sizes.sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", required=True, help="HF tokenizer.json")
    ap.add_argument("--input", nargs="+", required=True, help="directories, .txt/.md/.rst(.gz), .jsonl(.gz)")
    ap.add_argument("--out", required=True, help="store directory")
    ap.add_argument("--text-field", default="text")
    ap.add_argument("--valid-fraction", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--eos-token", default=None, help="EOS piece; default: <|endoftext|>, </s> or <eos>")
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="model vocabulary (e.g. 50304 for padded GPT-2/Pythia tables); default: the tokenizer's")
    ap.add_argument("--batch-size", type=int, default=256, help="documents per encode_batch call")
    args = ap.parse_args()
    if not 0 <= args.valid_fraction < 1:
        fail(f"--valid-fraction {args.valid_fraction}: expected a value in [0, 1)")

    try:
        from tokenizers import Tokenizer
    except ImportError:
        fail("the `tokenizers` package is missing: run scripts/setup.sh (it installs it into .venv)")
    try:
        tok = Tokenizer.from_file(args.tokenizer)
    except Exception as e:  # tokenizers raises a bare Exception for unreadable files
        fail(f"{args.tokenizer}: not a HF tokenizer.json ({e})")
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if args.vocab_size is not None:
        if args.vocab_size < vocab:
            fail(f"--vocab-size {args.vocab_size} is smaller than the tokenizer's {vocab} ids")
        vocab = args.vocab_size
    candidates = [args.eos_token] if args.eos_token else ["<|endoftext|>", "</s>", "<eos>"]
    eos = next((tok.token_to_id(c) for c in candidates if tok.token_to_id(c) is not None), None)
    if eos is None:
        fail(f"{args.tokenizer}: no EOS token among {candidates}; name one with --eos-token")

    corpus = Corpus(args.text_field)
    for path in args.input:
        corpus.add(path)
    print(f"pretokenize_hf: read {len(corpus.docs)} documents from {corpus.files} files; skipped "
          f"{corpus.empty} empty and {corpus.invalid} invalid UTF-8 documents", file=sys.stderr)
    if not corpus.docs:
        fail("no usable documents in --input")

    encoded = []
    for start in range(0, len(corpus.docs), args.batch_size):
        batch = tok.encode_batch(corpus.docs[start:start + args.batch_size], add_special_tokens=False)
        encoded += [e.ids + [eos] for e in batch]
    n_bytes = sum(len(d.encode("utf-8")) for d in corpus.docs)
    corpus.docs = None

    os.makedirs(args.out, exist_ok=True)
    meta_path = os.path.join(args.out, "meta.json")
    if os.path.exists(meta_path):
        os.remove(meta_path)  # the store is incomplete until the new meta.json lands
    dtype = np.uint16 if vocab < UINT16_VOCAB_LIMIT else np.int32
    valid = choose_valid(len(encoded), args.valid_fraction, args.seed)
    train_docs = [d for i, d in enumerate(encoded) if i not in valid]
    valid_docs = [d for i, d in enumerate(encoded) if i in valid]
    train_tokens = write_split(os.path.join(args.out, "train"), train_docs, dtype)
    valid_tokens = write_split(os.path.join(args.out, "valid"), valid_docs, dtype)
    with open(args.tokenizer, "rb") as f:
        write_atomic(os.path.join(args.out, "tokenizer.json"), [f.read()])
    meta = {
        "vocab_size": vocab, "tokenizer": "hf:tokenizer.json", "eos_id": eos,
        "documents": len(encoded), "tokens": train_tokens + valid_tokens,
        "dtype": "uint16" if dtype == np.uint16 else "int32",
        "splits": {"train": {"documents": len(train_docs), "tokens": train_tokens},
                   "valid": {"documents": len(valid_docs), "tokens": valid_tokens}},
        "valid_fraction": args.valid_fraction, "seed": args.seed, "format": "megatron-indexed-dataset-v1",
    }
    write_atomic(meta_path, [(json.dumps(meta, indent=2) + "\n").encode()])
    print(f"pretokenize_hf: wrote {args.out}: {len(train_docs)} train documents ({train_tokens} tokens), "
          f"{len(valid_docs)} valid documents ({valid_tokens} tokens), vocabulary {vocab}, eos {eos}, "
          f"{n_bytes / max(1, train_tokens + valid_tokens):.2f} bytes/token", file=sys.stderr)


if __name__ == "__main__":
    main()
