#!/usr/bin/env bash
# Regenerates the config reference page (docs/configuration.md) from the schema (trainer/config/schema.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD_DIR:-build}/trainer/segtrain
table=$("$BIN" config reference)
TABLE="$table" python3 - <<'PY'
import os, re, pathlib
readme = pathlib.Path("docs/configuration.md")
text = readme.read_text()
begin = re.search(r"<!-- config-reference:begin[^>]*-->\n", text)
end = text.index("<!-- config-reference:end -->")
readme.write_text(text[: begin.end()] + os.environ["TABLE"] + "\n" + text[end:])
PY
