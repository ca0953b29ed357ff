#!/usr/bin/env python3
"""A long-document corpus from Debian's Linux kernel source (linux-source-6.1):
every C file of at least --min-bytes, one JSONL line {"path", "text"} per file,
in path order. Long documents are what an extension to 32k positions trains and
is measured on; linux-doc's prose files are too short (none reaches 120 KB).

    python scripts/kernel_corpus.py --out runs/corpora/linux-c.jsonl

The short documents of the same source, for a mixture's short data (data.mixture: the
study's replay row): every 16th C file of 8,000 to 119,999 bytes, none of them a file of
the long corpus (so none of its held-out files either):

    python scripts/kernel_corpus.py --min-bytes 8000 --max-bytes 120000 --every 16 \
        --out runs/corpora/linux-c-short.jsonl

Skipped: folders of generated register tables (drivers/gpu, drivers/pinctrl,
drivers/clk), whose text is numbers more than code. Idempotent: an output whose
sidecar .json records the same tarball and selection is kept. Exit 2 with one line
when the tarball is missing (scripts/apt-packages-experiments.txt installs it).
"""
import argparse
import hashlib
import json
import os
import sys
import tarfile

from made_record import records

SKIPPED = ("drivers/gpu/", "drivers/pinctrl/", "drivers/clk/")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tarball", default="/usr/src/linux-source-6.1.tar.xz")
    p.add_argument("--out", default="runs/corpora/linux-c.jsonl")
    p.add_argument("--min-bytes", type=int, default=120_000)
    p.add_argument("--max-bytes", type=int, default=None, help="only files shorter than this")
    p.add_argument("--every", type=int, default=1, help="every Nth file that qualifies, in path order")
    a = p.parse_args()
    if a.every < 1 or (a.max_bytes is not None and a.max_bytes <= a.min_bytes):
        print("kernel-corpus: error: --every must be >= 1 and --max-bytes above --min-bytes", file=sys.stderr)
        sys.exit(2)

    if not os.path.isfile(a.tarball):
        print(f"kernel-corpus: error: {a.tarball} does not exist; install Debian's linux-source-6.1 "
              f"(scripts/apt-packages-experiments.txt; `make experiment-smollm2` does)", file=sys.stderr)
        sys.exit(2)
    st = os.stat(a.tarball)
    selection = {"tarball": a.tarball, "tarball_bytes": st.st_size, "tarball_mtime": int(st.st_mtime),
                 "min_bytes": a.min_bytes, "skipped": list(SKIPPED)}
    if a.max_bytes is not None or a.every != 1:  # the long corpus's record stays as it was
        selection.update({"max_bytes": a.max_bytes, "every": a.every})
    sidecar = a.out + ".json"
    if os.path.exists(a.out) and records(sidecar, "selection", selection):
        print(f"kernel-corpus: {a.out} is made", file=sys.stderr)
        return

    docs = []
    with tarfile.open(a.tarball, "r:xz") as tar:
        for member in tar:
            if not member.isfile() or not member.name.endswith(".c") or member.size < a.min_bytes:
                continue
            if a.max_bytes is not None and member.size >= a.max_bytes:
                continue
            path = member.name.split("/", 1)[1] if "/" in member.name else member.name
            if path.startswith(SKIPPED):
                continue
            text = tar.extractfile(member).read().decode("utf-8", errors="replace")
            docs.append((path, text))
    docs.sort()
    docs = docs[::a.every]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + ".tmp"
    digest = hashlib.sha256()
    with open(tmp, "w", encoding="utf-8") as f:
        for path, text in docs:
            line = json.dumps({"path": path, "text": text}, ensure_ascii=False)
            digest.update(line.encode())
            f.write(line + "\n")
    os.replace(tmp, a.out)
    with open(sidecar, "w") as f:
        json.dump({"selection": selection, "documents": len(docs), "bytes": sum(len(t) for _, t in docs),
                   "sha256": digest.hexdigest()}, f, indent=2)
        f.write("\n")
    band = f">= {a.min_bytes}" + ("" if a.max_bytes is None else f" and < {a.max_bytes}")
    every = "" if a.every == 1 else f", every {a.every}th"
    print(f"kernel-corpus: wrote {a.out}: {len(docs)} C files of {band} bytes{every}", file=sys.stderr)


if __name__ == "__main__":
    main()
