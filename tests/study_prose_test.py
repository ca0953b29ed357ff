#!/usr/bin/env python3
"""Every figure the prose quotes from the published study is the published one (issue 60).

README.md and docs/*.md quote the SmolLM2 study's results: perplexities and paired
differences with their 95% intervals, percentages, wall times. The published results are
docs/results/<block>/{results.md,wall_time.json} (`scripts/publish_results.py publish`;
results.md is rendered from results.json). Prose drifts when a study is rendered again;
this test ties each quoted figure to the published files it comes from and fails on any
that is absent from them or differs.

The convention (invisible in the rendered page):

    <!-- study-figures: docs/results/smollm2-noscale docs/results/smollm2-yarn -->
    ... prose and tables quoting those blocks ...
    <!-- study-figures: end -->

opens and closes a region and names its sources (folders holding results.md and
wall_time.json, relative to the repository root). Inside a region every figure of these
forms must be found in one of its sources:

  - a percentage with its interval, `-29.3% [-40.7%, -16.8%]`: the same three figures in a
    source's results.md (written without signs, `2.0% [1.5%, 2.6%]`, it matches the signed
    one of the same sizes);
  - a perplexity with its interval, `13.10 [7.42, 23.97]`, and a task score,
    `4/5 [0.38, 0.96]`: the same figures in results.md;
  - any other percentage, `+0.5%`, `3.6% to 5.6%`, `4-6%` (each end): a percentage results.md
    prints (unsigned: of that size); 95% (the intervals' level) is not a figure;
  - a time, `13 h 27 min` or `29 min 41 s`: one results.md prints or wall_time.json gives;
    `13 h 27 min over 12 invocations`: the grid's wall time and invocations (wall_time.json);
  - `7 of 8`: a count of agreeing documents results.md prints (`7 of 8 windows ...`).

A figure that is quoted from elsewhere (a measurement from before results.md recorded it, a
figure of the paper) is named in the region, with why:

    <!-- unpublished: "48 min 33 s" "87%" -- block 1's full training, Karypis et al.'s figure -->

and each such figure must occur in the region and must not be published (else the note is
stale). Outside every region no interval may be quoted: a new sentence quoting the study
has to say where its figures come from.

Run: study_prose_test.py [--root REPO]. The test also checks itself: it changes one digit of
a figure of each kind in a copy of the documents, puts back issue 60's stale sentence, and
quotes an interval outside a region, and asserts that the checker reports each.
Exit 0 when the documents pass and every mutation is caught, 1 otherwise.
"""
import argparse
import glob
import json
import os
import re
import sys

NUM = r"[+\-\u2212]?\d+(?:\.\d+)?"
S = r"\s+"  # prose wraps lines inside figures
PATTERNS = [  # (kind, regex); earlier kinds mask the text they match from later ones
    ("wall", re.compile(rf"(\d+){S}h{S}(\d+){S}min{S}over{S}(\d+){S}(?:invocations|runs)\b")),
    ("task", re.compile(rf"(?<![\w.])(\d+)/(\d+){S}\[(\d\.\d+),{S}(\d\.\d+)\]")),
    ("pct_interval", re.compile(rf"(?<![\w.])({NUM})%{S}\[({NUM})%,{S}({NUM})%\]")),
    ("ppl_interval", re.compile(rf"(?<![\w.,/\-+])(\d+(?:\.\d+)?){S}\[(\d+(?:\.\d+)?),{S}(\d+(?:\.\d+)?)\]")),
    ("hm", re.compile(rf"(?<![\w.])(\d+){S}h{S}(\d+){S}min\b")),
    ("ms", re.compile(rf"(?<![\w.])(\d+){S}min{S}(\d+){S}s\b")),
    ("pct_range", re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[\-\u2013](\d+(?:\.\d+)?)%")),
    ("pct", re.compile(rf"(?<![\w.])({NUM})%")),
    ("of", re.compile(rf"(?<![\w.,])(\d+){S}of{S}(\d+)\b(?!,\d)")),
]
REGION = re.compile(r"<!--\s*study-figures:\s*(.*?)\s*-->")
UNPUBLISHED = re.compile(r"<!--\s*unpublished:(.*?)-->", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)


def num(s):
    """A figure as written, without '+' and with an ASCII minus."""
    return s.replace("\u2212", "-").lstrip("+")


def absnum(s):
    return num(s).lstrip("-")


def signed(*values):
    return any(v.strip()[:1] in "+-\u2212" for v in values)


def figures(text):
    """[(kind, key, start, end, as written)] of every figure in text (comments blanked)."""
    text = COMMENT.sub(lambda m: " " * len(m.group(0)), text)
    found = []
    for kind, pattern in PATTERNS:
        masked = []
        for m in pattern.finditer(text):
            found.append((kind, m.groups(), m.start(), m.end(), " ".join(m.group(0).split())))
            masked.append((m.start(), m.end()))
        for a, b in masked:
            text = text[:a] + " " * (b - a) + text[b:]
    return sorted(found, key=lambda f: f[2])


class Published:
    """The figures one source folder publishes, by kind."""

    def __init__(self, folder):
        self.folder = folder
        with open(os.path.join(folder, "results.md"), encoding="utf-8") as f:
            self.text = f.read()
        self.sets = {k: set() for k, _ in PATTERNS}
        self.sets["pct_abs"], self.sets["pct_interval_abs"] = set(), set()
        for kind, g, _, _, _ in figures(self.text):
            if kind == "pct_interval":
                self.sets[kind].add(tuple(num(x) for x in g))
                self.sets["pct_interval_abs"].add((absnum(g[0]), tuple(sorted((absnum(g[1]), absnum(g[2]))))))
                for x in g:
                    self.sets["pct"].add(num(x))
                    self.sets["pct_abs"].add(absnum(x))
            elif kind == "pct":
                self.sets["pct"].add(num(g[0]))
                self.sets["pct_abs"].add(absnum(g[0]))
            elif kind in ("ppl_interval", "task"):
                self.sets[kind].add(tuple(g))
            elif kind in ("hm", "ms", "wall", "of"):
                self.sets[kind].add(tuple(int(x) for x in g))
                if kind == "wall":
                    self.sets["hm"].add(tuple(int(x) for x in g[:2]))
        with open(os.path.join(folder, "wall_time.json"), encoding="utf-8") as f:
            wall = json.load(f)
        minutes = int(wall["seconds"] // 60)
        self.sets["wall"].add((minutes // 60, minutes % 60, int(wall["invocations"])))
        self.sets["hm"].add((minutes // 60, minutes % 60))

    def has(self, kind, g):
        s = self.sets
        if kind == "pct_interval":
            if signed(*g):
                return tuple(num(x) for x in g) in s[kind]
            return (absnum(g[0]), tuple(sorted((absnum(g[1]), absnum(g[2]))))) in s["pct_interval_abs"]
        if kind == "pct":
            return (num(g[0]) in s["pct"]) if signed(g[0]) else (absnum(g[0]) in s["pct_abs"])
        if kind == "pct_range":
            return all(absnum(x) in s["pct_abs"] for x in g)
        if kind in ("ppl_interval", "task"):
            return tuple(g) in s[kind]
        return tuple(int(x) for x in g) in s[kind]

    def near(self, kind, g):
        """Published figures a stale one was likely meant to be (same estimate)."""
        if kind == "pct_interval":
            sign = lambda x: x if x.startswith("-") else "+" + x  # noqa: E731
            return sorted(f"{sign(e)}% [{sign(lo)}%, {sign(hi)}%]" for e, lo, hi in self.sets[kind]
                          if absnum(e) == absnum(g[0]))
        if kind == "ppl_interval":
            return sorted(f"{e} [{lo}, {hi}]" for e, lo, hi in self.sets[kind] if e == g[0])
        if kind == "wall":
            return sorted(f"{h} h {m} min over {n} invocations" for h, m, n in self.sets[kind])
        return []


def regions(name, text):
    """[(sources, start, end, problems)] of a document's study-figures regions."""
    out, problems, opened = [], [], None
    for m in REGION.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        if m.group(1) == "end":
            if opened is None:
                problems.append(f"{name}:{line}: study-figures: end without a region open")
            else:
                out.append((opened[0], opened[1], m.start()))
                opened = None
        elif opened is not None:
            problems.append(f"{name}:{line}: a study-figures region opens inside another (close it first)")
        else:
            opened = (m.group(1).split(), m.end())
            if not opened[0]:
                problems.append(f"{name}:{line}: a study-figures region names no source")
    if opened is not None:
        problems.append(f"{name}: a study-figures region is never closed (<!-- study-figures: end -->)")
    return out, problems


def check(docs, root):
    """Problems (one line each) of docs {name: text}; [] when every figure is published."""
    problems, cache = [], {}
    for name, text in sorted(docs.items()):
        found, region_problems = regions(name, text)
        problems += region_problems
        covered = [(a, b) for _, a, b in found]
        for kind, g, start, _, written in figures(text):
            if kind in ("pct_interval", "ppl_interval", "task") and not any(a <= start < b for a, b in covered):
                line = text.count("\n", 0, start) + 1
                problems.append(f"{name}:{line}: {written}: an interval outside any study-figures region "
                                "(name its published source: tests/study_prose_test.py)")
        for sources, a, b in found:
            line0 = text.count("\n", 0, a) + 1
            pubs = []
            for src in sources:
                folder = os.path.join(root, src)
                if src not in cache:
                    try:
                        cache[src] = Published(folder)
                    except (OSError, ValueError, KeyError) as e:
                        cache[src] = None
                        problems.append(f"{name}:{line0}: source {src}: {e}")
                if cache[src] is not None:
                    pubs.append(cache[src])
            body = text[a:b]
            exempt = set()
            for m in UNPUBLISHED.finditer(body):
                exempt |= {" ".join(x.split()) for x in re.findall(r'"([^"]+)"', m.group(1))}
            seen = set()
            for kind, g, start, _, written in figures(body):
                if kind == "pct" and not signed(g[0]) and g[0] == "95":
                    continue  # the intervals' level
                line = text.count("\n", 0, a + start) + 1
                published = any(p.has(kind, g) for p in pubs)
                if written in exempt:
                    seen.add(written)
                    if published:
                        problems.append(f"{name}:{line}: {written} is marked unpublished but "
                                        f"{' or '.join(sources)} publishes it: drop the note")
                    continue
                if not published:
                    near = sorted({x for p in pubs for x in p.near(kind, g)})
                    hint = f" (published: {'; '.join(near)})" if near else ""
                    problems.append(f"{name}:{line}: {written} is not in {' or '.join(sources)}{hint}")
            for x in sorted(exempt - seen):
                problems.append(f"{name}:{line0}: the region's unpublished note names {x!r}, "
                                "which it does not quote")
    return problems


def read_docs(root):
    paths = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    docs = {}
    for p in paths:
        with open(p, encoding="utf-8") as f:
            docs[os.path.relpath(p, root)] = f.read()
    return docs


def mutated(text, start, end):
    """text with one digit of text[start:end] changed, or None."""
    for i in range(end - 1, start - 1, -1):
        if text[i].isdigit():
            return text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1:]
    return None


def self_check(docs, root):
    """The checker catches a changed digit in a figure of each kind the documents quote, issue
    60's stale interval, and an interval outside a region. Returns the failures (empty when all
    are caught)."""
    failures, caught, kinds = [], set(), set()
    for name, text in sorted(docs.items()):
        for sources, a, b in regions(name, text)[0]:
            try:
                pubs = [Published(os.path.join(root, s)) for s in sources]
            except (OSError, ValueError, KeyError):
                continue  # check() reports the source
            body = text[a:b]
            exempt = {" ".join(x.split()) for m in UNPUBLISHED.finditer(body) for x in re.findall(r'"([^"]+)"', m.group(1))}
            for kind, g, start, end, written in figures(body):
                if kind in caught or written in exempt or (kind == "pct" and g[0] == "95"):
                    continue
                if not any(p.has(kind, g) for p in pubs):
                    continue  # already reported by check()
                kinds.add(kind)
                copy = dict(docs)
                copy[name] = mutated(text, a + start, a + end)
                new = figures(copy[name][a + start:a + end])
                if not new or new[0][0] != kind or any(p.has(kind, new[0][1]) for p in pubs):
                    continue  # the changed digit made another figure, or a published one: try the next
                if any(new[0][4] in p for p in check(copy, root)):
                    caught.add(kind)
                    print(f"mutation caught: {name}: {written} -> {new[0][4]}")
                else:
                    failures.append(f"mutation NOT caught: {name}: {written} -> {new[0][4]}")
                    caught.add(kind)
    for kind in sorted(kinds - caught):
        failures.append(f"no figure of kind {kind} could be mutated into an unpublished one")
    for kind in ("pct_interval", "ppl_interval", "pct", "hm", "wall"):
        if kind not in kinds:
            failures.append(f"no published figure of kind {kind} in any region: the self-check did not run for it")
    # Issue 60's stale sentence: the pooled interval of DA at 32,768 (results.md: [+0.8%, +7.5%]).
    for name, text in sorted(docs.items()):
        for sources, a, b in regions(name, text)[0]:
            if "docs/results/smollm2-noscale" in sources and "+4.1% [+0.8%, +7.5%]" in " ".join(text[a:b].split()):
                i = text.index("+0.8%", a)
                copy = dict(docs)
                copy[name] = text[:i] + "+1.1%, +7.2%]" + text[text.index("]", i) + 1:]
                if any("+4.1% [+1.1%, +7.2%]" in p for p in check(copy, root)):
                    print(f"stale interval caught: {name}: +4.1% [+1.1%, +7.2%]")
                else:
                    failures.append(f"stale interval NOT caught: {name}: +4.1% [+1.1%, +7.2%]")
                break
        else:
            continue
        break
    else:
        failures.append("no region quotes DA's +4.1% [+0.8%, +7.5%] to put issue 60's stale interval in")
    copy = dict(docs)
    copy["README.md"] = docs["README.md"] + "\nAn unsourced claim: 1.234 [1.000, 2.000].\n"
    if any("outside any study-figures region" in p for p in check(copy, root)):
        print("interval outside a region caught")
    else:
        failures.append("an interval outside a region was NOT caught")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    docs = read_docs(root)
    problems = check(docs, root)
    for p in problems:
        print(p)
    n = sum(1 for name, text in docs.items() for _, a, b in regions(name, text)[0] for _ in figures(text[a:b]))
    print(f"{n} figures in study-figures regions checked, {len(problems)} not published as quoted")
    failures = self_check(docs, root)
    for f in failures:
        print(f)
    return 1 if problems or failures else 0


if __name__ == "__main__":
    sys.exit(main())
