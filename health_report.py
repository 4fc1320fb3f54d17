#!/usr/bin/env python3
"""Health report of a verl GRPO run: ``python health_report.py --help``. The work is done by
grpo_math/health/, in the order data flows: read.py (logs, config), rules.py (thresholds, rules),
report.py (markdown, JSON), figures.py (PNG curves)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

from grpo_math.health.figures import render_figures
from grpo_math.health.read import (DEFAULT_VAL_TAG, HYDRA_CONFIG, SWANLAB_DB, default_output_dir, discover_runs,
                                   find_run_config, read_rollout_groups, read_run_config, scalars_by_step)
from grpo_math.health.report import finding_json, render_markdown
from grpo_math.health.rules import DEFAULT_THRESHOLDS, SEVERITY, build_context, evaluate, override_thresholds, \
    rules_markdown
from grpo_math.io import ArgumentParser, DataError, positive_int, write_bytes_atomic

__all__ = ["main", "scalars_by_step"]

EPILOG = f"""\
LOGDIR is read as SwanLab's local database when it is a swanlog folder holding {SWANLAB_DB} (or a run-*
folder in it, or that file), else searched for TensorBoard event files; each folder of event files, or
each SwanLab experiment, is a run. A run still being written can be reported.

Levels: ok, info (worth knowing, not a problem for this recipe), warn, alert, skipped (a metric the
rule needs is not logged). Each rule reports its worst level and the first step it fired at; the rules,
their thresholds and sources: --list-rules and docs/health_rules.md.

Writes health_report.md, health_grid.png and one PNG per curve (one subfolder per run when there are
several), also printing the report; nothing is written on bad input. Exit status: 0 report written,
1 --fail-on level reached, 2 bad input (one line "error: ..." naming the path)."""


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="health_report.py", epilog=EPILOG, description=(
        "Health report of a verl GRPO run from its TensorBoard or SwanLab scalars: the reference recipe's\n"
        "metric guide and the failures loss curves do not show (a rollout not generating with the actor's\n"
        "weights, a reward that pays nothing, memory growing) as rules, one line each (ok / info / warn /\n"
        "alert / skipped, the step, the value); a markdown report, PNG curves, optional JSON."))
    p.add_argument("logdir", nargs="?", type=Path, metavar="LOGDIR", help=(
        "the run's log folder: the launcher's OUTPUT_DIR/tensorboard or OUTPUT_DIR/swanlog, a folder above "
        "several runs, one run-* folder or one event file"))
    p.add_argument("--output-dir", type=Path, metavar="DIR", help=(
        "folder for the report and figures (default: health/ beside LOGDIR, outputs/<experiment>/health)"))
    p.add_argument("--json", type=Path, metavar="FILE", help=(
        'also write the findings to FILE: {"schema": 1, "logdir", "runs", "rules": [{"run", "id", "tag", '
        '"level", "step", "value" (null when not finite), "value_text", "message", "source"}]}'))
    p.add_argument("--fail-on", choices=("never", "warn", "alert"), default="never",
                   help="exit 1 when a rule reaches this level (default never)")
    p.add_argument("--run", metavar="SUBSTR", help=(
        "only runs whose name contains SUBSTR (TensorBoard: the path relative to LOGDIR; SwanLab: "
        "<project>/<experiment> or the run-* folder)"))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE", help=(
        "override a threshold, int or float as its default (repeatable; names and defaults: --list-rules)"))
    p.add_argument("--updates-per-step", type=positive_int, metavar="N", help=(
        "policy updates per step, ppo_epochs x mini-batches, an integer >= 1 (default: detected, 1 when "
        "actor/pg_clipfrac and actor/ppo_kl are exactly 0 at every step)"))
    p.add_argument("--lr", type=float, metavar="LR", help="the actor's learning rate (default: actor/lr from the log)")
    p.add_argument("--kl-coef", type=float, metavar="C",
                   help="actor kl_loss_coef (default: actor/kl_coef from the log)")
    p.add_argument("--loss-scale", type=float, default=1.0, metavar="K", help=(
        "multiply the logged actor/kl_loss by K > 0 before the KL rules; verl 0.6.0 logs it divided by the "
        "micro-batches per mini-batch, ppo_mini_batch_size x rollout.n / n_gpus / ppo_micro_batch_size_per_gpu "
        "(default 1)"))
    p.add_argument("--val-tag", metavar="TAG",
                   help=f"validation tag (default {DEFAULT_VAL_TAG}, else the first val-core/*/mean@* tag)")
    p.add_argument("--config", type=Path, metavar="FILE", help=(
        "the run's Hydra config.yaml, for the experiment's name, the reward function verl loaded and the stack "
        f"(default: OUTPUT_DIR/{HYDRA_CONFIG} beside LOGDIR)"))
    p.add_argument("--rollout-dir", type=Path, metavar="DIR", help=(
        "verl's trainer.rollout_data_dir (<step>.jsonl dumps), to count prompt groups with zero reward variance "
        "and empty responses"))
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures (no matplotlib needed)")
    p.add_argument("--quiet", action="store_true", help="do not print the report")
    p.add_argument("--list-rules", action="store_true",
                   help="print the rules, their thresholds and sources (markdown) and exit")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Returns the exit status: 0 report written, 1 --fail-on reached, 2 bad input."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_rules:
        print(rules_markdown())
        return 0
    if args.logdir is None:
        parser.error("LOGDIR is required")
    try:
        th = override_thresholds(DEFAULT_THRESHOLDS, args.overrides)
        if not math.isfinite(args.loss_scale) or args.loss_scale <= 0:
            raise DataError("--loss-scale: expected a positive number")
        runs = discover_runs(args.logdir, args.run)
        rollouts = read_rollout_groups(args.rollout_dir) if args.rollout_dir else None
        if args.config is not None and not args.config.is_file():
            raise DataError(f"{args.config}: --config: no such file (expected a run's Hydra config.yaml)")
        configs = {run.name: (read_run_config(path) if (path := args.config or find_run_config(run)) else None)
                   for run in runs}
        if not args.no_figures and importlib.util.find_spec("matplotlib") is None:
            raise DataError("matplotlib is not installed: pip install matplotlib, or pass --no-figures")
    except (DataError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    out_root = args.output_dir or default_output_dir(args.logdir)
    files: Dict[Path, bytes] = {}
    texts, entries, worst = [], [], "ok"
    for run in runs:
        ctx = build_context(run, th, updates_per_step=args.updates_per_step, lr=args.lr, kl_coef=args.kl_coef,
                            loss_scale=args.loss_scale, val_tag=args.val_tag, rollout_groups=rollouts,
                            config=configs[run.name])
        findings = evaluate(run, th, ctx)
        texts.append(render_markdown(run, findings, ctx))
        entries += [finding_json(run, f) for f in findings]
        worst = max([worst] + [f.level for f in findings], key=SEVERITY.get)
        out_dir = out_root if len(runs) == 1 else out_root / run.name.replace(os.sep, "__")
        files[out_dir / "health_report.md"] = texts[-1].encode()
        if not args.no_figures:
            files.update({out_dir / name: data for name, data in render_figures(run, findings, th, ctx).items()})
    if args.json:
        doc = {"schema": 1, "logdir": str(args.logdir), "runs": [r.name for r in runs], "rules": entries}
        files[args.json] = (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode()
    try:
        for path, data in files.items():
            write_bytes_atomic(path, data)
    except OSError as exc:
        print(f"error: cannot write {exc.filename or out_root}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        print("\n\n".join(texts))
        print(f"(report and figures in {out_root})")
    return 1 if args.fail_on != "never" and SEVERITY[worst] >= SEVERITY[args.fail_on] else 0


if __name__ == "__main__":
    sys.exit(main())
