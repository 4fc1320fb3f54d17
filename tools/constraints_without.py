"""Print a pip constraints file without the packages another requirements file names.

Usage: python tools/constraints_without.py CONSTRAINTS REQUIREMENTS > OUT

setup.sh --with-swanlab uses it so that requirements-swanlab.txt's pins replace the ones in
constraints.txt (e.g. swanlab needs protobuf<7) instead of contradicting them. Names compare
as pip compares them (case, '-', '_' and '.' alike; extras ignored). Comments and blank
lines of CONSTRAINTS are kept. A missing file: one line on stderr, exit 1.
"""

from __future__ import annotations

import re
import sys
from typing import Optional


def package_name(line: str) -> Optional[str]:
    """The normalised package name a requirement line starts with, or None (comment, blank, option)."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line.split("#", 1)[0])
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python tools/constraints_without.py CONSTRAINTS REQUIREMENTS", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as fh:
            own = {package_name(line) for line in fh} - {None}
        with open(argv[0], encoding="utf-8") as fh:
            lines = fh.readlines()
    except OSError as exc:
        print(f"constraints_without: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    sys.stdout.writelines(line for line in lines if package_name(line) not in own)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
