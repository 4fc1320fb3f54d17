"""Copy generated tables into README.md and the pages under docs/ between their markers.

A maintenance script, never run by a launch. Each document (README.md, every docs/*.md and
docker/README.md) may hold blocks ``<!-- BEGIN SOURCE -->`` ... ``<!-- END SOURCE -->``. SOURCE is
either ``FILE.py:FUNCTION``, a function of the code that owns the table's facts, returning the
body (e.g. ``grpo_math/knobs.py:knobs_markdown``, the launcher's knobs), or a file path relative
to the repository root whose text is the body (e.g. ``benchmarks/results/reward_bench.md``,
written by the benchmark scripts).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from pathlib import Path
from typing import Optional

from grpo_math.io import write_text_atomic

REPO = Path(__file__).resolve().parent.parent


def documents() -> list[Path]:
    """README.md, every markdown page under docs/ and docker/README.md: wherever a generated table
    lives."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "docker" / "README.md"]


BLOCK_RE = re.compile(r"(<!-- BEGIN (?P<file>\S+) -->\n)(?P<body>.*?)(<!-- END (?P=file) -->)", re.S)


def generated(source: str) -> Optional[str]:
    """The body ``FILE.py:FUNCTION`` returns (FILE imported as a module of the repository), or
    None when ``source`` does not have that shape."""
    file, _, function = source.partition(":")
    if not (file.endswith(".py") and function and (REPO / file).is_file()):
        return None
    return getattr(importlib.import_module(file[:-3].replace("/", ".")), function)()


def synced(text: str, where: str = "README.md") -> str:
    """``text`` with every block's body replaced by its generator's output or its file's text."""
    def body(match: re.Match) -> str:
        source = match.group("file")
        new = generated(source)
        if new is None and (REPO / source).is_file():
            new = (REPO / source).read_text()
        elif new is None:
            raise FileNotFoundError(f"{where}: block names {source}, which is neither a generator nor a file")
        return match.group(1) + new.rstrip("\n") + "\n" + match.group(4)

    return BLOCK_RE.sub(body, text)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m maintenance.sync_readme",
        description=__doc__.split("\n\n", 1)[1].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 in sync (or rewritten atomically), 1 out of date with --check, 2 a marker naming an "
               "unknown source.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a block is out of date (the test suite runs this)")
    check = parser.parse_args(argv).check
    stale = []
    for doc in documents():
        text = doc.read_text()
        try:
            new = synced(text, os.path.relpath(doc, REPO))
        except FileNotFoundError as err:
            print(f"sync_readme: {err}", file=sys.stderr)
            return 2
        if new != text:
            stale.append(os.path.relpath(doc, REPO))
            if not check:
                write_text_atomic(doc, new)
    if stale and check:
        print(f"sync_readme: {', '.join(map(str, stale))} out of date: run python -m maintenance.sync_readme",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
