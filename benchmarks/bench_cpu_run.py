"""Time the CPU profile's GRPO run phase by phase and measure its peak memory.

Usage::

    python -m benchmarks.bench_cpu_run [--output-dir DIR] [--markdown FILE] [-- EXTRA_HYDRA_OVERRIDES...]
    python -m benchmarks.bench_cpu_run --run-dir DIR        # only read an existing run
    python -m benchmarks.bench_cpu_run --compare REF [--rounds N] [--markdown FILE]
    python -m benchmarks.bench_cpu_run --compare-runs REF_DIR NEW_DIR [--step N] [--markdown FILE]

``--compare REF`` measures this checkout against a git commit side by side in one
invocation: REF is checked out into a temporary git worktree (sharing this checkout's
``.venv``, ``.venv-current``, ``models/`` and ``data/verl/``), and the two launchers run in turns,
REF first, ``--rounds`` times each, so that a busy machine slows both alike. The table gives each
phase's mean seconds per GRPO step for REF and for this checkout, and their ratio.
``--compare-runs`` makes the same table from two runs that already finished (for a REF too
slow to run in rounds), optionally for one global step (``--step``).

Runs ``DEVICE=cpu bash run_qwen2_5_1_5b.sh`` (profiles/cpu.sh: SmolLM2-135M-Instruct, MATH Level
1, 2 GRPO steps) with OUTPUT_DIR=DIR, samples the memory of the launcher's whole process tree
(driver, Ray, TaskRunner, the actor/ref/rollout worker) every 0.5 s, then prints one markdown
table of verl's per-phase timings (``timing_s/*`` from the run's TensorBoard events, seconds)
per global step, and a second of run-level facts: wall time (s), peak memory (GiB, the sum of
resident set sizes over the tree: an upper bound, shared pages counted once per process),
reward and response statistics (``critic/score/mean``, ``response_length/mean`` in tokens,
``response_length/clip_ratio``, validation ``acc/mean@1``).

Phase meanings (verl 0.9.1 ``ray_trainer.fit``, the cpu profile's stack): gen = rollout generation,
old_log_prob / ref = log-probabilities under the actor / reference policy, adv = GRPO advantages,
update_actor = the PPO update, update_weights = the actor's weights sent to the vLLM rollout,
testing = validation, save_checkpoint, step = the step timer, which closes before testing.
Exit status: the launcher's (the tables are printed either way when events exist).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from health_report import scalars_by_step  # TensorBoard's reader, one place
from script_utils import cpu_description, positive_int, write_text_atomic

REPO = Path(__file__).resolve().parent.parent
PHASES = ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "testing", "save_checkpoint",
          "step")
RUN_FACTS = ("critic/score/mean", "response_length/mean", "response_length/clip_ratio", "perf/throughput")


def tree_rss_bytes(pid: int) -> int:
    """Sum of RSS (bytes) of ``pid`` and all its descendants; 0 once it is gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def run_launcher(output_dir: Path, extra: list[str], repo: Path = REPO,
                 env_extra: dict[str, str] | None = None) -> tuple[int, float, int]:
    """Run ``repo``'s launcher on CPU (the cpu profile unless ``env_extra`` names another);
    return (exit status, wall seconds, peak tree RSS bytes)."""
    env = {**os.environ, "DEVICE": "cpu", "OUTPUT_DIR": str(output_dir), **(env_extra or {})}
    start = time.monotonic()
    proc = subprocess.Popen(["bash", str(repo / "run_qwen2_5_1_5b.sh"), *extra], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss_bytes(proc.pid))
            done.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rc = proc.wait()
    done.set()
    sampler.join()
    return rc, time.monotonic() - start, peak


def tables(scalars: dict[str, dict[int, float]], wall_s: float | None, peak_bytes: int | None) -> str:
    """Markdown: per-phase seconds by global step, then run-level facts."""
    steps = sorted(scalars.get("timing_s/step", {}))
    lines = ["| phase (s) | " + " | ".join(f"step {s}" for s in steps) + " | mean |",
             "|---" * (len(steps) + 2) + "|"]
    for phase in PHASES:
        values = scalars.get(f"timing_s/{phase}", {})
        if not values:
            continue
        cells = [f"{values[s]:.1f}" if s in values else "-" for s in steps]
        mean = sum(values.values()) / len(values)
        lines.append(f"| {phase} | " + " | ".join(cells) + f" | {mean:.1f} |")
    lines += ["", "| run | value |", "|---|---|"]
    if wall_s is not None:
        lines.append(f"| wall time, launcher start to exit (s) | {wall_s:.0f} |")
    if peak_bytes is not None:
        lines.append(f"| peak memory, sum of RSS over the process tree (GiB) | {peak_bytes / 2**30:.1f} |")
    for tag in RUN_FACTS:
        for step, value in sorted(scalars.get(tag, {}).items()):
            lines.append(f"| {tag} @ step {step} | {value:.3f} |")
    for tag, values in sorted(scalars.items()):
        if tag.startswith("val-core/"):
            for step, value in sorted(values.items()):
                lines.append(f"| {tag} @ step {step} | {value:.3f} |")
    return "\n".join(lines)


def checkout(ref: str, where: Path) -> Path:
    """A detached git worktree of ``ref`` at ``where`` that shares this checkout's installed
    environment, model and prepared data (all git-ignored, so absent from a worktree)."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), ref],
                   check=True, capture_output=True, text=True)
    for shared in (".venv", ".venv-current", "models", "data/verl"):
        if (REPO / shared).exists():
            (where / shared).parent.mkdir(parents=True, exist_ok=True)
            (where / shared).symlink_to(REPO / shared)
    return where


def mean_per_step(scalars: dict[str, dict[int, float]], phase: str) -> float | None:
    values = scalars.get(f"timing_s/{phase}", {})
    return sum(values.values()) / len(values) if values else None


def compare(ref: str, rounds: int, extra: list[str]) -> tuple[int, str]:
    """Run REF's launcher and this checkout's in turns; markdown of mean seconds per step."""
    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="bench_cpu_compare-"))
    ref_repo = checkout(ref, work / "ref")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    names = {"ref": ref, "new": f"{head}{' + uncommitted changes' if dirty else ''}"}
    runs: dict[str, list[tuple[dict, float, int]]] = {"ref": [], "new": []}
    status = 0
    try:
        for i in range(rounds):
            for label, repo in (("ref", ref_repo), ("new", REPO)):
                out = work / f"{label}_{i}"
                rc, wall_s, peak = run_launcher(out, extra, repo)
                status = status or rc
                events = out / "tensorboard"
                runs[label].append((scalars_by_step(events) if events.is_dir() else {}, wall_s, peak))
                print(f"bench_cpu_run: {label} round {i + 1}: exit {rc}, {wall_s:.0f} s", file=sys.stderr)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(ref_repo)], capture_output=True)

    header = (f"Side by side, {rounds} run(s) each in turns: ref = `{names['ref']}`, new = `{names['new']}`; "
              f"seconds per GRPO step (mean over the run's steps and rounds); {cpu_description()}, "
              f"load average {load:.2f} at the start.")
    return status, side_by_side(runs, header)


def side_by_side(runs: dict[str, list[tuple[dict, float | None, int | None]]], header: str,
                 step: int | None = None) -> str:
    """Markdown: each phase's seconds per step for ``ref`` and ``new`` (the mean over steps and
    runs, or global step ``step`` only) and their ratio; wall time and peak memory when known."""

    def value(label: str, phase: str) -> float | None:
        if step is None:
            found = [v for sc, _, _ in runs[label] if (v := mean_per_step(sc, phase)) is not None]
        else:
            found = [sc[f"timing_s/{phase}"][step] for sc, _, _ in runs[label] if step in sc.get(f"timing_s/{phase}", {})]
        return sum(found) / len(found) if found else None

    lines = [header, "", "| phase (s per step) | ref | new | ref / new |", "|---|---|---|---|"]
    for phase in PHASES:
        a, b = value("ref", phase), value("new", phase)
        if a is None and b is None:
            continue
        ratio = f"{a / b:.1f}x" if a and b else "-"
        lines.append(f"| {phase} | {'-' if a is None else f'{a:.1f}'} | {'-' if b is None else f'{b:.1f}'} | {ratio} |")
    if all(w is not None for v in runs.values() for _, w, _ in v) and all(runs.values()):
        walls = {k: sum(w for _, w, _ in v) / len(v) for k, v in runs.items()}
        peaks = {k: max(p for _, _, p in v) / 2**30 for k, v in runs.items()}
        lines.append(f"| wall time, launcher start to exit (s) | {walls['ref']:.0f} | {walls['new']:.0f} | "
                     f"{walls['ref'] / walls['new']:.1f}x |")
        lines.append(f"| peak memory, sum of RSS over the process tree (GiB) | {peaks['ref']:.1f} | "
                     f"{peaks['new']:.1f} | - |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", type=Path, help="OUTPUT_DIR of the new run (default: a temp dir)")
    parser.add_argument("--run-dir", type=Path, help="read this finished run instead of running one")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    parser.add_argument("--compare", metavar="REF", help="git commit to run side by side with this checkout")
    parser.add_argument("--rounds", type=positive_int, default=1,
                        help="with --compare: runs of each, in turns (default 1)")
    parser.add_argument("--compare-runs", nargs=2, type=Path, metavar=("REF_DIR", "NEW_DIR"),
                        help="only read two finished runs (their OUTPUT_DIR or tensorboard folder) side by side")
    parser.add_argument("--step", type=int, help="with --compare-runs: compare this global step only "
                        "(default: the mean over each run's steps)")
    parser.add_argument("extra", nargs="*", help="Hydra overrides passed to the launcher (after --)")
    args = parser.parse_args(argv)
    if args.compare:
        rc, text = compare(args.compare, args.rounds, args.extra)
        print(text)
        if args.markdown:
            write_text_atomic(args.markdown, text + "\n")
        return rc

    if args.compare_runs:
        runs = {}
        for label, folder in zip(("ref", "new"), args.compare_runs):
            events = folder / "tensorboard" if (folder / "tensorboard").is_dir() else folder
            scalars = scalars_by_step(events) if events.is_dir() else {}
            if "timing_s/step" not in scalars or (args.step and args.step not in scalars["timing_s/step"]):
                print(f"bench_cpu_run: {events}: no timing_s/step{f' at step {args.step}' if args.step else ''}; "
                      "expected a finished run's TensorBoard events", file=sys.stderr)
                return 2
            runs[label] = [(scalars, None, None)]
        which = f"global step {args.step}" if args.step else "mean over each run's steps"
        text = side_by_side(runs, f"Two finished runs: ref = `{args.compare_runs[0]}`, new = "
                            f"`{args.compare_runs[1]}`; seconds, {which}.", args.step)
        print(text)
        if args.markdown:
            write_text_atomic(args.markdown, text + "\n")
        return 0

    rc, wall_s, peak = 0, None, None
    if args.run_dir:
        run_dir = args.run_dir
    else:
        run_dir = args.output_dir or Path(tempfile.mkdtemp(prefix="bench_cpu_run-"))
        rc, wall_s, peak = run_launcher(run_dir, args.extra)
    events = run_dir / "tensorboard"
    scalars = scalars_by_step(events) if events.is_dir() else {}
    if not scalars:
        print(f"bench_cpu_run: {run_dir / 'tensorboard'}: no TensorBoard scalars (exit status {rc})", file=sys.stderr)
        return rc or 1
    text = tables(scalars, wall_s, peak)
    print(text)
    if args.markdown:
        write_text_atomic(args.markdown, text + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
