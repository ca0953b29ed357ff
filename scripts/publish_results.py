#!/usr/bin/env python3
"""A finished experiment block into docs/results/, or a rerun checked against it.

  publish_results.py publish RUN_DIR DOCS_DIR   # e.g. runs/experiments/smollm2-noscale docs/results/smollm2-noscale
  publish_results.py compare RUN_DIR DOCS_DIR   # did `make experiment-smollm2-...` reproduce the committed figures?

publish copies results.md, wall_time.json and the plots, and results.json without the
per-position loss curves (the plots draw them; they are most of the file). compare reads
both results.json files and prints every row whose perplexity (relative difference above
--tolerance) or task score differs, or that one of them lacks; exit 1 if any does. Costs
and wall times are the machine's, not compared.
"""
import argparse
import json
import math
import os
import shutil
import sys


def without_position_loss(x):
    if isinstance(x, dict):
        return {k: without_position_loss(v) for k, v in x.items() if k != "position_loss"}
    if isinstance(x, list):
        return [without_position_loss(v) for v in x]
    return x


def publish(run_dir, docs_dir):
    os.makedirs(os.path.join(docs_dir, "plots"), exist_ok=True)
    for name in ("results.md", "wall_time.json"):
        shutil.copyfile(os.path.join(run_dir, name), os.path.join(docs_dir, name))
    plots = os.path.join(run_dir, "plots")
    for name in sorted(os.listdir(plots)) if os.path.isdir(plots) else []:
        if name.endswith(".svg"):
            shutil.copyfile(os.path.join(plots, name), os.path.join(docs_dir, "plots", name))
    with open(os.path.join(run_dir, "results.json")) as f:
        results = without_position_loss(json.load(f))
    with open(os.path.join(docs_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    print(f"published {run_dir} into {docs_dir}")


def figures(results_json):
    """{"corpus / label (factor)": {("ppl", L): value, (task, L): "correct/trials"}}"""
    with open(results_json) as f:
        results = json.load(f)
    out = {}
    for corpus in results["corpora"]:
        for row in [corpus["base"]] + corpus["rows"]:
            got = {("ppl", r["length"]): r["ppl"] for r in row.get("results", [])}
            for task, recorded in row.get("tasks", {}).items():
                for s in recorded["by_length"]:
                    got[(task, s["length"])] = f'{s["correct"]:g}/{s["trials"]}'
            # A label names a row at each factor: the factor tells them apart.
            out[f'{corpus["name"]} / {row["label"]} (x{row.get("factor", 1)})'] = got
    return out


def same(a, b, tolerance):
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    return math.isclose(a, b, rel_tol=tolerance) if numbers else a == b


def compare(run_dir, docs_dir, tolerance):
    mine = figures(os.path.join(run_dir, "results.json"))
    committed = figures(os.path.join(docs_dir, "results.json"))
    differences = []
    for row in sorted(set(mine) | set(committed)):
        if row not in mine or row not in committed:
            differences.append(f"{row}: only in {'the committed' if row in committed else 'these'} results")
            continue
        for what in sorted(set(mine[row]) | set(committed[row]), key=str):
            a, b = mine[row].get(what), committed[row].get(what)
            if not same(a, b, tolerance):
                differences.append(f"{row} / {what[0]} at {what[1]}: {a} here, {b} committed")
    for d in differences:
        print(d)
    rows = len(set(mine) & set(committed))
    print(f"{rows} rows compared, {len(differences)} difference(s) (perplexity to a relative {tolerance:g})")
    return 1 if differences else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["publish", "compare"])
    p.add_argument("run_dir")
    p.add_argument("docs_dir")
    p.add_argument("--tolerance", type=float, default=1e-4, help="relative perplexity difference taken as equal")
    args = p.parse_args()
    for d in [args.run_dir] + ([args.docs_dir] if args.mode == "compare" else []):
        if not os.path.isfile(os.path.join(d, "results.json")):
            print(f"{d}: no results.json (has the block run?)", file=sys.stderr)
            return 2
    if args.mode == "publish":
        publish(args.run_dir, args.docs_dir)
        return 0
    return compare(args.run_dir, args.docs_dir, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
