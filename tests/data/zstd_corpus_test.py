#!/usr/bin/env python3
"""`segtrain prepare` reads .jsonl.zst and .txt.zst as Python's `zstandard` writes them (one
frame with its size, a streamed frame without it, several frames in one file, a checksum), and
makes the same store as from the same documents in plain JSONL; a truncated or damaged .zst
exits 2 with one line naming the file, and writes nothing."""
import argparse
import json
import os
import sys

import zstandard

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, work_dir  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_reference import prepare, reference_store, store_files  # noqa: E402


def documents():
    words = ["kernel", "module", "driver", "über", "naïve", "日本語", "struct", "return", "lock", "queue"]
    docs = []
    for d in range(400):
        n = 20 + (d * 37) % 300
        docs.append(" ".join(words[(d * 7 + w * 3) % len(words)] for w in range(n)) + f" #{d}")
    return docs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--segtrain", required=True)
    args = ap.parse_args()
    with work_dir("segtrain-zstd-") as work:
        docs = documents()
        lines = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()
        plain = os.path.join(work, "plain", "corpus.jsonl")
        os.makedirs(os.path.dirname(plain))
        open(plain, "wb").write(lines)
        tokenizer, expected = reference_store(args.segtrain, plain, work)
        if not check(tokenizer is not None, expected):
            return

        # The same documents as zstandard writes them, four ways.
        half = len(lines) // 2
        cut = lines.rfind(b"\n", 0, half) + 1
        variants = {
            "sized": zstandard.ZstdCompressor(level=3).compress(lines),
            "checksum": zstandard.ZstdCompressor(level=19, write_checksum=True).compress(lines),
            "two-frames": zstandard.ZstdCompressor().compress(lines[:cut]) + zstandard.ZstdCompressor().compress(lines[cut:]),
        }
        streamed = os.path.join(work, "streamed.jsonl.zst")
        with open(streamed, "wb") as f, zstandard.ZstdCompressor(level=3).stream_writer(f) as w:
            for start in range(0, len(lines), 4096):
                w.write(lines[start:start + 4096])
        variants["streamed"] = open(streamed, "rb").read()
        check(zstandard.get_frame_parameters(variants["streamed"]).content_size == zstandard.CONTENTSIZE_UNKNOWN,
              "the streamed frame records its size; it should not, to test a frame without it")
        for name, data in variants.items():
            path = os.path.join(work, name, "corpus.jsonl.zst")
            os.makedirs(os.path.dirname(path))
            open(path, "wb").write(data)
            out = os.path.join(work, f"store-{name}")
            r = prepare(args.segtrain, [path], out, tokenizer)
            if check(r.returncode == 0, f"{name}: exit {r.returncode}: {r.stderr[-2000:]}"):
                got = store_files(out)
                check(got == expected, f"{name}: the store differs from plain JSONL's "
                      f"({sorted(k for k in expected if got.get(k) != expected[k])})")

        # A text file compressed: one document, as its .txt.
        text_dir = os.path.join(work, "texts")
        os.makedirs(text_dir)
        for d, doc in enumerate(docs[:50]):  # every other one compressed
            data = zstandard.ZstdCompressor().compress(doc.encode()) if d % 2 else doc.encode()
            open(os.path.join(text_dir, f"{d:03d}.txt" + (".zst" if d % 2 else "")), "wb").write(data)
        plain_texts = os.path.join(work, "plain-texts")
        os.makedirs(plain_texts)
        for d, doc in enumerate(docs[:50]):
            open(os.path.join(plain_texts, f"{d:03d}.txt"), "wb").write(doc.encode())
        a = prepare(args.segtrain, [text_dir], os.path.join(work, "store-texts"), tokenizer)
        b = prepare(args.segtrain, [plain_texts], os.path.join(work, "store-plain-texts"), tokenizer)
        if check(a.returncode == 0 and b.returncode == 0, f".txt.zst: {a.stderr[-1000:]} {b.stderr[-1000:]}"):
            check(store_files(os.path.join(work, "store-texts")) == store_files(os.path.join(work, "store-plain-texts")),
                  ".txt.zst files make another store than the same .txt files")

        # Damaged files: one line naming the file and the cause, exit 2, no store.
        sized = variants["sized"]
        for name, data, cause in [("truncated", sized[: len(sized) * 2 // 3], "truncated zstd data"),
                                  ("garbage", b"this is not zstd at all\n" * 10, "corrupt zstd data"),
                                  ("flipped", sized[:20] + bytes(b ^ 0xFF for b in sized[20:60]) + sized[60:],
                                   "corrupt zstd data")]:
            path = os.path.join(work, f"{name}.jsonl.zst")
            open(path, "wb").write(data)
            out = os.path.join(work, f"store-{name}")
            r = prepare(args.segtrain, [path], out, tokenizer)
            lines_out = [line for line in r.stderr.splitlines() if "error" in line]
            check(r.returncode == 2, f"{name}: exit {r.returncode}, expected 2: {r.stderr[-1000:]}")
            check(len(lines_out) == 1 and path in lines_out[0] and (cause in lines_out[0] or name == "flipped"),
                  f"{name}: expected one error line naming {path} and '{cause}': {lines_out}")
            check("Traceback" not in r.stderr and "terminate called" not in r.stderr, f"{name}: a crash: {r.stderr}")
            written = os.listdir(out) if os.path.exists(out) else []
            check(not written, f"{name}: it wrote {written}")
    finish("zstd_corpus_test")


if __name__ == "__main__":
    main()
