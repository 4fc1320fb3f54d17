"""The one parser of the recipe's knobs, the ``NAME=${NAME:-DEFAULT}  # MEANING`` lines of its shell scripts:
grpo_math/launch_guard.py typos reads knob names with it, docs/knobs.md is :func:`knobs_markdown`. Standard
library only: the guard runs under the system's python3."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: ``NAME=${NAME:-DEFAULT}  # MEANING`` (optionally exported); MEANING may instead be the comment lines above.
KNOB_RE = re.compile(r"^(?:export )?(?P<name>[A-Z_][A-Z0-9_]*)=\$\{(?P=name):-(?P<default>.*?)\}\s*"
                     r"(?:#\s*(?P<meaning>.*))?$")


def read_knobs(path: Path) -> list[tuple[str, str, str]]:
    """(name, default, meaning) of every top-level knob assignment of a shell script."""
    found, comment = [], []
    for line in path.read_text().splitlines():
        match = KNOB_RE.match(line)
        if match:
            found.append((match.group("name"), match.group("default"), match.group("meaning") or " ".join(comment)))
        comment = comment + [line.lstrip("# ").strip()] if line.startswith("# ") else []
    return found


def knobs_markdown() -> str:
    """docs/knobs.md's table: the launcher's knobs, then those only the cpu profiles add."""
    launcher = read_knobs(REPO / "run_qwen2_5_1_5b.sh")
    names = {name for name, _, _ in launcher}
    cpu = [(n, d, f"cpu profiles: {m}") for n, d, m in read_knobs(REPO / "profiles" / "cpu.sh") if n not in names]

    def cell(text: str) -> str:
        return text.replace("$REPO_DIR/", "").replace("|", "\\|")

    rows = [f"| `{n}` | {'computed' if d.startswith('$(') else f'`{cell(d)}`'} | {cell(m)} |"
            for n, d, m in launcher + cpu]
    return "\n".join(["| knob | default | meaning |", "|---|---|---|", *rows])
