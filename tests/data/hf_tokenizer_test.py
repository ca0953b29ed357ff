#!/usr/bin/env python3
"""`segtrain prepare --tokenizer DIR` against transformers, offline, on a real corpus.

The test builds four HF tokenizer folders itself (no downloads): a GPT-2-like byte-level
BPE (merges written as "a b" strings), a Llama-3-like one (Split regex + ByteLevel,
ignore_merges, <|begin_of_text|> added by a TemplateProcessing post-processor), a
Qwen2-like one (NFC normalizer, Qwen's regex, no BOS, trained without the full byte
alphabet so unseen bytes are dropped) and a Llama-2-like sentencepiece folder
(tokenizer.model beside the tokenizer.json transformers converts from it, add_bos_token).
Each tokenizes the Debian linux-doc corpus (a few MB) plus texts with non-ASCII,
combining accents, digits, contractions, whitespace runs, CRLF, emoji, Unicode spaces
and special tokens written in the text; every stored document must equal
`AutoTokenizer.from_pretrained(DIR)(text).input_ids` followed by EOS (unless it already
ends with EOS). meta.json must carry the folder's BOS/EOS ids, vocabulary and kind, and
bad folders must exit 2 with one line naming the file and field, writing nothing.
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys

import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from byte_level_bpe import gpt2_like_bpe, llama3_like_bpe, qwen2_like_bpe  # noqa: E402
from checks import check, finish, work_dir  # noqa: E402
from megatron_store import read_split  # noqa: E402

EDGE_TEXTS = [
    "Grüße aus Köln! Ça va? Добрый день. 你好，世界。 こんにちは 안녕하세요 العربية हिन्दी",
    "Combining: e\u0301 a\u0308 o\u0302 n\u0303 (NFD) vs é ä ô ñ; ﬁ ligature, Å, K (Kelvin), ℌ",
    "Digits 1234567890 3.14159 2024-11-23 0x1F 1,000,000 ١٢٣ ⅷ ² ½",
    "Contractions: I'm you're he'll we've they'd it's DON'T SHE'S I'M can't o'clock 'tis",
    "Whitespace   runs\t\t\tand   \n\n\n   trailing    \n  \t \n    indented\n\n",
    "CRLF line one\r\nline two\r\n\r\n  line four\r\n",
    "Emoji 👍🏽 🇩🇪 😀😀😀 👨‍👩‍👧 ✨ and symbols ←→ ≠ ∑ € £ ¥ © ™",
    "Unicode spaces: a\u000bb c\u0085d e\u00a0f g\u3000h i\u2009j k\u200bl\ufeffm",
    "Specials in text: <|endoftext|> x <|begin_of_text|>y<|end_of_text|> <|im_start|>user\nhi<|im_end|> <s> </s>",
    "x</s>y </s> z a </s> b<unk>c",
    "  two leading spaces",
    "   leading spaces and a long token ================================================== end",
    "code: for (int i = 0; i < n; ++i) { x[i] += y[i] * 2; } // comment\n\tif (a && b || !c) return -1;",
    " " * 20000 + "x",  # long pre-tokens: whitespace runs, letters, punctuation, newlines
    "a" * 20000,
    "!" * 5000 + " =" * 3000,
    "\n" * 5000 + " 1" + "\r\n" * 3000,
]


def linux_doc(limit_bytes):
    """Documents of Debian's linux-doc (one per file, sorted), up to limit_bytes."""
    root = "/usr/share/doc/linux-doc-6.1/Documentation"
    files = []
    for d, _, names in os.walk(root):
        files += [os.path.join(d, n) for n in names if n.endswith((".rst", ".txt", ".rst.gz", ".txt.gz"))]
    docs, total = [], 0
    for path in sorted(files):
        raw = (gzip.open if path.endswith(".gz") else open)(path, "rb").read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if not text.strip():
            continue
        docs.append(text)
        total += len(raw)
        if total >= limit_bytes:
            break
    return docs


def build_tokenizers(work, train_texts):
    from tokenizers import processors
    from transformers import AutoTokenizer, LlamaTokenizer, PreTrainedTokenizerFast

    folders = {}

    # GPT-2: ByteLevel with its own regex; merges rewritten as "a b" strings (the older format).
    tok = gpt2_like_bpe(train_texts, 3000)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    d = os.path.join(work, "gpt2")
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                            unk_token="<|endoftext|>").save_pretrained(d)
    j = json.load(open(os.path.join(d, "tokenizer.json")))
    j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    json.dump(j, open(os.path.join(d, "tokenizer.json"), "w"), ensure_ascii=False)
    folders["gpt2"] = d

    # Llama 3: Split(regex, isolated) + ByteLevel(use_regex=False), ignore_merges, BOS by a template.
    tok = llama3_like_bpe(train_texts, 3000)
    d = os.path.join(work, "llama3")
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                            eos_token="<|end_of_text|>").save_pretrained(d)
    folders["llama3"] = d

    # Qwen2: NFC, Qwen's regex, no BOS; no full byte alphabet (bytes never seen are dropped).
    tok = qwen2_like_bpe(train_texts, 3000)
    d = os.path.join(work, "qwen2")
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>").save_pretrained(d)
    folders["qwen2"] = d

    # Llama 2: a sentencepiece BPE trained like Llama's (byte fallback, identity normalization,
    # digits split, whitespace kept), saved the way HF Llama-2 folders are: tokenizer.model,
    # transformers' tokenizer.json conversion, tokenizer_config.json with add_bos_token.
    import sentencepiece as spm
    d = os.path.join(work, "llama2")
    os.makedirs(d)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(line for t in train_texts for line in t.split("\n") if line.strip()),
        model_prefix=os.path.join(work, "sp"), vocab_size=3000, model_type="bpe", byte_fallback=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        split_digits=True, allow_whitespace_only_pieces=True, character_coverage=0.9995,
        max_sentence_length=16384, minloglevel=2, unk_id=0, bos_id=1, eos_id=2)
    shutil.copy(os.path.join(work, "sp.model"), os.path.join(d, "tokenizer.model"))
    LlamaTokenizer.from_pretrained(d, add_bos_token=True).save_pretrained(d)  # "<s> $A" in tokenizer.json
    config = json.load(open(os.path.join(d, "tokenizer_config.json")))
    config.update(add_bos_token=True, add_eos_token=False)
    json.dump(config, open(os.path.join(d, "tokenizer_config.json"), "w"), indent=2)
    folders["llama2"] = d

    # The legacy form of Llama-2 folders: tokenizer.json with a Prepend + Replace normalizer,
    # tokenizer_config.json with legacy true (transformers 5 then prepends to every piece).
    legacy = os.path.join(work, "llama2-legacy")
    shutil.copytree(d, legacy)
    j = json.load(open(os.path.join(legacy, "tokenizer.json")))
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    j["pre_tokenizer"] = None
    json.dump(j, open(os.path.join(legacy, "tokenizer.json"), "w"), ensure_ascii=False)
    config["legacy"] = True
    json.dump(config, open(os.path.join(legacy, "tokenizer_config.json"), "w"), indent=2)
    folders["llama2-legacy"] = legacy

    return {name: AutoTokenizer.from_pretrained(path) for name, path in folders.items()}, folders


def run_prepare(args, *extra):
    return subprocess.run([args.segtrain, "prepare", *extra], capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--segtrain", required=True)
    ap.add_argument("--corpus-bytes", type=int, default=3_000_000)
    ap.add_argument("--keep", help="keep the folders and stores here (for bench/ or a look)")
    args = ap.parse_args()
    with work_dir("segtrain-hftok-", args.keep) as work:
        run(args, work)
    finish("hf_tokenizer")


def run(args, work):
    docs = linux_doc(args.corpus_bytes)
    check(len(docs) > 50, f"linux-doc corpus: only {len(docs)} documents (is linux-doc-6.1 installed?)")
    docs += EDGE_TEXTS
    corpus = os.path.join(work, "corpus.jsonl")
    with open(corpus, "w") as f:
        for t in docs:
            f.write(json.dumps({"text": t}) + "\n")
    size = sum(len(t.encode()) for t in docs)
    train_texts = docs[: len(docs) // 3]
    refs, folders = build_tokenizers(work, train_texts)

    for name, tok in refs.items():
        store = os.path.join(work, f"store-{name}")
        r = run_prepare(args, "--input", corpus, "--out", store, "--tokenizer", folders[name],
                        "--valid-fraction", "0", "--threads", "2")
        if r.returncode != 0:
            check(False, f"{name}: prepare exited {r.returncode}: {r.stderr.strip()[-2000:]}")
            continue
        meta = json.load(open(os.path.join(store, "meta.json")))
        eos = tok.eos_token_id
        bos = tok.bos_token_id if tok.bos_token_id is not None else -1
        check(meta["eos_id"] == eos, f"{name}: meta eos_id {meta['eos_id']} != {eos}")
        check(meta["bos_id"] == bos, f"{name}: meta bos_id {meta['bos_id']} != {bos}")
        check(meta["vocab_size"] == len(tok), f"{name}: meta vocab_size {meta['vocab_size']} != {len(tok)}")
        kind = "hf-sentencepiece" if name.startswith("llama2") else "hf-bpe"
        check(meta.get("tokenizer_kind") == kind, f"{name}: tokenizer_kind {meta.get('tokenizer_kind')} != {kind}")
        for f in os.listdir(folders[name]):
            if f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"):
                check(open(os.path.join(store, f), "rb").read() == open(os.path.join(folders[name], f), "rb").read(),
                      f"{name}: the store's {f} is not the folder's")
        got = read_split(os.path.join(store, "train"))
        check(len(got) == len(docs), f"{name}: {len(got)} stored documents, expected {len(docs)}")
        expected = tok(docs).input_ids
        tokens = mismatched = 0
        for i, (g, e) in enumerate(zip(got, expected)):
            if not e or e[-1] != eos:
                e = e + [eos]
            tokens += len(e)
            if g != e:
                mismatched += 1
                if mismatched <= 3:
                    k = next((k for k in range(min(len(g), len(e))) if g[k] != e[k]), min(len(g), len(e)))
                    check(False, f"{name}: document {i} differs at token {k}: segtrain {g[max(0, k - 3):k + 5]} "
                                 f"transformers {e[max(0, k - 3):k + 5]} (text {docs[i][:60]!r})")
        check(mismatched == 0, f"{name}: {mismatched} of {len(docs)} documents differ")
        adds_bos = bos >= 0 and tok("x").input_ids[:1] == [bos]
        check(meta.get("add_bos") == adds_bos, f"{name}: meta add_bos {meta.get('add_bos')} != {adds_bos}")
        check(all((g[:1] == [bos]) == adds_bos for g in got), f"{name}: BOS starts some documents but not all")
        print(f"hf_tokenizer: {name}: {len(docs)} documents, {size / 1e6:.2f} MB, {tokens} tokens, "
              f"{len(docs) - mismatched} identical to transformers", file=sys.stderr)

    # Bad folders: exit 2, one line naming the file and the field, nothing written.
    def bad(label, folder, *needles):
        out = os.path.join(work, "bad-store")
        r = run_prepare(args, "--input", corpus, "--out", out, "--tokenizer", folder)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2, f"{label}: exit {r.returncode}, expected 2 ({r.stderr.strip()})")
        check(len(lines) == 1, f"{label}: expected one line, got {lines}")
        for n in needles:
            check(n in r.stderr, f"{label}: '{n}' not in {r.stderr.strip()!r}")
        check(not os.path.exists(out), f"{label}: {out} was written")

    def folder_with(label, mutate):
        d = os.path.join(work, label)
        shutil.copytree(folders["gpt2"], d)
        path = os.path.join(d, "tokenizer.json")
        j = json.load(open(path))
        mutate(j)
        json.dump(j, open(path, "w"))
        return d

    empty = os.path.join(work, "empty")
    os.makedirs(empty)
    bad("empty folder", empty, "neither tokenizer.model nor tokenizer.json")
    bad("WordPiece", folder_with("wordpiece", lambda j: j["model"].update(type="WordPiece")),
        "tokenizer.json", "model.type", "WordPiece")
    bad("Metaspace", folder_with("metaspace", lambda j: j.update(
        pre_tokenizer={"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True})),
        "tokenizer.json", "pre_tokenizer.type", "Metaspace")
    bad("Lowercase", folder_with("lowercase", lambda j: j.update(normalizer={"type": "Lowercase"})),
        "tokenizer.json", "normalizer.type", "Lowercase")
    bad("bad regex", folder_with("badregex", lambda j: j.update(pre_tokenizer={
        "type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?<x"}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]})),
        "tokenizer.json", "pre_tokenizer.pretokenizers[0].pattern.Regex")
    bad("not JSON", folder_with("notjson", lambda j: None) and _truncate(os.path.join(work, "notjson")),
        "tokenizer.json", "not valid JSON")


def _truncate(folder):
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        f.write('{"model": {"type": "BPE", "vocab": {')
    return folder


if __name__ == "__main__":
    main()
