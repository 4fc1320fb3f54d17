"""Time the CPU profile's GRPO run phase by phase and measure its peak memory.

Usage::

    python benchmarks/bench_cpu_run.py [--output-dir DIR] [--markdown FILE] [-- EXTRA_HYDRA_OVERRIDES...]
    python benchmarks/bench_cpu_run.py --run-dir DIR        # only read an existing run

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
update_actor = the PPO update, testing = validation, save_checkpoint, step = the whole step.
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from health_report import scalars_by_step  # noqa: E402  (TensorBoard's reader, one place)
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


def run_launcher(output_dir: Path, extra: list[str]) -> tuple[int, float, int]:
    """Run the cpu profile; return (exit status, wall seconds, peak tree RSS bytes)."""
    env = {**os.environ, "DEVICE": "cpu", "OUTPUT_DIR": str(output_dir)}
    start = time.monotonic()
    proc = subprocess.Popen(["bash", str(REPO / "run_qwen2_5_1_5b.sh"), *extra], env=env,
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, help="OUTPUT_DIR of the new run (default: a temp dir)")
    parser.add_argument("--run-dir", type=Path, help="read this finished run instead of running one")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    parser.add_argument("extra", nargs="*", help="Hydra overrides passed to the launcher (after --)")
    args = parser.parse_args(argv)

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
        tmp = args.markdown.with_suffix(args.markdown.suffix + ".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text + "\n")
        os.replace(tmp, args.markdown)
    return rc


if __name__ == "__main__":
    sys.exit(main())
