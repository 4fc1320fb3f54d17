"""Compare the ALGO variants (algos/*.sh) on the cpu_learn profile, one run after another.

Usage::

    python -m benchmarks.bench_cpu_algos [--algos grpo,dapo,drgrpo] [--output-dir DIR] [--markdown FILE] [--plot FILE.png]
    python -m benchmarks.bench_cpu_algos --output-dir DIR --read-only [--markdown FILE] [--plot FILE.png]

Each variant runs ``PROFILE=cpu_learn ALGO=<algo> bash run_qwen2_5_1_5b.sh`` with OUTPUT_DIR=DIR/<algo>:
the same seed, data, model (SmolLM2-135M-Instruct) and reward (the answer contract's format,
new_math_reward.compute_score, format_only=True). ``--read-only`` reads finished runs instead. Printed per
variant: the training reward ``critic/score/mean`` (for dapo it includes the overlong penalty)
as the mean of the first 3 and of the last 3 global steps, the first global step at which it
reaches 0.3, the mean response length (tokens), the groups dynamic sampling dropped
(``training/filter_groups/evicted_samples``, dapo only), wall time and peak memory.
``--plot`` draws the three reward curves on one chart (matplotlib).
Exit status: 1 when a run failed or logged fewer than 6 global steps, else 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_cpu_run import run_launcher
from grpo_math.health.read import scalars_by_step
from benchmarks import cpu_description, save_chart
from grpo_math.io import write_text_atomic

SCORE = "critic/score/mean"
DROPPED = "training/filter_groups/evicted_samples"
REACH = 0.3  # the reward level whose first step the table gives
#: printed under the table: what the comparison can and cannot tell
NOTE = """What this tells: that each variant's verl keys reach verl 0.9.1's trainer and move the policy on a
reward a 135M model can earn (the answer contract's format), and what each costs on a CPU. What it
cannot tell: MATH accuracy. SmolLM2-135M solves almost no MATH problem, so the correct-answer reward
the variants were designed around is absent; none of these rows says which variant would beat the
reference run on Qwen2.5-1.5B. dapo's reward includes its overlong penalty (down to -1 over the last
fifth of the response budget, here 12 of 64 tokens), weighed against a format reward of at most 1;
dapo and drgrpo have no KL loss, so no ref forward pass."""


def summary(scalars: dict) -> dict:
    score = scalars.get(SCORE, {})
    steps = sorted(score)
    if len(steps) < 6:
        raise ValueError(f"{SCORE}: {len(steps)} global steps logged; expected at least 6")
    length = scalars.get("response_length/mean", {})
    return {"first3": sum(score[s] for s in steps[:3]) / 3, "last3": sum(score[s] for s in steps[-3:]) / 3,
            "reach": next((s for s in steps if score[s] >= REACH), None),
            "length": sum(length.values()) / len(length) if length else None,
            "dropped": int(sum(scalars.get(DROPPED, {}).values())), "steps": len(steps)}


def table(rows: dict[str, dict], header: str) -> str:
    lines = [header, "", f"| ALGO | reward, first 3 steps | reward, last 3 steps | first step at >= {REACH} | "
             "response length (tokens) | groups dropped by dynamic sampling | global steps | wall time (s) | "
             "peak memory (GiB) |", "|---" * 9 + "|"]
    for algo, r in rows.items():
        if "error" in r:
            lines.append(f"| {algo} | {r['error']} |" + " |" * 7)
            continue
        cells = [f"{r['first3']:.3f}", f"{r['last3']:.3f}", str(r["reach"] or "not reached"),
                 f"{r['length']:.1f}" if r["length"] is not None else "-",
                 str(r["dropped"]) if algo == "dapo" else "-", str(r["steps"]),
                 f"{r['wall_s']:.0f}" if r.get("wall_s") else "-",
                 f"{r['peak'] / 2**30:.1f}" if r.get("peak") else "-"]
        lines.append(f"| {algo} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(curves: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    for algo, score in curves.items():
        ax.plot(sorted(score), [score[s] for s in sorted(score)], marker="o", label=f"ALGO={algo}")
    ax.set_ylim(-1, 1)  # dapo's overlong penalty reaches -1
    save_chart(fig, ax, path, "training reward (critic/score/mean)",
               "cpu_learn: SmolLM2-135M-Instruct on the answer contract's format")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--algos", default="grpo,dapo,drgrpo", help="comma list of algos/<name>.sh (default: %(default)s)")
    parser.add_argument("--output-dir", type=Path, help="runs go to DIR/<algo> (default: a temp dir)")
    parser.add_argument("--read-only", action="store_true", help="read the finished runs under --output-dir")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    parser.add_argument("--plot", type=Path, help="write the reward curves PNG here")
    args = parser.parse_args(argv)
    algos = [a for a in args.algos.split(",") if a]
    if args.read_only and not args.output_dir:
        parser.error("--read-only needs --output-dir")
    root = args.output_dir or Path(tempfile.mkdtemp(prefix="bench_cpu_algos-"))
    load = os.getloadavg()[0]
    rows, curves, rc = {}, {}, 0
    for algo in algos:
        run = None if args.read_only else run_launcher(root / algo, [], env_extra={"PROFILE": "cpu_learn", "ALGO": algo})
        events = root / algo / "tensorboard"
        scalars = scalars_by_step(events) if events.is_dir() else {}
        try:
            rows[algo] = summary(scalars)
            curves[algo] = scalars[SCORE]
        except ValueError as exc:
            rows[algo] = {"error": f"{events}: {exc}"}
            rc = 1
        if run is not None:
            rows[algo].update(wall_s=run.wall_s, peak=run.peak_used)
            rc = rc or (1 if run.returncode else 0)
    header = (f"`PROFILE=cpu_learn` with each `ALGO`, one run after another, the same seed and data, on "
              f"{cpu_description()}; load average {load:.2f} at the start.")
    text = table(rows, header) + "\n\n" + NOTE
    print(text)
    if args.markdown:
        write_text_atomic(args.markdown, text + "\n")
    if args.plot and curves:
        plot(curves, args.plot)
    return rc


if __name__ == "__main__":
    sys.exit(main())
