"""Prints bench/results/*.json as one markdown section per benchmark."""
import json
import pathlib
import sys

results = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results")
for path in sorted(results.glob("*.json")):
    data = json.loads(path.read_text())
    print(f"### {path.stem}\n")
    rows = data if isinstance(data, list) else data.get("results", [data])
    keys = []
    for row in rows:
        for k in row:
            if k not in keys and not isinstance(row[k], (dict, list)):
                keys.append(k)
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        cells = []
        for k in keys:
            v = row.get(k, "")
            cells.append(f"{v:.4g}" if isinstance(v, float) else str(v))
        print("| " + " | ".join(cells) + " |")
    print()
