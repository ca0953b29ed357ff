#!/usr/bin/env python3
"""The cache key of each source `make lint` checks: a clang-tidy verdict is a function of the tool,
its configuration, the compile command and the bytes of every file the unit reads, so a source
whose key passed before passes again and need not be parsed (LibTorch's headers make a parse
about 20-30 s on the 2-core CI machine; 125 sources).

usage: lint_keys.py BUILD_DIR TOOL_VERSION_FILE SOURCE...
Prints "SOURCE KEY" for each source, KEY "-" where the build has no valid dependency list for it
(not built yet, or ninja marks it stale): such a source is always checked.
The files a unit reads come from ninja's dependency log (`ninja -t deps`), written when the
object was compiled; scripts/lint.sh builds BUILD_DIR first, so the list is current. Paths under
the checkout enter the key relative to it, so a second clone (CI's) reuses the first one's verdicts.
"""
import hashlib
import json
import os
import shlex
import subprocess
import sys


def read_dependencies(build, outputs):
    """{object: [paths]} for each object whose entry in ninja's log is VALID."""
    text = subprocess.run(["ninja", "-C", build, "-t", "deps", *outputs], capture_output=True,
                          text=True, check=False).stdout
    deps, current = {}, None
    for line in text.splitlines():
        if line and not line[0].isspace():
            name, _, status = line.partition(": #deps")
            current = name if status.rstrip().endswith("(VALID)") else None
            if current:
                deps[current] = []
        elif line.strip() and current:
            deps[current].append(line.strip())
    return deps


def object_of(entry):
    """The object a compile command writes (its -o), as ninja names it."""
    words = entry.get("arguments") or shlex.split(entry["command"])
    return words[words.index("-o") + 1] if "-o" in words else None


def main():
    build, tool_version_file, sources = sys.argv[1], sys.argv[2], sys.argv[3:]
    root = os.getcwd()
    build_abs = os.path.abspath(build)
    units = {}
    for entry in json.load(open(os.path.join(build, "compile_commands.json"))):
        units[os.path.relpath(entry["file"], root)] = entry
    wanted = {s: units[s] for s in sources if s in units and object_of(units[s])}
    deps = read_dependencies(build, [object_of(e) for e in wanted.values()])
    digests = {}

    def digest(path):
        full = path if os.path.isabs(path) else os.path.join(build_abs, path)
        full = os.path.normpath(full)
        if full not in digests:
            with open(full, "rb") as f:
                digests[full] = hashlib.sha256(f.read()).hexdigest()
        shown = os.path.relpath(full, root) if full.startswith(root + os.sep) else full
        return f"{shown} {digests[full]}\n"

    common = hashlib.sha256()
    common.update(open(tool_version_file, "rb").read())
    common.update(open(".clang-tidy", "rb").read())
    for source in sources:
        entry = wanted.get(source)
        files = deps.get(object_of(entry)) if entry else None
        if files is None:
            print(source, "-")
            continue
        key = common.copy()
        command = entry.get("command") or " ".join(entry["arguments"])
        key.update(command.replace(root, ".").encode())
        try:
            for path in [entry["file"], *files]:
                key.update(digest(path).encode())
        except OSError:  # a listed file is gone: the list is not current
            print(source, "-")
            continue
        print(source, key.hexdigest())


if __name__ == "__main__":
    main()
