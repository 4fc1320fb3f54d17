"""Time the CPU quick start phase by phase, with its memory, output and hardware limit.

Usage::

    python -m benchmarks.bench_cpu_run [--markdown FILE] [-- EXTRA_HYDRA_OVERRIDES...]
    python -m benchmarks.bench_cpu_run --compare REF [--rounds N] [--markdown FILE]

Runs ``DEVICE=cpu bash run_qwen2_5_1_5b.sh`` (profile ``cpu``: SmolLM2-135M-Instruct, MATH
Level 1, 4 prompts x 4 responses, 2 GRPO steps) and prints:
  * each phase's seconds per global step (verl's ``timing_s/*`` from the run's TensorBoard
    events), and the whole global step: ``step`` plus ``testing``, which verl 0.9.1 times after
    its step timer closes;
  * the run: wall time, the machine's peak used memory over the run (total minus available,
    less what was used before the launch: it counts Ray's workers and shared memory, which a
    process-tree sum misses or double counts), the lines the launcher printed to the terminal,
    and per step the rollout/actor agreement (``actor/ppo_kl`` at the on-policy update, or
    verl's Pearson correlation where the old-log-prob pass runs);
  * who holds the memory at the peak: each process's proportional set size (shared pages split
    among their users);
  * the hardware limit of the same work (``benchmarks/hardware_limit.py``), with its arithmetic.

``--compare REF`` runs a git commit's launcher (a temporary worktree sharing this checkout's
``.venv-current``, ``models/`` and ``data/verl/``) and this checkout's in turns, REF first,
``--rounds`` times each, so that a busy machine slows both alike, and puts them side by side;
``--profile`` also samples each actor/ref worker with py-spy and tells where its time goes
(benchmarks/profile_cpu_step.py).
Exit status: the launchers' (the tables are printed either way).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from grpo_math.health.read import scalars_by_step  # TensorBoard's reader, one place
from benchmarks import cpu_description
from grpo_math.io import positive_int, write_text_atomic

REPO = Path(__file__).resolve().parent.parent
PHASES = ("gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "save_checkpoint", "testing")
WHOLE = "whole global step (step + testing)"
AGREEMENT = (("actor/ppo_kl", "actor/ppo_kl (rollout vs actor, on-policy)", ".1e"),
             ("training/rollout_actor_probs_pearson_corr", "rollout/actor Pearson", ".4f"))


@dataclass
class Run:
    """One finished launch: its metrics, wall time, memory and terminal output."""

    returncode: int
    output_dir: Path
    scalars: dict[str, dict[int, float]]
    wall_s: float
    peak_used: int                       # bytes over the machine's used memory before the launch
    processes: list[tuple[str, int]] = field(default_factory=list)  # (name, PSS bytes) at the peak
    terminal_lines: int = 0


def used_bytes() -> int:
    vm = psutil.virtual_memory()
    return vm.total - vm.available


def process_name(proc: psutil.Process) -> str:
    """A Ray actor's class (``ray::WorkerDict.update_actor`` -> ``ray::WorkerDict``), vLLM's
    process titles, ``main_ppo`` for the driver, else the program's name."""
    cmd = proc.cmdline()
    if not cmd:
        return proc.name()
    first = cmd[0]
    if first.startswith(("ray::", "VLLM::")):
        return first.split(".")[0].split()[0]
    if "verl.trainer.main_ppo" in cmd:
        return "main_ppo (driver)"
    if "ray" in " ".join(cmd[:3]) or "raylet" in first or "gcs_server" in first:
        return "Ray's own processes"
    return Path(first).name


def snapshot(root: psutil.Process) -> list[tuple[str, int]]:
    """(name, PSS bytes) of every process under ``root``, summed by name, largest first."""
    sums: dict[str, int] = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            name = process_name(proc)
            sums[name] = sums.get(name, 0) + proc.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return sorted(sums.items(), key=lambda kv: -kv[1])


def run_launcher(output_dir: Path, extra: list[str], repo: Path = REPO,
                 env_extra: dict[str, str] | None = None, pyspy_raw: Path | None = None) -> Run:
    """Run ``repo``'s launcher on CPU (the cpu profile unless ``env_extra`` names another) while
    sampling the machine's used memory every 0.5 s and, at each new peak, who holds it; with
    ``pyspy_raw``, py-spy samples the actor/ref worker into that file (benchmarks/profile_cpu_step.py)."""
    env = {**os.environ, "DEVICE": "cpu", "OUTPUT_DIR": str(output_dir), **(env_extra or {})}
    before = used_bytes()
    start = time.monotonic()
    proc = subprocess.Popen(["bash", str(repo / "run_qwen2_5_1_5b.sh"), *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    root = psutil.Process(proc.pid)
    peak, processes, done = 0, [], threading.Event()

    def sample() -> None:
        nonlocal peak, processes
        while not done.is_set():
            used = used_bytes() - before
            if used > peak + 2**26:  # a new peak by 64 MiB: who holds it (reading smaps takes a while)
                processes = snapshot(root)
            peak = max(peak, used)
            done.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    spy = None
    if pyspy_raw is not None:
        from benchmarks.profile_cpu_step import attach_pyspy

        spy = threading.Thread(target=attach_pyspy, args=(proc, pyspy_raw), daemon=True)
        spy.start()
    terminal = proc.stdout.read()
    rc = proc.wait()
    done.set()
    sampler.join()
    if spy is not None:
        spy.join(timeout=120)
    events = output_dir / "tensorboard"
    return Run(rc, output_dir, scalars_by_step(events) if events.is_dir() else {}, time.monotonic() - start, peak,
               processes, len(terminal.splitlines()))


def mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def phase_mean(run: Run, phase: str) -> float | None:
    if phase == WHOLE:
        steps = run.scalars.get("timing_s/step", {})
        testing = run.scalars.get("timing_s/testing", {})
        return mean(v + testing.get(s, 0.0) for s, v in steps.items())
    values = run.scalars.get(f"timing_s/{phase}", {})
    return mean(values.values())


def per_step(run: Run, tag: str, fmt: str) -> str:
    values = run.scalars.get(tag, {})
    return ", ".join(format(v, fmt) for _, v in sorted(values.items())) or "-"


def side_by_side(runs: dict[str, list[Run]]) -> str:
    """Markdown: phases per step (mean over steps and rounds) and the run facts, one column per side."""
    names = list(runs)
    head = "| phase (s per step) | " + " | ".join(names) + (f" | {names[0]} / {names[1]} |" if len(names) == 2 else " |")
    lines = [head, "|---" * (len(names) + 1 + (len(names) == 2)) + "|"]
    for phase in (*PHASES, WHOLE):
        values = [mean(phase_mean(r, phase) for r in runs[n]) for n in names]
        if all(v is None for v in values):
            continue
        cells = ["-" if v is None else f"{v:.1f}" for v in values]
        if len(names) == 2:
            a, b = values
            cells.append(f"{a / b:.2f}x" if a and b else "-")
        label = f"**{phase}**" if phase == WHOLE else phase
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    facts = [("wall time, launcher start to exit (s)", lambda r: f"{r.wall_s:.0f}"),
             ("peak memory: the machine's used memory over the run (GiB)", lambda r: f"{r.peak_used / 2**30:.1f}"),
             ("lines printed to the terminal", lambda r: f"{r.terminal_lines}"),
             ("exit status", lambda r: f"{r.returncode}")]
    facts += [(f"{label} per step", lambda r, t=tag, f=fmt: per_step(r, t, f)) for tag, label, fmt in AGREEMENT]
    facts += [("critic/score/mean per step", lambda r: per_step(r, "critic/score/mean", ".3f")),
              ("response_length/mean per step", lambda r: per_step(r, "response_length/mean", ".0f"))]
    lines += ["", "| run | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, fn in facts:
        lines.append(f"| {label} | " + " | ".join("; ".join(fn(r) for r in runs[n]) for n in names) + " |")
    return "\n".join(lines)


def memory_table(run: Run, name: str) -> str:
    rows = [f"| {proc} | {pss / 2**30:.2f} |" for proc, pss in run.processes if pss >= 2**24]
    return "\n".join([f"Who holds the memory at the peak of {name} (proportional set size, GiB; "
                      f"sum {sum(p for _, p in run.processes) / 2**30:.1f}):", "",
                      "| process | GiB |", "|---|---|", *rows])


def limit_table(run: Run) -> str:
    """The hardware limit of the run's work (mean over its global steps) beside its measured time."""
    import pyarrow.parquet as pq
    import torch

    from benchmarks import hardware_limit as hl

    knobs = json.loads((run.output_dir / "checkpoints" / "launch_settings.json").read_text())["knobs"]
    dtype = torch.bfloat16 if knobs.get("CPU_DTYPE") == "bf16" else torch.float32
    machine = hl.measure(dtype, int(knobs.get("CPU_THREADS") or os.cpu_count() or 1))
    model = hl.model_facts(Path(knobs["MODEL_PATH"]), dtype)
    prompts, n = int(knobs["TRAIN_BATCH_SIZE"]), int(knobs["N_SAMPLES"])
    val_prompts = pq.read_metadata(knobs["VAL_FILE"]).num_rows
    steps = sorted(run.scalars.get("timing_s/step", {}))
    limits: dict[str, float] = {}
    arithmetic: dict[str, str] = {}
    for s in steps:
        m = {tag: values[s] for tag, values in run.scalars.items() if s in values}
        tested = s in run.scalars.get("timing_s/testing", {})
        for phase, (sec, how) in hl.step_limits(
                machine, model, m, prompts, prompts * n, val_prompts,
                val_response_max=float(knobs["MAX_RESPONSE_LENGTH"]) if tested else None,
                saved=s in run.scalars.get("timing_s/save_checkpoint", {})).items():
            limits[phase] = limits.get(phase, 0.0) + sec / len(steps)
            arithmetic[phase] = how
    lines = [f"Hardware limit of the same work on this machine: matmuls {machine.flops / 1e9:.0f} GFLOP/s "
             f"({str(machine.dtype).replace('torch.', '')}, {machine.threads} threads, the best 2048^3 matmul), memory "
             f"{machine.bandwidth / 1e9:.1f} GB/s (the best copy of 512 MiB); {model.params / 1e6:.1f}M parameters; "
             "seconds per global step, the mean over the run's steps (testing and the checkpoint fall on the last).",
             "", "| phase | limit | measured | measured / limit | the work |", "|---|---|---|---|---|"]
    for phase, lim in limits.items():
        got = sum(run.scalars.get(f"timing_s/{phase}", {}).values()) / len(steps)
        ratio = f"{got / lim:.1f}x" if lim > 0 else "-"
        lines.append(f"| {phase} | {lim:.2f} | {got:.1f} | {ratio} | {arithmetic[phase]} |")
    total, whole = sum(limits.values()), phase_mean(run, WHOLE)
    lines.append(f"| **whole global step** | **{total:.1f}** | **{whole:.1f}** | **{whole / total:.1f}x** | the "
                 "phases above; what Python, Ray, the TransferQueue and vLLM's scheduler add is not in the limit |")
    return "\n".join(lines)


def checkout(ref: str, where: Path) -> Path:
    """A detached git worktree of ``ref`` at ``where`` that shares this checkout's installed
    environment, model and prepared data (all git-ignored, so absent from a worktree)."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), ref],
                   check=True, capture_output=True, text=True)
    for shared in (".venv-current", "models", "data/verl"):
        if (REPO / shared).exists():
            (where / shared).parent.mkdir(parents=True, exist_ok=True)
            (where / shared).symlink_to(REPO / shared)
    return where


def compare(ref: str, rounds: int, extra: list[str], profile: bool = False) -> tuple[int, str, Run, str]:
    """Run REF's launcher and this checkout's in turns; markdown side by side, the last new run
    and its name."""
    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="bench_cpu_compare-"))
    ref_repo = checkout(ref, work / "ref")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    names = {"ref": f"`{ref}`", "new": f"`{head}`{' + uncommitted changes' if dirty else ''}"}
    runs: dict[str, list[Run]] = {names["ref"]: [], names["new"]: []}
    try:
        for i in range(rounds):
            for label, repo in (("ref", ref_repo), ("new", REPO)):
                raw = work / f"{label}_{i}.pyspy" if profile else None
                run = run_launcher(work / f"{label}_{i}", extra, repo, pyspy_raw=raw)
                runs[names[label]].append(run)
                print(f"bench_cpu_run: {label} round {i + 1}: exit {run.returncode}, {run.wall_s:.0f} s",
                      file=sys.stderr)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(ref_repo)], capture_output=True)
    header = (f"The quick start (`DEVICE=cpu bash run_qwen2_5_1_5b.sh`{' ' + ' '.join(extra) if extra else ''}) "
              f"side by side, {rounds} run(s) each in turns, {names['ref']} first; seconds per global step, the "
              f"mean over the run's 2 steps and the rounds; {cpu_description()}, load average {load:.2f} at the start.")
    status = max(r.returncode for rs in runs.values() for r in rs)
    text = header + "\n\n" + side_by_side(runs)
    if profile:
        from benchmarks.profile_cpu_step import markdown, read_raw

        for label in ("ref", "new"):
            raw = work / f"{label}_{rounds - 1}.pyspy"
            if raw.is_file():
                text += "\n\n" + markdown(read_raw(raw), f"Where {names[label]}'s actor/ref worker spends its time "
                                       f"(py-spy at 20 Hz over the whole run, round {rounds}; seconds over the run's 2 steps):")
    return status, text, runs[names["new"]][-1], names["new"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    parser.add_argument("--compare", metavar="REF", help="git commit to run side by side with this checkout")
    parser.add_argument("--rounds", type=positive_int, default=1, help="with --compare: runs of each, in turns")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy on each actor/ref worker, and where each spends its time")
    parser.add_argument("extra", nargs="*", help="Hydra overrides passed to the launcher (after --)")
    args = parser.parse_args(argv)
    if args.compare:
        rc, text, new, name = compare(args.compare, args.rounds, args.extra, args.profile)
    else:
        work = Path(tempfile.mkdtemp(prefix="bench_cpu_run-"))
        raw = work / "run.pyspy" if args.profile else None
        new = run_launcher(work / "run", args.extra, pyspy_raw=raw)
        rc, name = new.returncode, "this checkout's run"
        text = (f"The quick start (`DEVICE=cpu bash run_qwen2_5_1_5b.sh`{' ' + ' '.join(args.extra) if args.extra else ''}); "
                f"seconds per global step; {cpu_description()}.\n\n" + side_by_side({name: [new]}))
        if raw is not None and raw.is_file():
            from benchmarks.profile_cpu_step import markdown, read_raw

            text += "\n\n" + markdown(read_raw(raw), "Where the actor/ref worker spends its time (py-spy at 20 Hz "
                                        "over the whole run; seconds over the run's 2 steps):")
    if new.scalars.get("timing_s/step"):
        text += "\n\n" + memory_table(new, name) + "\n\n" + limit_table(new)
    print(text)
    if args.markdown:
        write_text_atomic(args.markdown, text + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
