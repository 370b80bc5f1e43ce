"""Every code block of README.md and docs/*.md runs as printed.

A fenced block names its language: `sh` blocks run, `c`, `python` and
`yaml` blocks are written to the file named by a `<!-- file: NAME -->`
comment on the line before them (a later `sh` block compiles or runs it),
and `text` blocks are output or synopses. A `text` block after a
`<!-- doc-test: expect -->` comment lists lines the `sh` block before it
must print (stdout and stderr). An `sh` block after `<!-- doc-test: skip
(REASON) -->` is not run, for the reason given.

The `sh` blocks of one document run in order in one bash (set -euo
pipefail), so a variable or file one block makes serves the later ones,
in a scratch directory that holds links to the source tree's specs/,
examples/, tests/, runtime/ and compiler/ (headers), a copy of python/,
and a link to the build tree as build/. HOME is a directory of the
scratch, and PATH starts with the build's compiler/, where docs/ expect
`attnc`.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
BUILD = Path(os.environ.get("ATTNC_BUILD_DIR", ROOT / "build"))
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
LANGS = {"sh", "c", "python", "yaml", "text"}
FENCE = re.compile(r"^```(\S*)\s*$")
MARK = re.compile(r"^<!-- (file: (\S+)|doc-test: (skip|expect)(.*)) -->$")


def blocks(path):
    """(line, lang, text, mark) of each fenced block; mark is the comment
    on the line before it (or None)."""
    lines = path.read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        if j == len(lines):
            raise AssertionError("%s:%d: the block never closes" % (path.name, start + 1))
        prev = lines[start - 1] if start > 0 else ""
        mark = MARK.match(prev)
        out.append((start + 1, lang, "\n".join(lines[start + 1:j]) + "\n", mark))
        i = j + 1
    return out


def scratch_dir(tmp):
    for name in ("specs", "examples", "tests", "runtime", "compiler"):
        (tmp / name).symlink_to(ROOT / name)
    # a copy: pip builds in the tree it installs from, and the source tree
    # is not this test's to write (test_install copies it at the same time)
    shutil.copytree(ROOT / "python", tmp / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (tmp / "build").symlink_to(BUILD)
    (tmp / "home").mkdir()
    env = dict(os.environ)
    env.pop("ATTNC_LIB_DIR", None)  # the docs' commands find the libraries themselves
    env.update(HOME=str(tmp / "home"),
               PATH="%s:%s" % (BUILD / "compiler", env.get("PATH", "")))
    return env


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_blocks_run_as_printed(doc, tmp_path):
    bs = blocks(doc)
    script = ["set -euo pipefail"]
    expects = {}  # sh block index -> lines its output must hold
    runs = []     # (index, line) of each sh block run
    last_sh = None
    for line, lang, text, mark in bs:
        where = "%s:%d" % (doc.relative_to(ROOT), line)
        assert lang in LANGS, "%s: a block's language must be one of %s, not %r" % (
            where, sorted(LANGS), lang)
        if mark and mark.group(2):
            assert lang != "sh" and lang != "text", "%s: file: marks c, python or yaml" % where
            (tmp_path / mark.group(2)).write_text(text)
            continue
        if lang == "text" and mark and mark.group(3) == "expect":
            assert last_sh is not None, "%s: expect follows no sh block" % where
            expects[last_sh] = [l for l in text.split("\n") if l.strip()]
            continue
        if lang != "sh":
            continue
        if mark and mark.group(3) == "skip":
            assert mark.group(4).strip(), "%s: a skip says why" % where
            last_sh = None
            continue
        k = len(runs)
        runs.append(line)
        last_sh = k
        script.append("echo %d > .doc_block\n{\n%s} > .doc_out.%d 2>&1" % (k, text, k))
    if not runs:
        return  # nothing to run: the blocks' languages and marks were checked
    env = scratch_dir(tmp_path)
    r = subprocess.run(["bash", "-c", "\n".join(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=900)
    done = int((tmp_path / ".doc_block").read_text()) if (tmp_path / ".doc_block").exists() else 0
    out = lambda k: (tmp_path / (".doc_out.%d" % k)).read_text()
    if r.returncode != 0:
        pytest.fail("%s:%d: the block failed (exit %d):\n%s%s" % (
            doc.relative_to(ROOT), runs[done], r.returncode, out(done), r.stderr))
    for k, want in expects.items():
        got = out(k)
        for w in want:
            assert w in got, "%s:%d: the output lacks %r:\n%s" % (
                doc.relative_to(ROOT), runs[k], w, got)
