#!/usr/bin/env python3
"""`segtrain experiment` on a given Hugging Face base, as a user runs it, offline.

The test builds the base itself: a byte-level BPE of a few hundred tokens trained with
`tokenizers` on linux-doc text (BOS added by a template, as Llama 3's), and a tiny
transformers Llama (hidden 32, 2 layers, 2 heads / 1 KV head, max_position_embeddings 64)
briefly trained on other linux-doc text so that its outputs depend on positions, saved with
save_pretrained (config.json, model.safetensors, tokenizer.json, tokenizer_config.json).
The experiment: L_t 32, factor 4 (L_e 128 = 2 x the base's context 64), text `inputs` of
eight linux-doc files with `base: hf:<folder>`, OOTB none / yarn / dynamic_ntk, trained rows
truncate and chunk-0.25 at YaRN on experiment.train_tokens, eval_lengths [32, 64, 128]
with eval_from_longest. Checked against independent paths:

1. the grid's store holds exactly transformers' ids (+ EOS) of every input file, and is
   byte for byte the store `segtrain prepare --tokenizer <folder>` makes with the same
   valid_fraction and seed;
2. the OOTB yarn row at 32, 64 and 128 is exp(mean of the first L-1 per-position losses) of
   `segtrain eval --lengths 128 --per-position` with yarn at factor 2 (= 128 / 64), and at 128
   that eval's own figure; a factor of 4 gives other figures (the comparison can tell);
3. the OOTB dynamic_ntk row is transformers' dynamic rope on the first L tokens of the same
   windows of 128 (one forward a length), and at 32 the base row's and ootb-none's figure;
4. both trained rows trained on train_tokens (within one batch), their final model has YaRN at
   factor 2 over 64 positions, truncate with the truncate sampler (the run's config.yaml);
5. wall_time.json counts the invocation; a second run trains and evaluates nothing, leaves
   every row.json as it was and counts a second invocation; results.md has the by-length
   table and the wall-time line;
6. eval_lengths without L_e is refused: exit 2 naming experiment.eval_lengths;
7. passkey added to the finished grid's eval.tasks scores passkey alone (perplexity kept), on
   every OOTB and trained row but not the base row, with `segtrain eval --tasks passkey`'s
   figures for the same model; a further run scores nothing.
"""
import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from byte_level_bpe import llama3_like_bpe  # noqa: E402
from checks import check, finish, rel, work_dir  # noqa: E402
from megatron_store import read_split  # noqa: E402

DOCS = "/usr/share/doc/linux-doc-6.1/Documentation/process"
# The corpus the grid tokenizes (one document a file).
CORPUS = ["1.Intro.rst.gz", "2.Process.rst.gz", "3.Early-stage.rst.gz", "4.Coding.rst.gz", "5.Posting.rst.gz",
          "6.Followthrough.rst.gz", "7.AdvancedTopics.rst.gz", "8.Conclusion.rst.gz"]
# What the tokenizer and the base are trained on (not the corpus).
PRETRAIN = ["coding-style.rst.gz", "howto.rst.gz", "submitting-patches.rst.gz"]

SEED = 11
L_T, FACTOR, CONTEXT = 32, 4, 64
L_E = L_T * FACTOR              # 128
SCALE = L_E / CONTEXT           # 2: the extension factor over the base's own context
LENGTHS = [32, 64, 128]
TRAIN_TOKENS = 2048
MICRO_BATCH = 4
MAX_SEQUENCES = 4
VALID_FRACTION = 0.25
PREFIX_TOL = 1e-6               # relative, ppl from the printed per-position losses
SAME_TOL = 1e-9                 # relative, the same evaluation by two paths

def say(*parts):
    print("experiment_hf_base:", *parts, file=sys.stderr, flush=True)


def text_of(name):
    return gzip.open(os.path.join(DOCS, name), "rb").read().decode("utf-8")


def segtrain(args, *argv, expect=0):
    t = time.time()
    r = subprocess.run([args.segtrain, *argv], capture_output=True, text=True)
    say(f"segtrain {argv[0]}: exit {r.returncode}, {time.time() - t:.1f} s")
    if expect is not None and r.returncode != expect:
        raise RuntimeError(f"segtrain {' '.join(argv)} exited {r.returncode}: {r.stderr.strip()[-3000:]}")
    return r


# ---------------------------------------------------------------------------------------------
# The base, built here: tokenizer, then a briefly trained tiny Llama.

def build_base(folder):
    import torch
    import transformers
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    texts = [text_of(n) for n in PRETRAIN]
    tok = llama3_like_bpe(texts, 384, reserved=0)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    fast.save_pretrained(folder)
    hf_tok = AutoTokenizer.from_pretrained(folder)

    config = LlamaConfig(vocab_size=len(hf_tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=CONTEXT,
                         rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True, attention_dropout=0.0,
                         bos_token_id=hf_tok.bos_token_id, eos_token_id=hf_tok.eos_token_id)
    model = LlamaForCausalLM(config)
    # A little training at the base's context, so that what it predicts depends on positions.
    ids = torch.tensor([t for ids in hf_tok(texts).input_ids for t in ids + [hf_tok.eos_token_id]])
    windows = ids[: len(ids) // CONTEXT * CONTEXT].view(-1, CONTEXT)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    first = last = None
    for step in range(150):
        batch = windows[torch.randint(0, len(windows), (8,))]
        loss = model(batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        last = float(loss.detach())
        first = first if first is not None else last
    model.eval()
    model.save_pretrained(folder)
    say(f"base: vocabulary {len(hf_tok)}, {sum(p.numel() for p in model.parameters())} parameters, "
        f"training loss {first:.3f} -> {last:.3f} over 150 steps of 8 x {CONTEXT}")
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        check(os.path.exists(os.path.join(folder, f)), f"base: {f} was not written by save_pretrained")
    saved = json.load(open(os.path.join(folder, "config.json")))
    check(saved.get("max_position_embeddings") == CONTEXT, f"base: config.json {saved}")
    return hf_tok


# ---------------------------------------------------------------------------------------------

def experiment_yaml(out, base, inputs, eval_lengths, passkey=""):
    """passkey: the eval.passkey section ("{lengths: [...], trials: N}"), with passkey in eval.tasks."""
    tasks = f", tasks: [perplexity, passkey], passkey: {passkey}" if passkey else ""
    return f"""experiment:
  name: hf-base
  output_dir: {out}
  factors: [{FACTOR}]
  methods: [truncate, chunk-0.25]
  ootb: [none, yarn, dynamic_ntk]
  train_extension: yarn
  train_tokens: {TRAIN_TOKENS}
  eval_lengths: {json.dumps(eval_lengths)}
  eval_from_longest: true
  corpora:
    - name: linux-doc
      inputs: {json.dumps(inputs)}
      base: hf:{base}
      valid_fraction: {VALID_FRACTION}
run: {{seed: {SEED}, threads: 1}}
model: {{arch: llama}}
data: {{train_length: {L_T}}}
train: {{micro_batch_size: {MICRO_BATCH}, lr: 1.0e-3, min_lr: 1.0e-4, warmup_steps: 2, weight_decay: 0.0,
         checkpoint_every: 8, log_every: 4, tensorboard: false}}
eval: {{max_sequences: {MAX_SEQUENCES}{tasks}}}
"""


def load_row(path):
    return json.load(open(path))


def ppl_at(row, length):
    for r in row["results"]:
        if r["length"] == length:
            return r["ppl"]
    return float("nan")


def read_positions(csv_path, length):
    lines = open(csv_path).read().split("\n")
    rows = [line.split(",") for line in lines[1:] if line]
    return [float(loss) for l, _, loss in rows if int(l) == length]


def check_store(args, work, base, tok, store, inputs):
    """1. The grid's store: transformers' ids + EOS, and `segtrain prepare`'s store byte for byte."""
    texts = [text_of(n) for n in CORPUS]
    eos = tok.eos_token_id
    expected = []
    for ids in tok(texts).input_ids:
        expected.append(ids if ids and ids[-1] == eos else ids + [eos])
    train, valid = read_split(os.path.join(store, "train")), read_split(os.path.join(store, "valid"))
    got = train + valid
    check(len(train) > 0 and len(valid) > 0, f"store: {len(train)} train and {len(valid)} valid documents")
    check(len(got) == len(texts), f"store: {len(got)} documents, expected {len(texts)}")
    unmatched = [i for i, g in enumerate(got) if g not in expected]
    check(not unmatched, f"store: documents {unmatched} of train+valid are not transformers' ids of any input "
                         f"(first: {got[unmatched[0]][:12] if unmatched else ''})")
    check(sorted(map(tuple, got)) == sorted(map(tuple, expected)),
          "store: the stored documents are not exactly transformers' ids of the inputs (+ EOS)")
    check(all(g[:1] == [tok.bos_token_id] for g in got), "store: some document does not start with BOS")
    meta = json.load(open(os.path.join(store, "meta.json")))
    check(meta.get("eos_id") == eos and meta.get("bos_id") == tok.bos_token_id and meta.get("vocab_size") == len(tok),
          f"store: meta.json eos {meta.get('eos_id')} bos {meta.get('bos_id')} vocabulary {meta.get('vocab_size')}, "
          f"transformers {eos} {tok.bos_token_id} {len(tok)}")
    record = json.load(open(os.path.join(os.path.dirname(store), "corpus.json")))
    check(record.get("tokenizer", {}).get("base") == base, f"corpus.json: tokenizer {record.get('tokenizer')}")

    prepared = os.path.join(work, "prepared")
    segtrain(args, "prepare", "--input", *inputs, "--out", prepared, "--tokenizer", base,
             "--valid-fraction", str(VALID_FRACTION), "--seed", str(SEED), "--threads", "1")
    for f in ("train.bin", "train.idx", "valid.bin", "valid.idx", "tokenizer.json"):
        a, b = os.path.join(store, f), os.path.join(prepared, f)
        check(os.path.exists(a) and open(a, "rb").read() == open(b, "rb").read(),
              f"store: {f} differs from `segtrain prepare --tokenizer`'s")
    tokens = sum(len(g) for g in got)
    say(f"store: {len(train)} train + {len(valid)} valid documents, {tokens} tokens, all equal to transformers' "
        f"ids + EOS and to `segtrain prepare --tokenizer`'s store")


def check_yarn(args, work, base, store, fdir):
    """2. OOTB yarn, scored from prefixes of the 128-token windows, against `segtrain eval` per position."""
    row = load_row(os.path.join(fdir, "ootb-yarn", "row.json"))
    w = row["evaluated_with"]
    check(w.get("prefixes_of_longest") is True, f"ootb-yarn: evaluated_with {w}")
    check(w.get("overrides") == ["model.extension.method=yarn", f"model.extension.factor={SCALE:g}"],
          f"ootb-yarn: overrides {w.get('overrides')}, expected yarn at factor {SCALE:g}")
    out, csv = os.path.join(work, "yarn.json"), os.path.join(work, "yarn.csv")
    segtrain(args, "eval", "--model", base, "--data", store, "--split", "valid", "--lengths", str(L_E),
             "--max-sequences", str(MAX_SEQUENCES), "--out", out, "--per-position", csv,
             "--set", "model.extension.method=yarn", "--set", f"model.extension.factor={SCALE:g}")
    direct = json.load(open(out))["results"][0]
    pos = read_positions(csv, L_E)
    check(len(pos) == L_E - 1, f"yarn eval: {len(pos)} positions in {csv}")
    worst = 0.0
    for length in LENGTHS:
        want = math.exp(sum(pos[:length - 1]) / (length - 1))
        got = ppl_at(row, length)
        d = rel(got, want)
        worst = max(worst, d)
        check(d < PREFIX_TOL, f"ootb-yarn at {length}: grid ppl {got:.9f}, exp(mean of the first {length - 1} "
                              f"per-position losses at {L_E}) {want:.9f}, relative {d:.2e}")
        r = next(r for r in row["results"] if r["length"] == length)
        check(r["sequences"] == MAX_SEQUENCES and r["tokens"] == MAX_SEQUENCES * (length - 1),
              f"ootb-yarn at {length}: {r['sequences']} windows / {r['tokens']} tokens")
    d128 = rel(ppl_at(row, L_E), direct["ppl"])
    check(d128 < SAME_TOL, f"ootb-yarn at {L_E}: grid {ppl_at(row, L_E):.12f} vs segtrain eval {direct['ppl']:.12f}")
    # The comparison tells factors apart: yarn at 4 (L_e over L_t) scores otherwise.
    other = os.path.join(work, "yarn4.json")
    segtrain(args, "eval", "--model", base, "--data", store, "--split", "valid", "--lengths", str(L_E),
             "--max-sequences", str(MAX_SEQUENCES), "--out", other,
             "--set", "model.extension.method=yarn", "--set", "model.extension.factor=4")
    ppl4 = json.load(open(other))["results"][0]["ppl"]
    check(rel(ppl4, direct["ppl"]) > 1e-4, f"yarn at factor 4 ({ppl4}) scores like factor 2 ({direct['ppl']}): "
                                           "the check cannot tell the factor")
    say(f"ootb-yarn: ppl {[round(ppl_at(row, l), 6) for l in LENGTHS]} at {LENGTHS}; from `segtrain eval` per position "
        f"worst relative difference {worst:.2e}; at {L_E} {d128:.2e}; factor 4 would give {ppl4:.6f} at {L_E}")


def check_dynamic(args, work, base, store, fdir):
    """3. OOTB dynamic_ntk: every length on the first L tokens of the same windows of L_e as the
    other rows, one forward a length (its frequencies depend on the input's length), against
    transformers' dynamic rope on exactly those tokens; the base row at L_t on those windows too."""
    import torch
    from transformers import AutoConfig, LlamaForCausalLM
    row = load_row(os.path.join(fdir, "ootb-dynamic_ntk", "row.json"))
    check(row["evaluated_with"].get("prefixes_of_longest") is True,
          f"ootb-dynamic_ntk: evaluated_with {row['evaluated_with']}")
    # trainer/eval/perplexity.cpp's windows of L_e: non-overlapping, documents in store order, the first MAX_SEQUENCES.
    valid = read_split(os.path.join(store, "valid"))
    windows = [doc[s:s + L_E] for doc in valid for s in range(0, len(doc) - L_E + 1, L_E)][:MAX_SEQUENCES]
    check(len(windows) == MAX_SEQUENCES, f"{len(windows)} windows of {L_E} in the validation split")
    cfg = AutoConfig.from_pretrained(base)
    theta = cfg.rope_parameters["rope_theta"]
    cfg.rope_parameters = {"rope_type": "dynamic", "factor": SCALE, "rope_theta": theta}
    model = LlamaForCausalLM.from_pretrained(base, config=cfg, dtype=torch.float32).eval()
    worst = 0.0
    with torch.no_grad():
        for length in LENGTHS:
            ids = torch.tensor([w[:length] for w in windows])
            loss = model(ids, labels=ids).loss.item()  # the mean over the windows' L-1 predictions each
            d = rel(ppl_at(row, length), math.exp(loss))
            worst = max(worst, d)
            check(d < 1e-5, f"ootb-dynamic_ntk at {length}: grid {ppl_at(row, length):.9f} vs transformers' dynamic "
                            f"rope on the first {length} tokens of the same windows {math.exp(loss):.9f}, relative {d:.2e}")
    # At L_t dynamic NTK leaves the base as it is (L_t < its 64 positions): the base row's figure,
    # which is scored on the same windows, and ootb-none's.
    base_row = load_row(os.path.join(os.path.dirname(fdir), "base-eval", "row.json"))
    none_row = load_row(os.path.join(fdir, "ootb-none", "row.json"))
    for name, other in (("the base row", base_row), ("ootb-none", none_row)):
        d = rel(ppl_at(row, L_T), ppl_at(other, L_T))
        check(d < 1e-9, f"ootb-dynamic_ntk at {L_T}: {ppl_at(row, L_T):.12f}, {name} {ppl_at(other, L_T):.12f}")
    # At L_e it scales, so the figure differs from the unscaled one: the comparison can tell.
    check(rel(ppl_at(row, L_E), ppl_at(none_row, L_E)) > 1e-4, "ootb-dynamic_ntk at L_e equals ootb-none")
    say(f"ootb-dynamic_ntk: grid vs transformers' dynamic rope on the same tokens, worst relative difference "
        f"{worst:.2e}; at {L_T} equal to the base row and ootb-none")


def check_trained(args, work, fdir, base, store):
    """4. The trained rows: the token budget, YaRN at factor 2, the samplers."""
    import yaml
    for key, sampler in (("truncate", "truncate"), ("chunk-0.25", "chunk")):
        run = os.path.join(fdir, key)
        row = load_row(os.path.join(run, "row.json"))
        tokens = row["train_tokens"]
        check(abs(tokens - TRAIN_TOKENS) <= MICRO_BATCH * L_T,
              f"{key}: trained on {tokens} tokens, expected {TRAIN_TOKENS} within one batch ({MICRO_BATCH * L_T})")
        check(row["evaluated_with"].get("prefixes_of_longest") is True, f"{key}: evaluated_with {row['evaluated_with']}")
        check(all(math.isfinite(ppl_at(row, l)) for l in LENGTHS), f"{key}: results {row['results']}")
        mc = json.load(open(os.path.join(run, "final", "model_config.json")))
        ext = mc.get("extension", {})
        check(ext.get("method") == "yarn" and ext.get("factor") == SCALE,
              f"{key}: final/model_config.json extension {ext}, expected yarn at factor {SCALE:g}")
        check(ext.get("original_length") in (None, CONTEXT) and mc.get("max_positions") == CONTEXT,
              f"{key}: final/model_config.json original_length {ext.get('original_length')}, max_positions "
              f"{mc.get('max_positions')}, expected the base's {CONTEXT}")
        cfg = yaml.safe_load(open(os.path.join(run, "config.yaml")))
        check(cfg["data"]["sampler"]["method"] == sampler, f"{key}: config.yaml sampler {cfg['data']['sampler']}")
        if sampler == "chunk":
            check(cfg["data"]["sampler"]["alpha"] == 0.25, f"{key}: config.yaml sampler {cfg['data']['sampler']}")
        check(cfg["data"]["train_length"] == L_T and cfg["data"]["extended_length"] == L_E,
              f"{key}: config.yaml lengths {cfg['data']['train_length']} / {cfg['data']['extended_length']}")
        check(cfg["model"]["init"] == f"hf:{base}", f"{key}: config.yaml model.init {cfg['model']['init']}")
        check(cfg["model"]["extension"]["method"] == "yarn" and float(cfg["model"]["extension"]["factor"]) == SCALE,
              f"{key}: config.yaml extension {cfg['model']['extension']}")
        check(cfg["train"]["budget"]["tokens"] == TRAIN_TOKENS,
              f"{key}: config.yaml budget {cfg['train']['budget']}")
        out = os.path.join(work, f"{key}.json")
        segtrain(args, "eval", "--model", run, "--data", store, "--split", "valid", "--lengths", str(L_E),
                 "--max-sequences", str(MAX_SEQUENCES), "--out", out)
        direct = json.load(open(out))["results"][0]["ppl"]
        check(rel(ppl_at(row, L_E), direct) < SAME_TOL,
              f"{key} at {L_E}: grid {ppl_at(row, L_E):.12f} vs `segtrain eval --model {run}` {direct:.12f}")
        say(f"{key}: {tokens} tokens, sampler {cfg['data']['sampler']['method']}, final extension "
            f"{ext.get('method')} x{ext.get('factor')} (original {ext.get('original_length')}), ppl "
            f"{[round(ppl_at(row, l), 4) for l in LENGTHS]}")


def row_files(out):
    found = {}
    for d, _, names in os.walk(out):
        if "row.json" in names:
            p = os.path.join(d, "row.json")
            found[p] = (os.stat(p).st_mtime_ns, open(p, "rb").read())
    return found


def run(args, work):
    base = os.path.join(work, "base")
    t = time.time()
    tok = build_base(base)
    say(f"base built in {time.time() - t:.1f} s")

    inputs = [os.path.join(DOCS, n) for n in CORPUS]
    out = os.path.join(work, "out")
    xfile = os.path.join(work, "hf-base.yaml")
    open(xfile, "w").write(experiment_yaml(out, base, inputs, LENGTHS))
    t = time.time()
    first = segtrain(args, "experiment", xfile)
    first_seconds = time.time() - t
    store = os.path.join(out, "linux-doc", "store")
    fdir = os.path.join(out, "linux-doc", f"x{FACTOR}")

    check_store(args, work, base, tok, store, inputs)
    check_yarn(args, work, base, store, fdir)
    check_dynamic(args, work, base, store, fdir)
    check_trained(args, work, fdir, base, store)

    # 5. Wall time across invocations; a second run does nothing again.
    wall = json.load(open(os.path.join(out, "wall_time.json")))
    check(wall.get("invocations") == 1 and 0 < wall.get("seconds", 0) <= first_seconds + 1,
          f"wall_time.json after one run: {wall} (the run took {first_seconds:.1f} s)")
    rows = row_files(out)
    check(len(rows) == 1 + 3 + 2, f"{len(rows)} row.json files: {sorted(rows)}")
    for p, (_, data) in rows.items():
        check(json.loads(data).get("eval_seconds", 0) > 0, f"{p}: eval_seconds {json.loads(data).get('eval_seconds')}")
    check("training " in first.stderr, "first run: no 'training ' in its log")
    time.sleep(0.05)  # a rewrite would move the modification time
    second = segtrain(args, "experiment", xfile)
    err = second.stderr
    for key in ("truncate", "chunk-0.25"):
        check(f"linux-doc/x{FACTOR}/{key} is trained" in err, f"second run: '{key} is trained' not in its log")
    for row_dir in ("base-eval", f"x{FACTOR}/ootb-none", f"x{FACTOR}/ootb-yarn", f"x{FACTOR}/ootb-dynamic_ntk",
                    f"x{FACTOR}/truncate", f"x{FACTOR}/chunk-0.25"):
        check(f"{row_dir} is evaluated" in err, f"second run: '{row_dir} is evaluated' not in its log")
    check("training " not in err and "continuing " not in err and "evaluating " not in err
          and "tokenizing " not in err, f"second run trained, evaluated or tokenized something:\n{err[-3000:]}")
    check(row_files(out) == rows, "second run: some row.json changed")
    wall2 = json.load(open(os.path.join(out, "wall_time.json")))
    check(wall2.get("invocations") == 2 and wall2.get("seconds", 0) >= wall["seconds"],
          f"wall_time.json after two runs: {wall2} (after one: {wall})")
    md = open(os.path.join(out, "results.md")).read()
    check("| method | 32 | 64 | 128 |" in md, "results.md: no '| method | 32 | 64 | 128 |' table")
    check("Wall time of the grid so far" in md and "2 runs, each resuming the last" in md,
          "results.md: no 'Wall time of the grid so far' line counting 2 runs")
    results = json.load(open(os.path.join(out, "results.json")))
    check(results.get("invocations") == 2 and abs(results.get("wall_seconds", -1) - wall2["seconds"]) < 5,
          f"results.json: wall_seconds {results.get('wall_seconds')}, invocations {results.get('invocations')}; "
          f"wall_time.json {wall2}")
    say(f"wall time: {wall['seconds']:.3f} s after the first run, {wall2['seconds']:.3f} s over "
        f"{wall2['invocations']} runs; {len(rows)} row.json files untouched by the second")

    # 6. scripts/publish_results.py: the block into a docs folder (results.json without the
    # per-position curves the plots draw), then a rerun's figures checked against that copy.
    docs = os.path.join(work, "docs")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "publish_results.py")
    subprocess.run([sys.executable, script, "publish", out, docs], check=True, capture_output=True)
    published = json.load(open(os.path.join(docs, "results.json")))
    check("position_loss" in json.dumps(results) and "position_loss" not in json.dumps(published)
          and published["corpora"][0]["rows"][-1]["results"] == results["corpora"][0]["rows"][-1]["results"],
          "publish: results.json is not the grid's without position_loss")
    check(open(os.path.join(docs, "results.md")).read() == md and os.listdir(os.path.join(docs, "plots")),
          "publish: results.md or the plots not copied")
    same = subprocess.run([sys.executable, script, "compare", out, docs], capture_output=True, text=True)
    check(same.returncode == 0 and f"{len(rows)} rows compared, 0 difference(s)" in same.stdout,
          f"compare with its own copy: exit {same.returncode}: {same.stdout[-500:]}")
    changed = published["corpora"][0]["rows"][-1]
    changed["results"][-1]["ppl"] *= 1.001
    json.dump(published, open(os.path.join(docs, "results.json"), "w"))
    differs = subprocess.run([sys.executable, script, "compare", out, docs], capture_output=True, text=True)
    check(differs.returncode == 1 and
          f"linux-doc / {changed['label']} (x{changed['factor']}) / ppl at {changed['results'][-1]['length']}:"
          in differs.stdout,
          f"compare after a perplexity moved 0.1%: exit {differs.returncode}: {differs.stdout[-500:]}")

    # 7. Passkey added to the finished grid: perplexity is kept (no row scored again), every
    # OOTB and trained row gains passkey figures that are `segtrain eval --tasks passkey`'s
    # for the same model, and the base row at L_t none (it is the OOTB row without scaling).
    open(xfile, "w").write(experiment_yaml(out, base, inputs, LENGTHS,
                                           passkey="{lengths: [256, 512], trials: 3}"))
    third = segtrain(args, "experiment", xfile)
    check("evaluating " not in third.stderr and "training " not in third.stderr,
          f"adding passkey scored perplexity or trained again:\n{third.stderr[-3000:]}")
    check(third.stderr.count("experiment: passkey of ") == 5, f"passkey rows: {third.stderr.count('experiment: passkey of ')}")
    for p, (_, data) in row_files(out).items():
        before, now = json.loads(rows[p][1]), json.loads(data)
        check(now["results"] == before["results"] and now["evaluated_with"] == before["evaluated_with"],
              f"{p}: perplexity changed when passkey was added")
        if "base-eval" in p:
            check("tasks" not in now, f"{p}: the base row got passkey figures")
            continue
        passkey = now.get("tasks", {}).get("passkey", {}).get("by_length", [])
        check([(q["length"], q["trials"]) for q in passkey] == [(256, 3), (512, 3)], f"{p}: passkey {passkey}")
    yarn = load_row(os.path.join(fdir, "ootb-yarn", "row.json"))
    pk = os.path.join(work, "yarn-passkey.json")
    segtrain(args, "eval", "--model", base, "--data", store, "--lengths", "256,512", "--max-sequences", "1",
             "--tasks", "passkey", "--set", "eval.passkey.trials=3", "--out", pk, "--set", "model.extension.method=yarn",
             "--set", f"model.extension.factor={SCALE:g}")
    direct = [(q["length"], q["correct"]) for q in json.load(open(pk))["tasks"]["passkey"]["by_length"]]
    grid = [(q["length"], q["correct"]) for q in yarn["tasks"]["passkey"]["by_length"]]
    check(grid == direct, f"ootb-yarn passkey {grid} vs segtrain eval {direct}")
    md = open(os.path.join(out, "results.md")).read()
    check("Passkey retrieval" in md and "| method | 256 | 512 |" in md, "results.md: no passkey table")
    # A prompt length too short for the prompt is refused before any work, naming the key.
    open(xfile, "w").write(experiment_yaml(out, base, inputs, LENGTHS,
                                           passkey="{lengths: [64], trials: 3}"))
    short = segtrain(args, "experiment", xfile, expect=None)
    check(short.returncode == 2 and "eval.tasks: corpus 'linux-doc': passkey" in short.stderr and "too short" in short.stderr
          and "evaluat" not in short.stderr,  # refused before the first row is looked at
          f"passkey length 64: exit {short.returncode}: {short.stderr[-600:]}")
    open(xfile, "w").write(experiment_yaml(out, base, inputs, LENGTHS,
                                           passkey="{lengths: [256, 512], trials: 3}"))
    fourth = segtrain(args, "experiment", xfile)
    check("passkey of " not in fourth.stderr and "evaluating " not in fourth.stderr,
          "a fourth run scored passkey again")
    say(f"passkey added to the finished grid: 5 rows scored, perplexity kept; ootb-yarn {direct}")

    # 6. eval_lengths without L_e.
    bad_out = os.path.join(work, "bad-out")
    bad = os.path.join(work, "bad.yaml")
    open(bad, "w").write(experiment_yaml(bad_out, base, inputs, [L_T, 2 * L_T]))
    r = segtrain(args, "experiment", bad, expect=None)
    check(r.returncode == 2, f"eval_lengths without L_e: exit {r.returncode}, expected 2 ({r.stderr.strip()[-500:]})")
    check("experiment.eval_lengths" in r.stderr and f"{L_E} is missing" in r.stderr,
          f"eval_lengths without L_e: message {r.stderr.strip()[-500:]!r}")
    check(not os.path.exists(bad_out), f"eval_lengths without L_e: {bad_out} was written")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--segtrain", required=True)
    ap.add_argument("--keep", help="keep the base, store and grid here")
    args = ap.parse_args()
    for k, v in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("TRANSFORMERS_VERBOSITY", "error")):
        os.environ.setdefault(k, v)
    missing = [n for n in CORPUS + PRETRAIN if not os.path.exists(os.path.join(DOCS, n))]
    if missing:
        print(f"FAIL: linux-doc files missing under {DOCS}: {missing} (is linux-doc-6.1 installed?)", file=sys.stderr)
        sys.exit(1)
    start = time.time()
    with work_dir("segtrain-xhf-", args.keep) as work:
        try:
            run(args, work)
        except RuntimeError as e:
            check(False, str(e))
    finish("experiment_hf_base", time.time() - start)


if __name__ == "__main__":
    main()
