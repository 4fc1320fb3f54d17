"""Copy generated benchmark tables into README.md between their markers.

Usage: python tools/sync_readme.py [--check]

README.md holds blocks ``<!-- BEGIN FILE -->`` ... ``<!-- END FILE -->`` whose body must be
the text of FILE (a path relative to the repository root, e.g.
``benchmarks/results/reward_bench.md``, written by the benchmark scripts). Without
``--check`` the bodies are replaced and README.md is rewritten atomically; with ``--check``
nothing is written and the exit status is 1 when a block is out of date (the test suite
runs this). A marker naming a missing file is an error (exit 2).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
BLOCK_RE = re.compile(r"(<!-- BEGIN (?P<file>\S+) -->\n)(?P<body>.*?)(<!-- END (?P=file) -->)", re.S)


def synced(text: str) -> str:
    """README text with every block's body replaced by its file's text."""

    def body(match: re.Match) -> str:
        path = REPO / match.group("file")
        if not path.is_file():
            raise FileNotFoundError(f"README.md: block names {match.group('file')}, which does not exist")
        return match.group(1) + path.read_text().rstrip("\n") + "\n" + match.group(4)

    return BLOCK_RE.sub(body, text)


def main(argv: list[str]) -> int:
    text = README.read_text()
    try:
        new = synced(text)
    except FileNotFoundError as err:
        print(f"sync_readme: {err}", file=sys.stderr)
        return 2
    if "--check" in argv:
        if new != text:
            print("sync_readme: README.md is out of date: run python tools/sync_readme.py", file=sys.stderr)
            return 1
        return 0
    tmp = README.with_suffix(".md.tmp")
    tmp.write_text(new)
    os.replace(tmp, README)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
