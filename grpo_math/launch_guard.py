#!/usr/bin/env python3
"""The launcher's guards against a user's mistakes, before anything starts.

- ``typos`` (this script's command; setup.sh and run_qwen2_5_1_5b.sh run it first, with the system's
  python3): an environment variable that is not a knob but close to one is refused.
- :func:`run_start` (preflight.py runs it in the launcher's PYTHON, after its checks): what a launch
  does with the earlier run in CKPT_DIR.

Standard library only: the system's python3 runs ``typos`` before any virtual environment exists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

from grpo_math import knobs
from grpo_math.io import ArgumentParser, write_json_atomic

REPO = Path(__file__).resolve().parent.parent

LAUNCHER = "run_qwen2_5_1_5b.sh"
SETTINGS_FILE = "launch_settings.json"
TRACKER_FILE = "latest_checkpointed_iteration.txt"  # verl/utils/checkpoint/checkpoint_manager.py
EXIT_REFUSED = 2
EXIT_COMPLETE = 3  # the launcher exits 0 without training

# ---- typos: environment variables close to a knob's name
#: Variables of other programs that are close to a knob's name; never reported.
NOT_TYPOS = {
    "NNODES": "node count of torchrun-style launch scripts (verl's examples), one edit from N_NODES",
    "SWANLAB_LOGDIR": "SwanLab's older name of its log folder (swanlab/sdk/internal/settings/compat), "
                      "one edit from SWANLAB_LOG_DIR",
}
#: A knob name of this many characters or more may be two edits away; shorter ones one edit.
LONG_NAME = 14
NAME_SHAPE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def edit_distance(a: str, b: str, limit: int) -> int:
    """Damerau-Levenshtein distance (optimal string alignment: an insertion, deletion, substitution or swap of two
    neighbouring characters counts 1) of ``a`` and ``b``, or ``limit + 1`` once it is known to exceed ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    before, prev = None, list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if before is not None and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], before[j - 2] + 1)
        if min(cur) > limit and min(prev) > limit:
            return limit + 1
        before, prev = prev, cur
    return min(prev[-1], limit + 1)


def knob_files(script: str) -> list[Path]:
    """The files whose knobs ``script`` reads: the launcher sources a stack and a profile."""
    files = [REPO / script]
    if script == LAUNCHER:
        files += sorted((REPO / "stacks").glob("*.sh")) + sorted((REPO / "profiles").glob("*.sh"))
    return files


def knob_names(files: Iterable[Path]) -> list[str]:
    """Knob names of ``files`` in order of first appearance (grpo_math.knobs, docs/knobs.md's parser)."""
    return list(dict.fromkeys(name for path in files for name, _, _ in knobs.read_knobs(path)))


def repo_knobs() -> set[str]:
    """Every knob of every script of the recipe: one meant for another (STEP of merge_checkpoint.sh) is no typo."""
    return set(knob_names([*REPO.glob("*.sh"), *(REPO / "profiles").glob("*.sh"), *(REPO / "stacks").glob("*.sh"),
                           *(REPO / "tools").glob("*.sh")]))


def typos(env: Iterable[str], script_knobs: Sequence[str], known: set[str]) -> list[tuple[str, str]]:
    """(variable, knob) for each variable of ``env`` that is not a knob but close to one of ``script_knobs``
    (compared in upper case, so ``device`` is close to DEVICE)."""
    limits = {knob: 2 if len(knob) >= LONG_NAME else 1 for knob in script_knobs}
    found = []
    for name in sorted(env):
        if name in known or name in NOT_TYPOS or not NAME_SHAPE.fullmatch(name):
            continue
        close = [(d, k) for k, limit in limits.items() if (d := edit_distance(name.upper(), k, limit)) <= limit]
        if close:
            found.append((name, min(close)[1]))
    return found


def cmd_typos(script: str, print_knobs: bool, env: Mapping[str, str] = os.environ) -> int:
    if not (REPO / script).is_file() or not script.endswith(".sh"):
        print(f"launch_guard.py typos: {script}: no such script in {REPO}; expected e.g. {LAUNCHER} or setup.sh",
              file=sys.stderr)
        return EXIT_REFUSED
    names = knob_names(knob_files(script))
    found = typos(env, names, repo_knobs() | set(names))
    for name, knob in found:
        print(f"{script}: {name} is not a knob; did you mean {knob}? "
              "(if it is meant for another program, unset it for this command)", file=sys.stderr)
    if found:
        return EXIT_REFUSED
    if print_knobs:
        print("\n".join(names))
    return 0


# ---- checkpoints as verl 0.6.0 writes them
STEP_DIR = re.compile(r"global_step_(\d+)")


def checkpoint_problem(step_dir: Path) -> Optional[str]:
    """None when ``step_dir`` (CKPT_DIR/global_step_N) is a complete checkpoint, else what is missing. verl 0.6.0's
    RayPPOTrainer._save_checkpoint writes, in order: each rank's actor/{model,optim,extra_state}_world_size_W_rank_R.pt
    (FSDPCheckpointManager.save_checkpoint, straight to the final name), actor/huggingface/config.json and
    actor/fsdp_config.json (world size W) on rank 0, data.pt, then the tracker file: a kill before data.pt leaves a
    partial folder; max_actor_ckpt_to_keep deletes an older actor/ before the new one is written."""
    actor = step_dir / "actor"
    try:
        world_size = int(json.loads((actor / "fsdp_config.json").read_text())["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return "no readable actor/fsdp_config.json"
    for kind in ("model", "optim", "extra_state"):
        for rank in range(world_size):
            shard = actor / f"{kind}_world_size_{world_size}_rank_{rank}.pt"
            if not shard.is_file() or shard.stat().st_size == 0:
                return f"actor/{shard.name} missing or empty"
    if not (actor / "huggingface" / "config.json").is_file():
        return "no actor/huggingface/config.json"
    data = step_dir / "data.pt"
    if not data.is_file() or data.stat().st_size == 0:
        return "no data.pt (written last, after the actor)"
    return None


@dataclass
class Checkpoints:
    """What CKPT_DIR holds: each global_step_N folder's problem (None = complete) and the tracker."""

    root: Path
    steps: dict[int, Optional[str]] = field(default_factory=dict)
    tracker: Optional[int] = None
    tracker_error: Optional[str] = None  # set when the tracker file exists but is not an integer

    @classmethod
    def read(cls, root: Path) -> "Checkpoints":
        found = cls(root)
        if root.is_dir():
            for child in root.iterdir():
                match = STEP_DIR.fullmatch(child.name)
                if match and child.is_dir():
                    found.steps[int(match.group(1))] = checkpoint_problem(child)
        tracker = root / TRACKER_FILE
        if tracker.is_file():
            text = tracker.read_text(errors="replace").strip()
            if text.isdigit():
                found.tracker = int(text)
            else:
                found.tracker_error = f"holds {text!r}" if text else "is empty"
        return found

    def last_complete(self) -> Optional[int]:
        return max((step for step, problem in self.steps.items() if problem is None), default=None)


class Refused(Exception):
    """A launch the guard stops; the message is the one line shown."""


def way_back(ckpts: Checkpoints) -> str:
    last = ckpts.last_complete()
    if last is None:
        return "there is no complete checkpoint: start over with RESUME_MODE=disable (the folder is moved aside)"
    return (f"resume from the last complete one with RESUME_MODE=resume_path "
            f"trainer.resume_from_path={ckpts.root / f'global_step_{last}'}, or start over with RESUME_MODE=disable")


def resume_step(ckpts: Checkpoints) -> Optional[int]:
    """The global step verl's resume_mode=auto will load (None: from scratch), checked complete. verl reads only the
    tracker (find_latest_ckpt_path): a missing tracker or folder means 'Training from scratch', an empty tracker a
    ValueError, and a partial folder is loaded as it is."""
    tracker = ckpts.root / TRACKER_FILE
    if ckpts.tracker_error:
        raise Refused(f"{tracker} {ckpts.tracker_error} (the run was stopped while writing it); {way_back(ckpts)}")
    if ckpts.tracker is None:
        if ckpts.last_complete() is not None:
            raise Refused(f"{ckpts.root} holds complete checkpoints but no {TRACKER_FILE}: verl would train from "
                          f"scratch; {way_back(ckpts)}")
        return None
    step = ckpts.tracker
    if step not in ckpts.steps:
        raise Refused(f"{tracker} names global_step_{step}, which does not exist: verl would train from scratch; "
                      f"{way_back(ckpts)}")
    if ckpts.steps[step] is not None:
        raise Refused(f"{tracker} names global_step_{step}, a partial checkpoint ({ckpts.steps[step]}) that verl "
                      f"would load; {way_back(ckpts)}")
    return step


# ---- settings that change training
#: Knobs that do not change what is trained, so a relaunch may change them. Every other knob,
#: including one added later, is compared.
NOT_COMPARED = {
    "TOTAL_STEPS", "TOTAL_EPOCHS",  # how long: raised on purpose to extend a run
    # where and how the run logs, saves and validates
    "PROJECT_NAME", "EXPERIMENT_NAME", "OUTPUT_DIR", "CKPT_DIR", "LOG_FILE", "TENSORBOARD_DIR", "SWANLAB_LOG_DIR",
    "SWANLAB_MODE", "LOGGER", "CONSOLE", "SAVE_FREQ", "TEST_FREQ", "VAL_BEFORE_TRAIN", "VAL_FILE", "CANN_HOME",
    # how this launch runs: the same computation at another speed or memory use, on the same devices (PROFILE:
    # its values are compared; PYTHON: STACK is; ASCEND_RT_VISIBLE_DEVICES: N_DEVICES is)
    "PROFILE", "PYTHON", "DRY_RUN", "PREFLIGHT", "RESUME_MODE", "ROLLOUT_TP", "GPU_MEMORY_UTILIZATION",
    "ENFORCE_EAGER", "GRADIENT_CHECKPOINTING", "CPU_THREADS", "OMP_WAIT_POLICY", "ASCEND_RT_VISIBLE_DEVICES",
    "HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT",
}
#: Hydra keys (passed after the launcher's arguments) that, like NOT_COMPARED, do not change training.
NOT_COMPARED_KEYS = {
    "trainer.total_epochs", "trainer.total_training_steps", "trainer.logger", "trainer.project_name",
    "trainer.experiment_name", "trainer.save_freq", "trainer.test_freq", "trainer.val_before_train",
    "trainer.rollout_data_dir", "trainer.validation_data_dir", "trainer.log_val_generations",
    "trainer.resume_mode", "trainer.resume_from_path", "trainer.default_local_dir", "trainer.max_actor_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep", "data.val_files", "hydra.run.dir",
}


def override_key(override: str) -> str:
    """The config key of a Hydra override (``+key=v``, ``++key=v``, ``~key``, ``key=v``)."""
    return override.split("=", 1)[0].lstrip("+~")


def override_map(overrides: Sequence[str]) -> dict[str, str]:
    """{key: value} of Hydra overrides (the last one wins)."""
    return {override_key(item): item.partition("=")[2] for item in overrides}


def differences(old: Mapping, new: Mapping) -> list[str]:
    """'NAME old -> new' for every knob and Hydra override that changes training."""
    pairs = ((old.get("knobs", {}), new.get("knobs", {}), NOT_COMPARED, "(unset)"),
             (override_map(old.get("hydra_overrides", [])), override_map(new.get("hydra_overrides", [])),
              NOT_COMPARED_KEYS, "(not given)"))
    return [f"{name} {a.get(name, absent)} -> {b.get(name, absent)}" for a, b, skip, absent in pairs
            for name in sorted(set(a) | set(b)) if name not in skip and a.get(name) != b.get(name)]


def planned_steps(settings: Mapping[str, str], overrides: Mapping[str, str],
                  count_kept: Callable[[Mapping[str, str]], int]) -> int:
    """verl's total_training_steps: trainer.total_training_steps if set, else the training data
    loader's batches (drop_last=True) times the epochs (RayPPOTrainer._create_dataloader)."""
    steps = overrides.get("trainer.total_training_steps", settings.get("TOTAL_STEPS", "null"))
    if steps not in ("null", "None", ""):
        return int(steps)
    epochs = int(overrides.get("trainer.total_epochs", settings["TOTAL_EPOCHS"]))
    batch = int(overrides.get("data.train_batch_size", settings["TRAIN_BATCH_SIZE"]))
    return count_kept(settings) // batch * epochs


# ---- keeping earlier files
def next_log_name(log_file: Path) -> Path:
    """train.log -> train.N.log with N one above the highest kept (train.1.log is the oldest)."""
    pattern = re.compile(re.escape(log_file.stem) + r"\.(\d+)" + re.escape(log_file.suffix))
    kept = [int(m.group(1)) for p in log_file.parent.iterdir() if (m := pattern.fullmatch(p.name))]
    return log_file.with_name(f"{log_file.stem}.{max(kept, default=0) + 1}{log_file.suffix}")


# ---- start
def start(settings: Mapping[str, str], overrides: Sequence[str], say: Callable[[str], None],
          count_kept: Callable[[Mapping[str, str]], int]) -> int:
    """Decide what this launch does with CKPT_DIR: 0 go on, EXIT_COMPLETE nothing to train; raises Refused.

    - RESUME_MODE=auto: the checkpoint verl will load (resume_step) must be complete; CKPT_DIR/SETTINGS_FILE must
      not differ from this launch in a knob or Hydra override that changes training (all but NOT_COMPARED,
      NOT_COMPARED_KEYS); a run at or past its planned global steps (planned_steps) is complete (verl would
      train one more step).
    - Starting over (RESUME_MODE=disable, or nothing complete to resume): a CKPT_DIR or TENSORBOARD_DIR with
      files is moved aside to NAME.<UTC time>.
    - An existing LOG_FILE is kept as train.N.log; then SETTINGS_FILE is written.
    """
    ckpt_dir = Path(settings["CKPT_DIR"])
    tensorboard = Path(settings["TENSORBOARD_DIR"]) if settings.get("TENSORBOARD_DIR") else None
    given = override_map(overrides)
    mode = given.get("trainer.resume_mode", settings.get("RESUME_MODE", "auto"))
    new = {"knobs": dict(settings), "hydra_overrides": list(overrides)}
    ckpts = Checkpoints.read(ckpt_dir)

    start_over = mode == "disable"
    if mode == "auto":
        step = resume_step(ckpts)
        if step is None:
            start_over = True
        else:
            settings_file = ckpt_dir / SETTINGS_FILE
            try:
                changed = differences(json.loads(settings_file.read_text()), new)
            except FileNotFoundError:
                changed = []
                say(f"{LAUNCHER}: {ckpt_dir} has no {SETTINGS_FILE}: this launch's settings cannot be compared "
                    "with the earlier run's")
            except ValueError:
                raise Refused(f"{settings_file}: not valid JSON; expected the settings the launcher saved") from None
            if changed:
                raise Refused(f"{settings_file}: this launch changes what the run in {ckpt_dir} trained "
                              f"({'; '.join(changed)}): use a new OUTPUT_DIR, or RESUME_MODE=disable to start over "
                              "(the earlier run is moved aside)")
            total = planned_steps(settings, given, count_kept)
            if step >= total:
                more = "raise TOTAL_STEPS" if settings.get("TOTAL_STEPS", "null") != "null" else "raise TOTAL_EPOCHS"
                say(f"{LAUNCHER}: {settings.get('OUTPUT_DIR', ckpt_dir)} is complete at global step {step} "
                    f"(planned: {total}); {more} to continue")
                return EXIT_COMPLETE
            newer = sorted(s for s in ckpts.steps if s > step)
            if newer:
                say(f"{LAUNCHER}: {', '.join(f'global_step_{s}' for s in newer)} in {ckpt_dir} "
                    f"{'is' if len(newer) == 1 else 'are'} not the tracked checkpoint (stopped during the save?); "
                    f"resuming from global_step_{step}, the last complete one")
    elif mode == "resume_path":
        path = given.get("trainer.resume_from_path")
        if path and STEP_DIR.fullmatch(Path(path).name) and checkpoint_problem(Path(path)) is not None:
            raise Refused(f"trainer.resume_from_path={path}: a partial checkpoint ({checkpoint_problem(Path(path))}); "
                          "expected a complete global_step_N folder")

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moves = [(d, d.with_name(f"{d.name}.{stamp}")) for d, keep in ((ckpt_dir, {SETTINGS_FILE}), (tensorboard, set()))
             if start_over and d is not None and d.is_dir() and any(c.name not in keep for c in d.iterdir())]
    if moves:
        why = "RESUME_MODE=disable" if mode == "disable" else "nothing to resume from (training from scratch)"
        say(f"{LAUNCHER}: {why}: the earlier run's files moved aside: "
            + ", ".join(f"{src} -> {dst.name}" for src, dst in moves))
    for src, dst in moves:
        os.replace(src, dst)
    log_file = Path(settings["LOG_FILE"]) if settings.get("LOG_FILE") else None
    if log_file is not None and log_file.is_file() and log_file.stat().st_size > 0:
        kept = next_log_name(log_file)
        os.replace(log_file, kept)
        say(f"{LAUNCHER}: the earlier {log_file.name} kept as {kept.name}")
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(ckpt_dir / SETTINGS_FILE, {**new, "written_utc": stamp})
    return 0


def run_start(settings: Mapping[str, str], overrides: Sequence[str],
              count_kept: Callable[[Mapping[str, str]], int]) -> int:
    """:func:`start` with its exit status; a refusal is one line on stderr."""
    try:
        return start(settings, overrides, lambda line: print(line, file=sys.stderr), count_kept)
    except Refused as err:
        print(f"{LAUNCHER}: {err}", file=sys.stderr)
    except OSError as err:  # moving aside, the log, the settings file
        print(f"{LAUNCHER}: {err.filename}: {err.strerror}; expected a writable CKPT_DIR, TENSORBOARD_DIR and LOG_FILE "
              "folder", file=sys.stderr)
    return EXIT_REFUSED


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(
        prog="python3 -m grpo_math.launch_guard", formatter_class=argparse.HelpFormatter,
        description="typos: refuse, one line each (exit 2), every environment variable that is not a knob but is "
                    f"close to a knob of SCRIPT (for {LAUNCHER} also of stacks/*.sh and profiles/*.sh; grpo_math.knobs "
                    f"reads them): Damerau-Levenshtein distance 1, or 2 for a knob of {LONG_NAME}+ characters, in "
                    "upper case. Never reported: a knob of any script of the recipe, and "
                    f"{', '.join(sorted(NOT_TYPOS))}. Hydra overrides are verl's to check (its Hydra configuration "
                    "rejects an unknown key at start-up).")
    parser.add_argument("command", choices=["typos"], help="the one command (the relaunch guard runs in preflight.py)")
    parser.add_argument("script", help=f"a shell script of the recipe, e.g. {LAUNCHER} or setup.sh")
    parser.add_argument("--print-knobs", action="store_true", help="on success, print SCRIPT's knob names")
    args = parser.parse_args(argv)
    return cmd_typos(args.script, args.print_knobs)


if __name__ == "__main__":
    sys.exit(main())
