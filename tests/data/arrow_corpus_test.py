#!/usr/bin/env python3
"""`segtrain prepare` reads Parquet files and `datasets` folders as pyarrow writes them, and makes
the store the same documents make in JSONL: a Parquet file of several row groups with a string
column (nulls as empty documents), a large_string column named by --text-field (The Stack's
`content`), a Dataset folder (state.json naming Arrow IPC stream files, as save_to_disk writes
them) and a DatasetDict (dataset_dict.json naming its splits). A damaged file, a column that is
not text and a column that is not there each exit 2 with one line naming the file, and write
nothing. Skips (exit 77) only in a build without Arrow C++, which says so."""
import argparse
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, work_dir  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_reference import prepare, reference_store, store_files  # noqa: E402


def documents():
    words = ["page", "chapter", "über", "naïve", "日本語", "def", "return", "lemma", "proof", "river"]
    return [" ".join(words[(d * 7 + w * 3) % len(words)] for w in range(10 + (d * 37) % 400)) + f" #{d}"
            for d in range(300)]


def write_dataset_folder(folder, table, shards):
    """What datasets' save_to_disk writes: data-0000i-of-0000n.arrow IPC streams and state.json."""
    os.makedirs(folder)
    rows = len(table)
    names = []
    for i in range(shards):
        name = f"data-{i:05d}-of-{shards:05d}.arrow"
        part = table.slice(i * rows // shards, (i + 1) * rows // shards - i * rows // shards)
        with pa.OSFile(os.path.join(folder, name), "wb") as sink, pa.ipc.new_stream(sink, part.schema) as writer:
            writer.write_table(part, max_chunksize=40)
        names.append(name)
    json.dump({"_data_files": [{"filename": n} for n in names], "_fingerprint": "0", "_format_type": None,
               "_split": None}, open(os.path.join(folder, "state.json"), "w"))
    json.dump({"features": {"text": {"dtype": "string", "_type": "Value"}}}, open(os.path.join(folder, "dataset_info.json"), "w"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--segtrain", required=True)
    args = ap.parse_args()
    with work_dir("segtrain-arrow-") as work:
        docs = documents()
        with_nulls = [None if d % 17 == 5 else text for d, text in enumerate(docs)]
        plain = os.path.join(work, "plain.jsonl")
        with open(plain, "w") as f:
            for text in with_nulls:
                f.write(json.dumps({"text": text or ""}) + "\n")
        tokenizer, expected = reference_store(args.segtrain, plain, work)
        if not check(tokenizer is not None, expected):
            finish("arrow_corpus_test")

        parquet = os.path.join(work, "corpus.parquet")
        table = pa.table({"id": list(range(len(docs))), "text": pa.array(with_nulls, pa.string())})
        pq.write_table(table, parquet, row_group_size=70)
        probe = prepare(args.segtrain, [parquet], os.path.join(work, "store-probe"), tokenizer)
        if "built without Apache Arrow" in probe.stderr:
            print(f"SKIPPED: {probe.stderr.strip()}", file=sys.stderr)
            sys.exit(77)
        check(pq.ParquetFile(parquet).num_row_groups == 5, "the Parquet file should have several row groups")

        stack = os.path.join(work, "stack.parquet")
        pq.write_table(pa.table({"content": pa.array(with_nulls, pa.large_string()), "lang": ["c"] * len(docs)}),
                       stack, row_group_size=128, compression="zstd")
        dataset = os.path.join(work, "dataset")
        write_dataset_folder(dataset, pa.table({"text": pa.array(with_nulls, pa.string())}), shards=3)
        dataset_dict = os.path.join(work, "dataset_dict")
        os.makedirs(dataset_dict)
        write_dataset_folder(os.path.join(dataset_dict, "train"), pa.table({"text": pa.array(with_nulls[:200])}), 2)
        write_dataset_folder(os.path.join(dataset_dict, "test"), pa.table({"text": pa.array(with_nulls[200:])}), 1)
        json.dump({"splits": ["train", "test"]}, open(os.path.join(dataset_dict, "dataset_dict.json"), "w"))
        for name, inputs, extra in [("parquet", [parquet], []), ("large_string", [stack], ["--text-field", "content"]),
                                    ("dataset", [dataset], []), ("dataset_dict", [dataset_dict], [])]:
            out = os.path.join(work, f"store-{name}")
            r = prepare(args.segtrain, inputs, out, tokenizer, *extra)
            if check(r.returncode == 0, f"{name}: exit {r.returncode}: {r.stderr[-2000:]}"):
                got = store_files(out)
                check(got == expected, f"{name}: the store differs from plain JSONL's "
                      f"({sorted(k for k in expected if got.get(k) != expected[k])})")
                check("17 empty" in r.stderr or "18 empty" in r.stderr, f"{name}: the nulls are not counted as empty: {r.stderr}")

        # Refusals: one line naming the file, exit 2, nothing written.
        data = open(parquet, "rb").read()
        truncated = os.path.join(work, "truncated.parquet")
        open(truncated, "wb").write(data[: len(data) // 2])
        damaged_stream = os.path.join(work, "damaged")
        write_dataset_folder(damaged_stream, pa.table({"text": pa.array(docs)}), 1)
        arrow_file = os.path.join(damaged_stream, "data-00000-of-00001.arrow")
        open(arrow_file, "r+b").truncate(os.path.getsize(arrow_file) // 2)
        looping = os.path.join(work, "looping")
        os.makedirs(looping)
        json.dump({"splits": ["."]}, open(os.path.join(looping, "dataset_dict.json"), "w"))
        for name, inputs, extra, expect in [
            ("a split that is the folder itself", [looping], [], "splits names '.', which is no Dataset folder"),
            ("truncated", [truncated], [], "Parquet magic bytes not found"),
            ("damaged stream", [damaged_stream], [], "data-00000-of-00001.arrow"),
            ("not text", [parquet], ["--text-field", "id"], "column 'id' holds int64, not text"),
            ("no such column", [parquet], ["--text-field", "body"], "no column 'body' (its columns: id, text"),
        ]:
            out = os.path.join(work, "store-" + name.replace(" ", "-"))
            r = prepare(args.segtrain, inputs, out, tokenizer, *extra)
            errors = [line for line in r.stderr.splitlines() if "error" in line]
            check(r.returncode == 2, f"{name}: exit {r.returncode}, expected 2: {r.stderr[-1000:]}")
            check(len(errors) == 1 and inputs[0].split("/")[-1] in errors[0] and expect in errors[0],
                  f"{name}: expected one error line naming the file and '{expect}': {errors}")
            written = os.listdir(out) if os.path.exists(out) else []
            check(not written, f"{name}: it wrote {written}")
        # The same refusal while a tokenizer trains on the first reading (sentencepiece pulls the
        # documents): the reader's own message, not "no usable documents".
        r = subprocess.run([args.segtrain, "prepare", "--input", parquet, "--out", os.path.join(work, "store-trained"),
                            "--vocab-size", "300", "--text-field", "body"], capture_output=True, text=True)
        check(r.returncode == 2 and "no column 'body' (its columns: id, text" in r.stderr,
              f"a missing column while training a tokenizer: exit {r.returncode}: {r.stderr[-1000:]}")
    finish("arrow_corpus_test")


if __name__ == "__main__":
    main()
