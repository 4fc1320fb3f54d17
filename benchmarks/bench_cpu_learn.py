"""Run the cpu_learn profile (or read a finished run) and report whether it learned.

Usage::

    python -m benchmarks.bench_cpu_learn [--output-dir DIR] [--markdown FILE] [--plot FILE.png] [-- HYDRA...]
    python -m benchmarks.bench_cpu_learn --run-dir DIR [--markdown FILE] [--plot FILE.png]

Runs ``PROFILE=cpu_learn bash run_qwen2_5_1_5b.sh`` (SmolLM2-135M-Instruct, MATH Level-1
prompts, reward = the answer contract's format, new_math_reward.compute_score, format_only=True) with
OUTPUT_DIR=DIR, then reads its TensorBoard events and prints:

- per global step: training reward ``critic/score/mean`` (the share of the contract
  followed, 0..1), ``critic/score/max``, ``actor/kl_loss``, ``actor/grad_norm``,
  ``actor/entropy`` (nats per token), mean response length (tokens), verl's agreement of the
  rollout and the actor on the sampled tokens (the Pearson correlation and the largest difference
  of their token probabilities) and the step's wall time (``timing_s/step``, s);
- the bar the profile is meant to clear: the mean training reward over the last 3 steps is
  at least twice, and at least 0.15 above, the mean over the first 3 steps;
- validation (greedy, held-out Level-1 problems) before training and at the last step:
  format compliance (``val-core/<data_source>/format/mean@1``) and accuracy (``acc``);
- wall time (s) from launcher start to exit and peak memory (GiB, the machine's used memory over
  the run).

``--plot`` draws the training reward per step with the two validation points (matplotlib).
Exit status: the launcher's, else 1 when the bar is not met, else 0.
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

#: per-step columns and their number formats. The rollout/actor agreement is logged by verl
#: (verl/utils/debug/metrics.py) as the Pearson correlation and the largest difference of the token
#: probabilities where the old-log-prob pass runs, and as the on-policy update's actor/ppo_kl
#: without it (bypass mode, the cpu profiles); the policy's entropy is then actor/entropy_loss.
#: A column a run does not log is left out.
TAGS = {"critic/score/mean": ".3f", "critic/score/max": ".3f", "actor/kl_loss": ".3f", "actor/grad_norm": ".3f",
        "actor/entropy": ".2f", "actor/entropy_loss": ".2f", "response_length/mean": ".1f",
        "training/rollout_actor_probs_pearson_corr": ".4f", "training/rollout_probs_diff_max": ".3f",
        "actor/ppo_kl": ".1e", "timing_s/step": ".0f"}


def val_tag(scalars: dict, key: str) -> str | None:
    """verl logs the validation mean of the reward's main key under val-core/ and of the others
    (``format``) under val-aux/."""
    return next((t for t in sorted(scalars) if t.startswith(("val-core/", "val-aux/")) and t.endswith(f"/{key}/mean@1")),
                None)


def report(scalars: dict, wall_s: float | None, peak: int | None, header: str = "") -> tuple[bool, str]:
    score = scalars.get("critic/score/mean", {})
    steps = sorted(score)
    if len(steps) < 6:
        raise ValueError(f"critic/score/mean: {len(steps)} steps logged; expected at least 6")
    first = sum(score[s] for s in steps[:3]) / 3
    last = sum(score[s] for s in steps[-3:]) / 3
    ok = last >= 2 * first and last >= first + 0.15
    lines = [header, ""] if header else []
    tags = {t: fmt for t, fmt in TAGS.items() if scalars.get(t)}
    lines += ["| global step | " + " | ".join(tags) + " |", "|---" * (len(tags) + 1) + "|"]
    for s in steps:
        cells = [format(scalars[t][s], fmt) if s in scalars[t] else "-" for t, fmt in tags.items()]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines += ["", "| run | value |", "|---|---|",
              f"| training reward, mean of the first 3 steps | {first:.3f} |",
              f"| training reward, mean of the last 3 steps | {last:.3f} |",
              f"| bar: last >= 2 x first and last >= first + 0.15 | {'met' if ok else 'NOT met'} |"]
    for key, name in (("format", "validation format compliance"), ("acc", "validation accuracy")):
        tag = val_tag(scalars, key)
        if tag:
            points = scalars[tag]
            lines.append(f"| {name}, step {min(points)} -> step {max(points)} | "
                         f"{points[min(points)]:.3f} -> {points[max(points)]:.3f} |")
    if wall_s is not None:
        lines.append(f"| wall time, launcher start to exit (s) | {wall_s:.0f} |")
    if peak is not None:
        lines.append(f"| peak memory: the machine's used memory over the run (GiB) | {peak / 2**30:.1f} |")
    return ok, "\n".join(lines)


def plot(scalars: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    score = scalars["critic/score/mean"]
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    ax.plot(sorted(score), [score[s] for s in sorted(score)], marker="o", label="training reward (critic/score/mean)")
    tag = val_tag(scalars, "format")
    if tag:
        points = scalars[tag]
        ax.plot(sorted(points), [points[s] for s in sorted(points)], marker="s", linestyle="--",
                label="validation format compliance (greedy)")
    ax.set_ylim(0, 1)
    save_chart(fig, ax, path, "share of the answer contract followed",
               "cpu_learn: SmolLM2-135M-Instruct, GRPO on the contract's format")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--output-dir", type=Path, help="OUTPUT_DIR of the new run (default: a temp dir)")
    parser.add_argument("--run-dir", type=Path, help="read this finished run instead of running one")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    parser.add_argument("--plot", type=Path, help="write the learning curve PNG here")
    parser.add_argument("extra", nargs="*", help="Hydra overrides passed to the launcher (after --)")
    args = parser.parse_args(argv)
    rc, wall_s, peak, header = 0, None, None, ""
    if args.run_dir:
        run_dir = args.run_dir
    else:
        run_dir = args.output_dir or Path(tempfile.mkdtemp(prefix="bench_cpu_learn-"))
        load = os.getloadavg()[0]
        run = run_launcher(run_dir, args.extra, env_extra={"PROFILE": "cpu_learn"})
        rc, wall_s, peak = run.returncode, run.wall_s, run.peak_used
        header = f"`PROFILE=cpu_learn` on {cpu_description()}; load average {load:.2f} at the start."
    events = run_dir / "tensorboard"
    scalars = scalars_by_step(events) if events.is_dir() else {}
    try:
        ok, text = report(scalars, wall_s, peak, header)
    except (ValueError, KeyError) as exc:
        print(f"bench_cpu_learn: {events}: {exc} (launcher exit status {rc})", file=sys.stderr)
        return rc or 1
    print(text)
    if args.markdown:
        write_text_atomic(args.markdown, text + "\n")
    if args.plot:
        plot(scalars, args.plot)
    return rc or (0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main())
