#!/usr/bin/env python3
"""Reference decodes for data_bpe_decode_test: `tokenizers`' decode(ids, skip_special_tokens=False).

Builds byte-level BPE folders itself (no downloads), trained on Debian's linux-doc: GPT-2-like
(ByteLevel, <|endoftext|>), Llama-3-like (Split regex + ByteLevel, BOS by a template, reserved
specials), Qwen2-like (NFC, Qwen's regex, no full byte alphabet), one whose model has byte_fallback
and "<0xNN>" tokens with a Sequence[ByteFallback, ByteLevel, Fuse] decoder, and one with added tokens
that are not special (with spaces, with byte-level characters, normalized ones). For each it writes
the ids `tokenizers` gives for linux-doc documents and edge texts (with and without specials) and
random id sequences over the whole vocabulary plus ids outside it, each with tokenizers' decode,
to OUT/cases.json: [{"name", "tokenizer_json", "cases": [{"ids": [...], "text": "..."}]}].
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from byte_level_bpe import gpt2_like_bpe, llama3_like_bpe, qwen2_like_bpe  # noqa: E402
from hf_tokenizer_test import EDGE_TEXTS, linux_doc  # noqa: E402


def build(work, train_texts):
    from tokenizers import AddedToken, Tokenizer

    made = {"gpt2": gpt2_like_bpe(train_texts, 2000),
            "llama3": llama3_like_bpe(train_texts, 2000, byte_level_post=False),
            "qwen2": qwen2_like_bpe(train_texts, 2000)}

    # byte_fallback: "<0xNN>" tokens in the vocabulary, decoded by a ByteFallback step first.
    j = json.loads(made["gpt2"].to_str())
    vocab = j["model"]["vocab"]
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab) + 1  # leaves id len(vocab) unused: a hole
    j["model"]["byte_fallback"] = True
    j["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "ByteLevel",
                    "add_prefix_space": True, "trim_offsets": True, "use_regex": True}, {"type": "Fuse"}]}
    made["byte-fallback"] = Tokenizer.from_str(json.dumps(j))

    # Added tokens that are not special: with a space, of byte-level characters, normalized.
    tok = Tokenizer.from_str(made["qwen2"].to_str())
    tok.add_tokens([AddedToken("my token", normalized=False), AddedToken("\u0120zz", normalized=False),
                    AddedToken("\u0120yy", normalized=True), AddedToken("é!", normalized=True),
                    AddedToken("ünï", normalized=False)])
    made["added"] = tok

    paths = {}
    for name, tok in made.items():
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        paths[name] = os.path.join(d, "tokenizer.json")
    return made, paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--corpus-bytes", type=int, default=600_000)
    args = ap.parse_args()
    docs = linux_doc(args.corpus_bytes)
    if len(docs) < 20:
        sys.exit(f"linux-doc corpus: only {len(docs)} documents (is linux-doc-6.1 installed?)")
    texts = docs + EDGE_TEXTS
    made, paths = build(args.out, docs[: len(docs) // 2])
    rng = random.Random(5)
    out = []
    for name, tok in made.items():
        cases = []
        for i, t in enumerate(texts):
            ids = tok.encode(t, add_special_tokens=i % 2 == 0).ids
            cases.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False)})
        n = tok.get_vocab_size(with_added_tokens=True)
        for k in range(300):
            ids = [rng.randrange(n + 3) for _ in range(rng.randrange(1, 40))]
            cases.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False)})
        out.append({"name": name, "tokenizer_json": paths[name], "cases": cases})
        print(f"bpe_decode_reference: {name}: {len(cases)} cases, vocabulary {n}", file=sys.stderr)
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
