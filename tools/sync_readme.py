"""Copy generated tables into README.md and the pages under docs/ between their markers.

Usage: python -m tools.sync_readme [--check]

Each document (README.md, every docs/*.md and docker/README.md) may hold blocks ``<!-- BEGIN SOURCE -->`` ... ``<!-- END SOURCE -->``. SOURCE is a
key of GENERATORS (a table made from the code that owns its facts: the launcher's knobs, the
health rules, the stacks' version matrix in script_utils.STACK_MATRIX, the reward's policy) or a file path relative to the repository root whose text is the body (e.g.
``benchmarks/results/reward_bench.md``, written by the benchmark scripts). Without ``--check``
the bodies are replaced and each document is rewritten atomically; with ``--check`` nothing is
written and the exit status is 1 when a block is out of date (the test suite runs this). A
marker naming neither is an error (exit 2).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from script_utils import write_text_atomic

REPO = Path(__file__).resolve().parent.parent



def documents() -> list[Path]:
    """README.md, every markdown page under docs/ and docker/README.md: wherever a generated table
    now lives."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "docker" / "README.md"]


BLOCK_RE = re.compile(r"(<!-- BEGIN (?P<file>\S+) -->\n)(?P<body>.*?)(<!-- END (?P=file) -->)", re.S)
#: ``NAME=${NAME:-DEFAULT}  # MEANING`` (optionally exported); MEANING may instead be the comment
#: lines right above the assignment.
KNOB_RE = re.compile(r"^(?:export )?(?P<name>[A-Z_][A-Z0-9_]*)=\$\{(?P=name):-(?P<default>.*?)\}\s*(?:#\s*(?P<meaning>.*))?$")


def knobs(path: Path) -> list[tuple[str, str, str]]:
    """(name, default, meaning) of every top-level knob assignment of a shell script."""
    found, comment = [], []
    for line in path.read_text().splitlines():
        match = KNOB_RE.match(line)
        if match:
            meaning = match.group("meaning") or " ".join(comment)
            found.append((match.group("name"), match.group("default"), meaning))
        comment = comment + [line.lstrip("# ").strip()] if line.startswith("# ") else []
    return found


def knobs_table() -> str:
    """README's Knobs table: the launcher's knobs, then those only the cpu profiles add."""
    launcher = knobs(REPO / "run_qwen2_5_1_5b.sh")
    names = {name for name, _, _ in launcher}
    cpu = [(n, d, f"cpu profiles: {m}") for n, d, m in knobs(REPO / "profiles" / "cpu.sh") if n not in names]

    def cell(text: str) -> str:
        return text.replace("$REPO_DIR/", "").replace("|", "\\|")

    rows = [f"| `{n}` | {'computed' if d.startswith('$(') else f'`{cell(d)}`'} | {cell(m)} |" for n, d, m in launcher + cpu]
    return "\n".join(["| knob | default | meaning |", "|---|---|---|", *rows])


def health_rules() -> str:
    import health_report

    return health_report.rules_markdown()


def stack_matrix() -> str:
    import script_utils

    return script_utils.stack_matrix_markdown()


def docker_images() -> str:
    import script_utils

    return script_utils.docker_images_markdown()


def reward_policy() -> str:
    from tools import reward_policy

    return reward_policy.policy_markdown()


GENERATORS = {"run_qwen2_5_1_5b.sh:knobs": knobs_table, "health_report.py:rules_markdown": health_rules,
              "script_utils.py:stack_matrix_markdown": stack_matrix,
              "script_utils.py:docker_images_markdown": docker_images,
              "tools/reward_policy.py:policy_markdown": reward_policy}


def synced(text: str, where: str = "README.md") -> str:
    """``text`` with every block's body replaced by its generator's output or its file's text."""

    def body(match: re.Match) -> str:
        source = match.group("file")
        if source in GENERATORS:
            new = GENERATORS[source]()
        elif (REPO / source).is_file():
            new = (REPO / source).read_text()
        else:
            raise FileNotFoundError(f"{where}: block names {source}, which is neither a generator nor a file")
        return match.group(1) + new.rstrip("\n") + "\n" + match.group(4)

    return BLOCK_RE.sub(body, text)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.sync_readme",
        description="Copy generated tables (launcher knobs, health rules, the reward policy, benchmarks/results/*.md) into "
                    "README.md and docs/*.md between their <!-- BEGIN SOURCE --> / <!-- END SOURCE --> markers.",
        epilog="Exit status: 0 in sync (or rewritten), 1 out of date with --check, 2 a marker naming an unknown source.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a block is out of date")
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
        print(f"sync_readme: {', '.join(map(str, stale))} out of date: run python -m tools.sync_readme", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
