"""What both protocols' summaries share: means, accuracies by level or type, the printed table."""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Mapping, Sequence


def mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def by_group(records: Sequence[dict], key: str, judges: Mapping[str, Callable[[dict], float]]) -> dict:
    """{group: {"samples": n, name: mean of judge over the group's records}} for the values of
    ``key`` (level, type; empty ones as "(none)"), sorted."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        groups[r.get(key) or "(none)"].append(r)
    return {name: {"samples": len(rs), **{j: mean([float(f(r)) for r in rs]) for j, f in judges.items()}}
            for name, rs in sorted(groups.items())}


def render(head: str, rows: Sequence[tuple[str, str]], summary: dict, columns: Mapping[str, str]) -> list[str]:
    """The printed report: ``head``, the ``rows`` (label, value) aligned, then a table per level and
    per type with ``columns`` (header: field of by_group's entries)."""
    width = max(len(a) for a, _ in rows)
    lines = [head] + [f"{a:<{width}}  {b}" for a, b in rows]
    for title, key in (("level", "by_level"), ("type", "by_type")):
        groups = summary[key]
        if groups:
            w = max(len(title), *(len(g) for g in groups))
            lines.append(f"{title:<{w}}  samples  " + "  ".join(f"{c:<6}" for c in columns).rstrip())
            lines += [f"{g:<{w}}  {v['samples']:>7}  " + "  ".join(f"{v[f]:.4f}" for f in columns.values())
                      for g, v in groups.items()]
    return lines
