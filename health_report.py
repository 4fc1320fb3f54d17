#!/usr/bin/env python3
"""Health report of a verl 0.6.0 GRPO run, read from its TensorBoard or SwanLab scalars.

Applies the reference recipe's metric guide as rules (``RULES``, thresholds in ``Thresholds``),
writes a markdown report, optional JSON and PNG curves. The manual (log folders, outputs, exit
status, sources of every rule and number) is ``python health_report.py --help``; the rules table
is ``--list-rules`` and docs/health_rules.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import os
import re
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from script_utils import ArgumentParser, DataError, one_line, positive_int, write_bytes_atomic

# --------------------------------------------------------------------------------------
# Metric tags, as verl 0.6.0 logs them.
# --------------------------------------------------------------------------------------
TAG_ENTROPY = "actor/entropy"  # ray_trainer.py, from the old-log-prob pass
TAG_MAX_MEM = "perf/max_memory_allocated_gb"  # fsdp_workers.py; 0 at every step on a CPU run
TAG_MAX_MEM_RESERVED = "perf/max_memory_reserved_gb"  # fsdp_workers.py, the device allocator's peak
TAG_CPU_MEM = "perf/cpu_memory_used_gb"  # fsdp_workers.py, the host's used memory (psutil)
MEMORY_TAGS = (TAG_MAX_MEM_RESERVED, TAG_MAX_MEM, TAG_CPU_MEM)
#: a tag's stand-in where verl logs the same quantity under another name: without the old-log-prob
#: pass (rollout-correction bypass mode), the policy's entropy is the update's, actor/entropy_loss
#: (verl/workers/utils/losses.py, logged with actor.calculate_entropy=True), on the same responses
#: under the same weights when the update is on-policy; verl 0.9.1 logs the memory tags from
#: workers/engine_workers.py under actor/
SAME_QUANTITY = {TAG_ENTROPY: "actor/entropy_loss", **{tag: f"actor/{tag}" for tag in MEMORY_TAGS}}
TAG_KL_LOSS = "actor/kl_loss"  # dp_actor.py, only with actor.use_kl_loss=True
TAG_KL_COEF = "actor/kl_coef"  # dp_actor.py, = actor.kl_loss_coef
TAG_PG_LOSS = "actor/pg_loss"  # dp_actor.py
TAG_CLIPFRAC = "actor/pg_clipfrac"  # dp_actor.py
TAG_PPO_KL = "actor/ppo_kl"  # dp_actor.py, KL(old || current) inside the update
TAG_GRAD_NORM = "actor/grad_norm"  # dp_actor.py, pre-clip norm per optimizer step
TAG_LR = "actor/lr"  # fsdp_workers.py
TAG_RESP_LEN = "response_length/mean"  # metric_utils.py compute_data_metrics
TAG_RESP_CLIP = "response_length/clip_ratio"  # share of responses at max length
TAG_RESP_MIN = "response_length/min"  # the step's shortest response, in tokens
TAG_ABORTED = "response/aborted_ratio"  # verl 0.9.1 metric_utils.py: the share of responses of length 0
TAG_SCORE_MEAN = "critic/score/mean"  # metric_utils.py, sequence score before KL
TAG_SCORE_MAX = "critic/score/max"
TAG_SCORE_MIN = "critic/score/min"
TAG_ADV_MAX = "critic/advantages/max"
TAG_ADV_MIN = "critic/advantages/min"
TAG_THROUGHPUT = "perf/throughput"  # metric_utils.py, tokens / (s * GPU)
TAG_MFU = "perf/mfu/actor"  # fsdp_workers.py, fraction of peak FLOPS
# Rollout vs actor on the rollout's sampled tokens (verl/utils/debug/metrics.py, verl 0.6.0 and
# 0.9.1, logged with rollout.calculate_log_probs=True): Pearson correlation and absolute
# difference of the token probabilities.
TAG_ROLLOUT_PEARSON = "training/rollout_actor_probs_pearson_corr"
TAG_ROLLOUT_PROBS_DIFF = "training/rollout_probs_diff_mean"
ROLLOUT_TAGS = (TAG_ROLLOUT_PEARSON, TAG_ROLLOUT_PROBS_DIFF)
#: The recipe's validation tag (verl names it val-core/<data_source>/<var>/mean@<n>, where
#: <var> is "acc" when the reward function returns an "acc" extra, else "reward").
DEFAULT_VAL_TAG = "val-core/DigitalLearningGmbH/MATH-lighteval/reward/mean@1"

VAL_MEAN_RE = re.compile(r"^val-(?P<sec>core|aux)/(?P<src>.+)/(?P<var>[^/]+)/mean@(?P<n>\d+)$")

LEVELS = ("skipped", "ok", "info", "warn", "alert")
SEVERITY = {name: i for i, name in enumerate(LEVELS)}

# --------------------------------------------------------------------------------------
# Sources, cited by the rules.
# --------------------------------------------------------------------------------------
SRC_GUIDE = "reference recipe metric guide"
SRC_DP_ACTOR = "verl 0.6.0 verl/workers/actor/dp_actor.py"
SRC_TRAINER = "verl 0.6.0 verl/trainer/ppo/ray_trainer.py"
SRC_METRIC_UTILS = "verl 0.6.0 verl/trainer/ppo/metric_utils.py"
SRC_FSDP_WORKERS = "verl 0.6.0 verl/workers/fsdp_workers.py"
SRC_GRPO = "GRPO, Shao et al. 2024 (DeepSeekMath, arXiv:2402.03300)"
SRC_DAPO = "DAPO, Yu et al. 2025 (arXiv:2503.14476)"
SRC_REAL_CLIPFRAC = "public verl GRPO step logs at actor/lr 1e-6..2e-6: pg_clipfrac 0.0003-0.0013"
SRC_DEBUG_METRICS = "verl 0.6.0 / 0.9.1 verl/utils/debug/metrics.py"
SRC_RECORDED = "the recorded CPU runs in tests/data/health_*"
SRC_SIMPLERL = ("hkust-nlp/simpleRL-reason issues #65 (Qwen2.5-1.5B on MATH: response_length/mean fell) "
                "and #90 (it fell from over-long, cut-off step-0 responses)")


# --------------------------------------------------------------------------------------
# Thresholds: every number the rules use, in one place. Override with --set NAME=VALUE.
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Thresholds:
    """Named, overridable thresholds (units in the comments; sources in RULES)."""

    # actor/entropy, nats per token. GUIDE: >= 2.0 exploring, < 0.5 confident, -> 0 collapse.
    entropy_high: float = 2.0
    entropy_low: float = 0.5
    #: absolute floor: below this the policy is (near) deterministic -> collapse.
    entropy_collapse_abs: float = 0.01
    #: below entropy_low AND below this fraction of the run's initial entropy -> collapse.
    entropy_collapse_frac: float = 0.2
    #: below entropy_low AND below this fraction of the initial entropy -> warn (falling).
    entropy_drop_warn_frac: float = 0.5
    #: >= entropy_high AND >= this multiple of the initial entropy -> warn (degenerating).
    entropy_rise_warn_factor: float = 2.0
    #: steps whose median gives the "initial" value of a metric.
    baseline_steps: int = 3

    # actor/kl_loss, nats per token (low_var_kl estimator, verl default). The GUIDE gives no
    # numbers; these are heuristics for kl_loss_coef ~ 1e-3 (real runs: ~1e-3 early on).
    kl_loss_warn: float = 0.1
    kl_loss_alert: float = 1.0
    #: still at or below this after kl_low_min_steps -> the policy is not moving.
    kl_loss_low: float = 1e-5
    kl_low_min_steps: int = 10

    # actor/pg_clipfrac, fraction of tokens. GUIDE: 10-25 % healthy, > 30 % too violent,
    # < 5 % constraint too strong / lr too low.
    clipfrac_healthy_low: float = 0.10
    clipfrac_healthy_high: float = 0.25
    clipfrac_violent: float = 0.30
    clipfrac_too_low: float = 0.05
    #: the GUIDE's low band is only applied at actor lr >= this (real runs at 1e-6: ~0.1 %).
    clipfrac_band_min_lr: float = 1e-5
    clipfrac_low_persist: int = 3

    # actor/grad_norm (pre-clip L2 norm). GUIDE: steady around 0.1-1.0; verl clips at 1.0.
    grad_norm_band_low: float = 0.1
    grad_norm_band_high: float = 1.0
    grad_high_persist: int = 3
    #: a step above this multiple of the trailing median is a spike.
    grad_spike_factor: float = 5.0
    grad_spike_window: int = 10
    grad_spike_min_history: int = 3
    #: spikes below this absolute norm are ignored (a jump from 0.001 to 0.01 is harmless).
    grad_spike_min_value: float = 0.1

    # response_length/mean, tokens. GUIDE: sudden rise / fall. Relative to trailing median.
    resp_rise_factor: float = 1.5
    resp_fall_factor: float = 0.5
    resp_window: int = 5
    resp_min_history: int = 3
    # response_length/clip_ratio: share of responses cut at max_response_length.
    resp_clip_ratio_warn: float = 0.2
    resp_clip_persist: int = 3

    # validation vs training reward (GUIDE: same magnitude).
    #: larger/smaller ratio of |val| and |train| above this -> not the same magnitude.
    val_train_ratio_max: float = 3.0
    #: both below this in absolute value -> too small to compare.
    val_train_min_abs: float = 0.05
    #: validation below its best by at least this (reward units) -> regression.
    val_drop: float = 0.03
    #: training score up by at least this over the same span -> reward up / val down.
    train_rise: float = 0.03
    #: training steps averaged for the training level at a validation point.
    train_window: int = 5

    # GRPO learning signal (critic/advantages/*, rollout dumps).
    zero_adv_eps: float = 1e-8
    no_signal_alert_steps: int = 3
    #: share of prompt groups whose responses all scored the same -> warn.
    zero_var_group_frac_warn: float = 0.75

    # Rollout vs actor agreement on the rollout's tokens (derivations: RULE_WHY).
    #: Pearson correlation of the token probabilities below this -> alert.
    rollout_pearson_min: float = 0.8
    #: without the old-log-prob pass (bypass mode): actor/ppo_kl, the mean of (rollout - actor)
    #: log-prob over the rollout's tokens at the on-policy update, above this -> alert.
    rollout_ppo_kl_max: float = 0.05

    # The first validation after step 0 against the step-0 validation.
    #: below this fraction of the step-0 value ...
    val_first_drop_frac: float = 0.5
    #: ... and at least this much lower (reward units) -> warn.
    val_first_drop_abs: float = 0.05

    #: critic/score/mean exactly 0 at each of the first this many steps -> alert.
    zero_reward_steps: int = 3

    # response_length/mean falling steadily: windows of the last W, 2W, 4W ... logged steps.
    resp_decline_window: int = 10
    #: Kendall's tau of (step, length) in the window at or below this ...
    resp_decline_tau: float = -0.6
    #: ... and the Theil-Sen line falls by at least this fraction of its start ...
    resp_decline_frac: float = 0.15
    #: ... with no single step's fall above this share of that fall (else it is a sudden fall).
    resp_decline_step_share: float = 0.5

    # perf/throughput (tokens/s/GPU): a step below this fraction of the trailing median.
    perf_drop_factor: float = 0.5
    perf_window: int = 5
    perf_min_history: int = 2

    # Device or host memory growing step after step (MEMORY_TAGS; derivations: RULE_WHY).
    #: logged steps left out first (optimizer states, KV cache and allocator pools are set up) ...
    mem_warmup_steps: int = 2
    #: ... then at least this many steps, whose Kendall's tau of (step, GB) is at least this ...
    mem_min_steps: int = 8
    mem_growth_tau: float = 0.6
    #: ... and whose Theil-Sen line grows by at least this many GB and this fraction of its start.
    mem_growth_gb: float = 1.0
    mem_growth_frac: float = 0.1


DEFAULT_THRESHOLDS = Thresholds()


def override_thresholds(base: Thresholds, assignments: Sequence[str]) -> Thresholds:
    """Return ``base`` with ``NAME=VALUE`` assignments applied.

    Args:
        base: thresholds to start from.
        assignments: strings ``"name=value"``; ``name`` is a field of :class:`Thresholds`,
            ``value`` parses as that field's type (int or float).
    Raises:
        ValueError: unknown name, missing ``=`` or a value of the wrong type.
    """
    fields = {f.name: f for f in dataclasses.fields(Thresholds)}
    changes = {}
    for item in assignments:
        if "=" not in item:
            raise ValueError(f"--set {item!r}: expected NAME=VALUE")
        name, _, raw = item.partition("=")
        name = name.strip().lower()
        if name not in fields:
            raise ValueError(f"--set {item!r}: unknown threshold {name!r} (see --list-rules)")
        typ = int if fields[name].type in (int, "int") else float
        try:
            changes[name] = typ(raw)
        except ValueError:
            raise ValueError(f"--set {item!r}: expected a {typ.__name__} value") from None
    return dataclasses.replace(base, **changes)


# --------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Series:
    """One scalar tag: ``steps`` (int64, increasing, unique) and ``values`` (float64)."""

    steps: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return int(self.steps.size)

    @property
    def finite(self) -> np.ndarray:
        return np.isfinite(self.values)


@dataclass
class Run:
    """One run's scalars. ``name``: a TensorBoard run's path relative to LOGDIR ("." for
    LOGDIR itself), a SwanLab run's ``<project>/<experiment>``. ``about``: what the log says
    of the run beyond its path (SwanLab: the experiment and its state), or ""."""

    name: str
    path: Path
    scalars: Dict[str, Series]
    about: str = ""

    def get(self, tag: str) -> Optional[Series]:
        s = self.scalars.get(tag)
        if (s is None or not len(s)) and tag in SAME_QUANTITY:
            s = self.scalars.get(SAME_QUANTITY[tag])
        return s if s is not None and len(s) else None

    @property
    def train_steps(self) -> List[int]:
        for tag in (TAG_SCORE_MEAN, TAG_PG_LOSS, TAG_RESP_LEN, TAG_GRAD_NORM):
            s = self.get(tag)
            if s is not None:
                return [int(x) for x in s.steps]
        return []


#: The SQLite database that swanlab's local mode keeps in its log directory.
SWANLAB_DB = "runs.swanlab"
EXPECTED_LOGDIR = (
    "a TensorBoard log directory (events.out.tfevents.*: trainer.logger with 'tensorboard', "
    "$TENSORBOARD_DIR) or a SwanLab log directory (swanlog/ holding " + SWANLAB_DB + ": trainer.logger "
    "with 'swanlab', SWANLAB_MODE=local, $SWANLAB_LOG_DIR)"
)


def find_event_files(logdir: Path) -> List[Path]:
    """Event files under ``logdir`` (recursive, sorted), or ``[logdir]`` if it is one.

    Raises:
        DataError: ``logdir`` does not exist or holds no ``*tfevents*`` file.
    """
    if not logdir.exists():
        raise DataError(f"{logdir}: no such file or directory (expected {EXPECTED_LOGDIR})")
    if logdir.is_file():
        if "tfevents" not in logdir.name:
            raise DataError(f"{logdir}: not a TensorBoard event file (expected events.out.tfevents.* "
                             f"or {SWANLAB_DB})")
        return [logdir]
    files, swanlogs = [], []
    for root, dirs, names in os.walk(logdir):
        dirs.sort()
        files.extend(Path(root) / n for n in sorted(names) if "tfevents" in n)
        if SWANLAB_DB in names:
            swanlogs.append(root)
    if not files:
        hint = f"; SwanLab logs found in {swanlogs[0]}: pass that folder" if swanlogs else ""
        raise DataError(f"{logdir}: no TensorBoard event files (events.out.tfevents.*) and no SwanLab "
                         f"{SWANLAB_DB} found; expected {EXPECTED_LOGDIR}{hint}")
    return files


def _make_series(points: Iterable[Tuple[int, float]]) -> Series:
    last: Dict[int, float] = {}
    for step, value in points:  # in file order: a re-logged step keeps its last value
        last[int(step)] = float(value)
    steps = np.array(sorted(last), dtype=np.int64)
    return Series(steps, np.array([last[s] for s in steps], dtype=np.float64))


def load_scalars(path: Path) -> Dict[str, Series]:
    """Read every scalar of one run (a directory of event files, or one event file).

    Uses TensorBoard's ``EventAccumulator`` (size_guidance 0 for scalars and tensors: keep
    every point). 0-d numeric tensor summaries are returned as scalars as well.

    Raises:
        DataError: the reader failed on the file(s) (e.g. not an event file).
    """
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    guidance = {ea.SCALARS: 0, ea.TENSORS: 0, ea.IMAGES: 1, ea.AUDIO: 1, ea.HISTOGRAMS: 1,
                ea.COMPRESSED_HISTOGRAMS: 1}
    try:
        acc = ea.EventAccumulator(str(path), size_guidance=guidance)
        acc.Reload()
        tags = acc.Tags()
        out: Dict[str, Series] = {}
        for tag in tags.get(ea.SCALARS, []):
            out[tag] = _make_series((e.step, e.value) for e in acc.Scalars(tag))
        for tag in tags.get(ea.TENSORS, []):
            if tag in out:
                continue
            points = []
            for e in acc.Tensors(tag):
                arr = tensor_util.make_ndarray(e.tensor_proto)
                if arr.size != 1 or arr.dtype.kind not in "fiub":
                    points = []
                    break
                points.append((e.step, float(arr.reshape(-1)[0])))
            if points:
                out[tag] = _make_series(points)
    except Exception as exc:  # the reader's errors are varied; report them in one line
        raise DataError(f"{path}: cannot read TensorBoard events ({one_line(exc) or type(exc).__name__})") from None
    return out


def scalars_by_step(path: Path) -> Dict[str, Dict[int, float]]:
    """``{tag: {global step: value}}`` of one run, for scripts and tests that want plain dicts.

    ``path``: a TensorBoard run (see :func:`load_scalars`), or a SwanLab log directory that
    holds one experiment (or a ``run-*`` folder in one; see :func:`discover_swanlab_runs`).
    Raises DataError like those.
    """
    path = Path(path)
    if swanlab_root(path) is not None:
        runs = discover_swanlab_runs(path)
        if len(runs) != 1:
            raise DataError(f"{path}: {len(runs)} SwanLab experiments ({', '.join(r.name for r in runs)}); "
                             "expected one: pass its run-* folder")
        scalars = runs[0].scalars
    else:
        scalars = load_scalars(path)
    return {tag: dict(zip(s.steps.tolist(), s.values.tolist())) for tag, s in scalars.items()}


# --------------------------------------------------------------------------------------
# SwanLab local logs (layout: module docstring)
# --------------------------------------------------------------------------------------
def swanlab_root(path: Path) -> Optional[Path]:
    """The SwanLab log directory that ``path`` designates, or None when it is not one.

    ``path`` may be the directory holding :data:`SWANLAB_DB`, that file, or a ``run-*``
    folder directly inside such a directory.
    """
    path = Path(path)
    if path.is_file():
        return path.parent if path.name == SWANLAB_DB else None
    if (path / SWANLAB_DB).is_file():
        return path
    if path.is_dir() and path.name.startswith("run-") and (path.parent / SWANLAB_DB).is_file():
        return path.parent
    return None


def _open_swanlab_db(db: Path) -> sqlite3.Connection:
    """Open the database read-only. SQLite in WAL mode (as swanboard sets it) needs a
    writable folder for its shared-memory file even to read; a read-only copy of a finished
    run is opened as immutable instead."""
    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return con
    except sqlite3.Error:
        return sqlite3.connect(f"{db.resolve().as_uri()}?immutable=1", uri=True)


def read_swanlab_points(tag_dir: Path) -> Series:
    """One scalar tag's points from its ``<n>.log`` JSON lines (files in slice order).

    Lines that are not a JSON object with an integer ``index`` and a numeric ``data`` (a
    line still being written, a media entry) are skipped. NaN and infinities, which
    swanlab writes as the JSON extensions ``NaN`` / ``Infinity``, are kept.
    """
    def slice_key(p: Path):
        return (0, int(p.stem)) if p.stem.isdigit() else (1, p.name)

    points = []
    for f in sorted((p for p in tag_dir.glob("*.log") if p.is_file()), key=slice_key):
        with open(f, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                    step, value = rec["index"], rec["data"]
                except (ValueError, KeyError, TypeError):
                    continue
                if isinstance(step, int) and isinstance(value, (int, float)) and not isinstance(value, bool):
                    points.append((step, value))
    return _make_series(points)


_EXPERIMENT_STATES = {0: "running", 1: "finished", -1: "crashed or stopped"}


def runs_with_scalars(runs: list, empty_message: str) -> list:
    """The runs that logged scalars (a note on stderr for each that has none yet); DataError
    ``empty_message`` when none has."""
    with_data = [r for r in runs if r.scalars]
    for r in runs:
        if with_data and not r.scalars:
            print(f"note: {r.path}: no scalars yet, run not reported", file=sys.stderr)
    if not with_data:
        raise DataError(empty_message)
    return with_data


def discover_swanlab_runs(path: Path, select: Optional[str] = None) -> List[Run]:
    """Load the experiments of a SwanLab log directory (see :func:`swanlab_root`).

    Each experiment is one :class:`Run` named ``<project>/<experiment>``, with ``path`` its
    ``run-*`` folder; given a ``run-*`` folder, only that experiment. ``select`` keeps runs
    whose name or folder contains it. Tags of type ``line`` are read (verl logs every
    metric as a scalar); their points come from :func:`read_swanlab_points`.

    Raises:
        DataError: unreadable database, no experiment (matching ``select``), or no scalars.
    """
    path = Path(path)
    root = swanlab_root(path)
    if root is None:
        raise DataError(f"{path}: not a SwanLab log directory (expected a folder holding {SWANLAB_DB})")
    db = root / SWANLAB_DB
    only = path.name if path.is_dir() and path != root else None
    try:
        con = _open_swanlab_db(db)
        try:
            rows = con.execute(
                "SELECT e.id, e.run_id, e.name, e.status, p.name FROM experiment e "
                "JOIN project p ON p.id = e.project_id ORDER BY e.id").fetchall()
            tags = {}
            for exp_id, name, folder, kind in con.execute("SELECT experiment_id, name, folder, type FROM tag"):
                if kind == "line":
                    tags.setdefault(exp_id, []).append((name, folder))
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise DataError(f"{db}: cannot read the SwanLab database ({exc}; expected swanlab's local-mode "
                         "runs.swanlab with tables project, experiment, tag)") from None
    runs = []
    for exp_id, run_id, exp_name, status, project in rows:
        name = f"{project}/{exp_name}"
        if only is not None and run_id != only:
            continue
        if select is not None and select not in name and select not in str(run_id):
            continue
        state = _EXPERIMENT_STATES.get(status, f"status {status}")
        run = Run(name=name, path=root / str(run_id), scalars={},
                  about=f"SwanLab experiment `{name}` ({state})")
        logs = run.path / "logs"
        for tag, folder in tags.get(exp_id, []):
            tag_dir = logs / (folder if folder else tag)
            if tag_dir.is_dir():
                series = read_swanlab_points(tag_dir)
                if len(series):
                    run.scalars[tag] = series
        runs.append(run)
    if not runs:
        names = ", ".join(f"{p}/{n} ({r})" for _, r, n, _, p in rows) or "none"
        what = f"experiment {only!r}" if only else (f"experiment matching {select!r}" if select else "experiment")
        raise DataError(f"{root}: no SwanLab {what} in {SWANLAB_DB} (experiments: {names})")
    return runs_with_scalars(runs, f"{path}: SwanLab logs hold no scalars yet (expected verl metrics such as "
                                    f"{TAG_PG_LOSS} under {runs[0].path / 'logs'}; is the run still starting?)")


def discover_runs(logdir: Path, select: Optional[str] = None) -> List[Run]:
    """Find and load the runs under ``logdir``.

    Args:
        logdir: a SwanLab log directory (see :func:`discover_swanlab_runs`), else a
            directory searched recursively for TensorBoard event files, or one event file.
        select: keep runs whose name (TensorBoard: relative path) contains this substring.
    Raises:
        DataError: neither kind of log, no run matching ``select``, or no scalars at all.
    """
    if swanlab_root(logdir) is not None:
        return discover_swanlab_runs(logdir, select)
    files = find_event_files(logdir)
    if logdir.is_file():
        groups = {logdir: [logdir]}
    else:
        groups: Dict[Path, List[Path]] = {}
        for f in files:
            groups.setdefault(f.parent, []).append(f)
    runs = []
    for path in sorted(groups):
        name = "." if logdir.is_file() else (os.path.relpath(path, logdir) if path != logdir else ".")
        if select is not None and select not in name:
            continue
        runs.append(Run(name=name, path=path, scalars={}))
    if not runs:
        raise DataError(f"{logdir}: no run path contains {select!r} (runs: "
                         f"{', '.join(os.path.relpath(p, logdir) for p in sorted(groups))})")
    for run in runs:
        run.scalars = load_scalars(run.path)
    return runs_with_scalars(runs, f"{logdir}: event files hold no scalars yet (expected verl metrics such as "
                                    f"{TAG_PG_LOSS}; is the run still starting?)")


def read_rollout_groups(rollout_dir: Path) -> Dict[int, Tuple[int, int, int]]:
    """Per training step, (groups, groups whose responses all scored the same, responses whose
    ``output`` is empty: no token, or only special ones, which the dump's decoding drops).

    Reads verl's rollout dumps (``trainer.rollout_data_dir``: ``<step>.jsonl``, one line per
    response with ``input``, ``output``, ``score``, ``step``; ray_trainer.py ``_dump_generations``).
    Responses are grouped by identical prompt text (GRPO's ``rollout.n`` samples per
    prompt); groups of one response are not counted. Malformed lines (a file still being
    written) are skipped.

    Raises:
        DataError: the directory is missing or holds no ``<step>.jsonl`` file.
    """
    if not rollout_dir.is_dir():
        raise DataError(f"{rollout_dir}: not a directory (expected verl's trainer.rollout_data_dir)")
    files = sorted((p for p in rollout_dir.glob("*.jsonl") if p.stem.isdigit()), key=lambda p: int(p.stem))
    if not files:
        raise DataError(f"{rollout_dir}: no <step>.jsonl rollout dumps (expected verl's trainer.rollout_data_dir)")
    out = {}
    for f in files:
        groups: Dict[str, List[float]] = {}
        empty = 0
        with open(f, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                    groups.setdefault(str(rec["input"]), []).append(float(rec["score"]))
                    empty += rec.get("output") == ""
                except (ValueError, KeyError, TypeError):
                    continue
        sized = [g for g in groups.values() if len(g) >= 2]
        if sized or empty:
            zero = sum(1 for g in sized if max(g) - min(g) <= 1e-9)
            out[int(f.stem)] = (len(sized), zero, empty)
    return out


# --------------------------------------------------------------------------------------
# The run's configuration: Hydra's record of what main_ppo composed
# --------------------------------------------------------------------------------------
#: Where Hydra records main_ppo's composed configuration, relative to the launcher's OUTPUT_DIR
#: (run_qwen2_5_1_5b.sh sets hydra.run.dir=$OUTPUT_DIR/hydra; Hydra writes .hydra/ in it).
HYDRA_CONFIG = Path("hydra") / ".hydra" / "config.yaml"


@dataclass(frozen=True)
class RunConfig:
    """What the report takes from a run's Hydra config: the experiment's name and the reward
    function verl loaded (``reward_file`` None: verl's built-in reward, by data_source)."""

    path: Path
    experiment: Optional[str]
    reward_key: str
    reward_file: Optional[str]
    reward_name: Optional[str]

    @property
    def reward(self) -> str:
        if not self.reward_file:
            return (f"verl's built-in default_compute_score (chosen by data_source; {self.reward_key}.path is "
                    f"empty in {self.path})")
        return f"{self.reward_file}:{self.reward_name or 'compute_score'} ({self.reward_key} in {self.path})"


def log_folder(run: Run) -> Path:
    """The folder the run's logger wrote: a TensorBoard run's directory, a SwanLab run's swanlog."""
    return swanlab_root(run.path) or (run.path.parent if run.path.is_file() else run.path)


def find_run_config(run: Run) -> Optional[Path]:
    """``<OUTPUT_DIR>/hydra/.hydra/config.yaml`` when the run's log folder sits in the launcher's
    layout (``OUTPUT_DIR/tensorboard`` or ``OUTPUT_DIR/swanlog``), else None."""
    path = log_folder(run).resolve().parent / HYDRA_CONFIG
    return path if path.is_file() else None


def read_run_config(path: Path) -> RunConfig:
    """Read Hydra's ``config.yaml`` of a main_ppo run.

    The reward function verl loads: verl 0.9.x reads ``reward.custom_reward_function`` (the
    top-level key still composes but is ignored), verl 0.6.0 the top-level
    ``custom_reward_function``. Raises DataError when the file is not a YAML mapping.
    """
    import yaml  # PyYAML, a dependency of verl's omegaconf

    try:
        cfg = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise DataError(f"{path}: cannot read the run's Hydra config ({one_line(exc)})") from None
    if not isinstance(cfg, dict):
        raise DataError(f"{path}: not a Hydra config (expected a YAML mapping with trainer, data, ...)")

    def section(d, key) -> dict:
        v = d.get(key) if isinstance(d, dict) else None
        return v if isinstance(v, dict) else {}

    trainer = section(cfg, "trainer")
    if isinstance(section(cfg, "reward").get("custom_reward_function"), dict):
        key, crf = "reward.custom_reward_function", section(section(cfg, "reward"), "custom_reward_function")
    else:
        key, crf = "custom_reward_function", section(cfg, "custom_reward_function")
    name = trainer.get("experiment_name")
    return RunConfig(Path(path), str(name) if name else None, key,
                     str(crf["path"]) if crf.get("path") else None,
                     str(crf["name"]) if crf.get("name") else None)


def experiment_name(run: Run, config: Optional[RunConfig]) -> Tuple[str, str]:
    """(the experiment's name, where it comes from) for titles: trainer.experiment_name from the
    Hydra config; else a SwanLab run's ``<project>/<experiment>``; else, for a log folder named
    ``tensorboard`` or ``swanlog`` (the launcher's ``OUTPUT_DIR/tensorboard``, OUTPUT_DIR being
    ``outputs/$EXPERIMENT_NAME`` by default), the folder above it; else the run's folder (verl's
    own ``tensorboard_log/<project>/<experiment>``)."""
    if config is not None and config.experiment:
        return config.experiment, f"trainer.experiment_name in {config.path}"
    if run.about:
        return run.name, "SwanLab experiment"
    folder = log_folder(run).resolve()
    if folder.name in ("tensorboard", "swanlog"):
        return folder.parent.name, f"the folder holding {folder.name}/"
    return folder.name, "the log folder"


# --------------------------------------------------------------------------------------
# Context: what the log says about the run's configuration.
# --------------------------------------------------------------------------------------
@dataclass
class Context:
    """Run configuration as read from the log or given on the command line."""

    updates_per_step: Optional[int] = None
    updates_note: str = "unknown"
    lr: Optional[float] = None
    lr_note: str = "unknown"
    kl_coef: Optional[float] = None
    kl_coef_note: str = "unknown"
    loss_scale: float = 1.0
    val_tag: Optional[str] = None
    val_reward_tag: Optional[str] = None
    rollout_groups: Optional[Dict[int, Tuple[int, int, int]]] = None
    clipfrac_band_applies: bool = True
    clipfrac_note: str = ""
    config: Optional[RunConfig] = None
    experiment: str = ""
    experiment_note: str = ""
    #: a CPU run: perf/max_memory_allocated_gb 0 at every step (no accelerator memory used).
    on_cpu: bool = False


def _last_finite(s: Optional[Series]) -> Optional[float]:
    if s is None:
        return None
    v = s.values[s.finite]
    return float(v[-1]) if v.size else None


def pick_val_tags(tags: Iterable[str], requested: Optional[str] = None) -> Tuple[Optional[str], Optional[str]]:
    """Choose the validation tags: (core tag, reward tag comparable with critic/score/mean).

    The core tag is ``requested`` if given, else the recipe's :data:`DEFAULT_VAL_TAG`, else
    the first ``val-core/<src>/<var>/mean@<n>`` (``acc`` preferred, largest ``n``). The
    reward tag is ``val-(core|aux)/<same src>/reward/mean@<n>`` (largest ``n``) if logged,
    else the core tag (verl names: ray_trainer.py ``_validate``).
    """
    tags = sorted(tags)
    parsed = {t: VAL_MEAN_RE.match(t) for t in tags}
    parsed = {t: m for t, m in parsed.items() if m}
    core = None
    if requested:
        core = requested if requested in tags else None
    elif DEFAULT_VAL_TAG in tags:
        core = DEFAULT_VAL_TAG
    else:
        cands = [(t, m) for t, m in parsed.items() if m["sec"] == "core"]
        cands.sort(key=lambda tm: (tm[1]["var"] != "acc", -int(tm[1]["n"]), tm[0]))
        core = cands[0][0] if cands else None
    if core is None:
        return None, None
    m = VAL_MEAN_RE.match(core)
    reward = core
    if m:
        rew = [(t, mm) for t, mm in parsed.items() if mm["src"] == m["src"] and mm["var"] == "reward"]
        rew.sort(key=lambda tm: (-int(tm[1]["n"]), tm[1]["sec"] != "core"))
        if rew:
            reward = rew[0][0]
    return core, reward


def build_context(run: Run, th: Thresholds, *, updates_per_step: Optional[int] = None,
                  lr: Optional[float] = None, kl_coef: Optional[float] = None,
                  loss_scale: float = 1.0, val_tag: Optional[str] = None,
                  rollout_groups: Optional[Dict[int, Tuple[int, int, int]]] = None,
                  config: Optional[RunConfig] = None) -> Context:
    """Work out the run's configuration from its log, with command-line values winning.

    ``config``: the run's Hydra config (:func:`read_run_config`), for the experiment's name
    and the reward function verl loaded.

    Updates per step: verl's ``on_policy`` branch (dp_actor.py: one PPO mini-batch and
    ``ppo_epochs == 1``) uses the current log-probs as the old ones, so the ratio is 1 and
    ``actor/pg_clipfrac`` and ``actor/ppo_kl`` are exactly 0 at every step; that pattern
    is read as one update per step.
    """
    ctx = Context(loss_scale=loss_scale, rollout_groups=rollout_groups, config=config)
    ctx.experiment, ctx.experiment_note = experiment_name(run, config)
    mem = run.get(TAG_MAX_MEM)
    ctx.on_cpu = bool(mem is not None and mem.finite.any() and np.all(mem.values[mem.finite] == 0))
    if updates_per_step is not None:
        ctx.updates_per_step, ctx.updates_note = updates_per_step, "--updates-per-step"
    else:
        cf, pk = run.get(TAG_CLIPFRAC), run.get(TAG_PPO_KL)

        def all_zero(s: Optional[Series]) -> Optional[bool]:
            return None if s is None or not s.finite.any() else bool(np.all(s.values[s.finite] == 0))

        zc, zk = all_zero(cf), all_zero(pk)
        if zc is False or zk is False:
            ctx.updates_note = "more than 1 (actor/pg_clipfrac or actor/ppo_kl non-zero: the ratio moved off 1)"
        elif zc and zk:
            ctx.updates_per_step = 1
            ctx.updates_note = ("detected: actor/pg_clipfrac and actor/ppo_kl exactly 0 at every step "
                                "(verl on-policy branch, dp_actor.py)")
        elif zc:
            ctx.updates_per_step = 1
            ctx.updates_note = "probably (actor/pg_clipfrac exactly 0 at every step, actor/ppo_kl not logged)"
    if lr is not None:
        ctx.lr, ctx.lr_note = lr, "--lr"
    else:
        ctx.lr = _last_finite(run.get(TAG_LR))
        ctx.lr_note = TAG_LR if ctx.lr is not None else "unknown (actor/lr not logged)"
    if kl_coef is not None:
        ctx.kl_coef, ctx.kl_coef_note = kl_coef, "--kl-coef"
    else:
        ctx.kl_coef = _last_finite(run.get(TAG_KL_COEF))
        ctx.kl_coef_note = TAG_KL_COEF if ctx.kl_coef is not None else "unknown (actor/kl_coef not logged)"
    ctx.val_tag, ctx.val_reward_tag = pick_val_tags(run.scalars, val_tag)

    reasons = []
    if ctx.updates_per_step == 1:
        reasons.append("one policy update per step (on-policy: the PPO ratio is 1, so the clip "
                       "fraction is 0 by construction)")
    if ctx.lr is not None and ctx.lr < th.clipfrac_band_min_lr:
        reasons.append(f"actor lr {ctx.lr:g} < {th.clipfrac_band_min_lr:g}: public verl GRPO runs at lr "
                       "1e-6..2e-6 log pg_clipfrac of 0.03-0.13 %, far below the guide's 10-25 % band, "
                       "which comes from classic PPO learning rates")
    ctx.clipfrac_band_applies = not reasons
    ctx.clipfrac_note = ("; ".join(reasons) if reasons else
                         "the guide's 10-25 % clip-fraction band is applied (lr unknown or >= "
                         f"{th.clipfrac_band_min_lr:g} and more than one update per step)")
    return ctx


# --------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------
@dataclass
class Finding:
    """The outcome of one rule on one run."""

    rule: str
    tag: str
    level: str
    step: Optional[int]
    value: Optional[float]
    message: str
    source: str = ""


#: What a check returns: (level, step or None, value or None, message[, tag override]).
CheckResult = tuple
Check = Callable[[Run, Thresholds, Context], CheckResult]


@dataclass(frozen=True)
class Rule:
    """A named health rule: ``check`` runs only when every tag in ``needs`` has data."""

    id: str
    tag: str
    needs: Tuple[str, ...]
    thresholds: str
    source: str
    check: Check
    needs_val: bool = False
    needs_rollouts: bool = False
    #: at least one of these tags must have data (where the stacks log different metrics).
    needs_any: Tuple[str, ...] = ()
    #: how the thresholds were chosen, for docs/health_rules.md (rules_markdown).
    why: str = ""


def _fmt(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:.4g}"


def _baseline(s: Series, th: Thresholds) -> Optional[float]:
    v = s.values[s.finite][: max(1, th.baseline_steps)]
    return float(np.median(v)) if v.size else None


def _first(mask: np.ndarray) -> Optional[int]:
    idx = np.flatnonzero(mask)
    return int(idx[0]) if idx.size else None


def _first_persistent(mask: np.ndarray, k: int) -> Optional[int]:
    """Index where the first run of ``k`` consecutive True values starts."""
    run = 0
    for i, m in enumerate(mask):
        run = run + 1 if m else 0
        if run >= max(1, k):
            return i - run + 1
    return None


def _trailing_medians(values: np.ndarray, window: int, min_history: int) -> np.ndarray:
    """Median of the finite values in the ``window`` points before each point (NaN if fewer
    than ``min_history``)."""
    out = np.full(values.shape, np.nan)
    for i in range(values.size):
        prev = values[max(0, i - window): i]
        prev = prev[np.isfinite(prev)]
        if prev.size >= max(1, min_history):
            out[i] = float(np.median(prev))
    return out


def _at(s: Series, i: Optional[int]) -> Tuple[Optional[int], Optional[float]]:
    return (None, None) if i is None else (int(s.steps[i]), float(s.values[i]))


def check_entropy_collapse(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_ENTROPY)
    v, fin = s.values, s.finite
    base = _baseline(s, th)
    if base is None:
        return "ok", None, None, "no finite entropy values"
    low = fin & (v < th.entropy_low)
    alert = fin & ((v < th.entropy_collapse_abs) | (low & (v < th.entropy_collapse_frac * base)))
    warn = low & (v < th.entropy_drop_warn_frac * base)
    if alert.any():
        step, val = _at(s, _first(alert))
        return ("alert", step, val, f"entropy collapse: {_fmt(val)} nats/token (initial {_fmt(base)}); "
                f"below {th.entropy_collapse_abs:g} or below {th.entropy_collapse_frac:g}x the initial value "
                "- the policy is becoming deterministic and stops exploring")
    if warn.any():
        step, val = _at(s, _first(warn))
        return ("warn", step, val, f"entropy falling: {_fmt(val)} < {th.entropy_low:g} and under "
                f"{th.entropy_drop_warn_frac:g}x the initial {_fmt(base)} - watch for collapse")
    last = float(v[fin][-1])
    if last < th.entropy_low:
        return ("info", int(s.steps[fin][-1]), last, f"confident (< {th.entropy_low:g}) and stable relative to "
                f"the initial {_fmt(base)}; usual for an instruct model")
    return "ok", None, last, f"latest {_fmt(last)} (initial {_fmt(base)})"


def check_entropy_high(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_ENTROPY)
    v, fin = s.values, s.finite
    base = _baseline(s, th)
    if base is None:
        return "ok", None, None, "no finite entropy values"
    high = fin & (v >= th.entropy_high)
    rose = high & (v >= th.entropy_rise_warn_factor * base)
    if rose.any():
        step, val = _at(s, _first(rose))
        return ("warn", step, val, f"entropy rose to {_fmt(val)} (>= {th.entropy_high:g}, >= "
                f"{th.entropy_rise_warn_factor:g}x the initial {_fmt(base)}): exploring heavily or degenerating "
                "into random text - read some responses")
    if high.any():
        step, val = _at(s, _first(high))
        return "info", step, val, f"exploring (>= {th.entropy_high:g}) since the start"
    return "ok", None, float(v[fin][-1]) if fin.any() else None, f"below {th.entropy_high:g} throughout"


def _kl_penalty_note(ctx: Context, kl: Optional[float]) -> str:
    if ctx.kl_coef is None:
        return "kl_loss_coef unknown"
    pen = "" if kl is None or not math.isfinite(kl) else f", penalty coef*KL = {_fmt(ctx.kl_coef * kl)}"
    return f"kl_loss_coef {ctx.kl_coef:g} ({ctx.kl_coef_note}){pen}"


def check_kl_high(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_KL_LOSS)
    v = s.values * ctx.loss_scale
    fin = np.isfinite(v)
    for level, limit in (("alert", th.kl_loss_alert), ("warn", th.kl_loss_warn)):
        i = _first(fin & (v > limit))
        if i is not None:
            return (level, int(s.steps[i]), float(v[i]), f"KL to the reference {_fmt(v[i])} > {limit:g}: the "
                    f"policy is drifting from the reference model ({_kl_penalty_note(ctx, float(v[i]))}); "
                    "raise kl_loss_coef or lower the lr")
    last = float(v[fin][-1]) if fin.any() else None
    return "ok", None, last, f"max {_fmt(float(np.max(v[fin])) if fin.any() else None)} <= {th.kl_loss_warn:g} ({_kl_penalty_note(ctx, last)})"


def check_kl_low(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_KL_LOSS)
    v = s.values * ctx.loss_scale
    judged = np.isfinite(v) & (s.steps >= th.kl_low_min_steps)
    if not judged.any():
        return ("ok", None, _last_finite(s), f"fewer than {th.kl_low_min_steps} steps: too early to judge "
                "whether the policy moves off the reference")
    idx = np.flatnonzero(judged)
    if v[idx[-1]] > th.kl_loss_low:
        return "ok", None, float(v[idx[-1]]), f"latest {_fmt(float(v[idx[-1]]))} > {th.kl_loss_low:g}: the policy is moving"
    start = idx[-1]
    while start - 1 >= 0 and judged[start - 1] and v[start - 1] <= th.kl_loss_low:
        start -= 1
    return ("warn", int(s.steps[start]), float(v[idx[-1]]), f"KL still <= {th.kl_loss_low:g} after "
            f"{th.kl_low_min_steps}+ steps: the policy barely moves off the reference - not learning? "
            f"(check lr and rewards; {_kl_penalty_note(ctx, float(v[idx[-1]]))}; logged values are scaled "
            f"by --loss-scale {ctx.loss_scale:g})")


def check_pg_loss_nan(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_PG_LOSS)
    i = _first(~s.finite)
    if i is not None:
        step, val = _at(s, i)
        return "alert", step, val, "policy-gradient loss is not finite: numerical instability (check lr, bf16 overflow, reward NaNs)"
    return "ok", None, float(s.values[-1]), "finite at every step"


NONFINITE_TAGS = (TAG_ENTROPY, TAG_KL_LOSS, TAG_GRAD_NORM, TAG_CLIPFRAC, TAG_SCORE_MEAN, TAG_RESP_LEN)


def check_nonfinite(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    first = None
    for tag in NONFINITE_TAGS:
        s = run.get(tag)
        if s is None:
            continue
        i = _first(~s.finite)
        if i is not None and (first is None or s.steps[i] < first[1]):
            first = (tag, int(s.steps[i]), float(s.values[i]))
    if first is None:
        return "ok", None, None, "all finite"
    tag, step, val = first
    extra = (" (verl skips the optimizer step when the grad norm is not finite, dp_actor.py)"
             if tag == TAG_GRAD_NORM else "")
    return "alert", step, val, f"{tag} is not finite{extra}", tag


def check_clipfrac_high(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_CLIPFRAC)
    v, fin = s.values, s.finite
    i = _first(fin & (v > th.clipfrac_violent))
    if i is not None:
        return ("alert", int(s.steps[i]), float(v[i]), f"clip fraction {_fmt(v[i])} > {th.clipfrac_violent:g}: "
                "updates too violent - lower the lr or use more, smaller mini-batches")
    i = _first(fin & (v > th.clipfrac_healthy_high))
    if i is not None:
        return ("warn", int(s.steps[i]), float(v[i]), f"clip fraction {_fmt(v[i])} above the healthy "
                f"{th.clipfrac_healthy_low:g}-{th.clipfrac_healthy_high:g} band")
    mx = float(np.max(v[fin])) if fin.any() else None
    return "ok", None, mx, f"max {_fmt(mx)} <= {th.clipfrac_healthy_high:g}"


def check_clipfrac_low(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_CLIPFRAC)
    v, fin = s.values, s.finite
    i = _first_persistent(fin & (v < th.clipfrac_too_low), th.clipfrac_low_persist)
    med = float(np.median(v[fin])) if fin.any() else None
    if i is None:
        if fin.sum() < th.clipfrac_low_persist and fin.any() and np.all(v[fin] < th.clipfrac_too_low):
            return "ok", None, med, f"below {th.clipfrac_too_low:g} but fewer than {th.clipfrac_low_persist} steps to judge"
        return "ok", None, med, f"median {_fmt(med)}"
    step, val = _at(s, i)
    if not ctx.clipfrac_band_applies:
        return ("info", step, val, f"clip fraction {_fmt(val)} < {th.clipfrac_too_low:g} for "
                f"{th.clipfrac_low_persist}+ steps, expected here: {ctx.clipfrac_note}")
    return ("warn", step, val, f"clip fraction {_fmt(val)} < {th.clipfrac_too_low:g} for {th.clipfrac_low_persist}+ "
            "steps: the trust-region constraint is barely active - lr too low or clip_ratio too wide")


def check_grad_spike(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_GRAD_NORM)
    v = s.values
    med = _trailing_medians(v, th.grad_spike_window, th.grad_spike_min_history)
    with np.errstate(invalid="ignore"):
        spike = np.isfinite(v) & np.isfinite(med) & (med > 0) & (v > th.grad_spike_factor * med) & (
            v >= th.grad_spike_min_value)
    i = _first(spike)
    if i is not None:
        return ("warn", int(s.steps[i]), float(v[i]), f"grad-norm jump to {_fmt(v[i])} = "
                f"{v[i] / med[i]:.1f}x the trailing median {_fmt(med[i])}: warning sign of explosion")
    if not np.isfinite(med).any():
        return "ok", None, _last_finite(s), f"fewer than {th.grad_spike_min_history + 1} steps: no spike check yet"
    return "ok", None, _last_finite(s), f"no step above {th.grad_spike_factor:g}x its trailing median"


def check_grad_high(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_GRAD_NORM)
    v, fin = s.values, s.finite
    i = _first_persistent(fin & (v > th.grad_norm_band_high), th.grad_high_persist)
    med = float(np.median(v[fin])) if fin.any() else None
    if i is not None:
        step, val = _at(s, i)
        return ("warn", step, val, f"grad norm > {th.grad_norm_band_high:g} for {th.grad_high_persist}+ steps "
                "(verl clips at actor.grad_clip=1.0, so every update is being clipped)")
    if med is not None and med < th.grad_norm_band_low:
        below = f"median {_fmt(med)} below the guide's {th.grad_norm_band_low:g}-{th.grad_norm_band_high:g}"
        cause = _zero_advantage_cause(run, th, s)
        if cause:
            return "info", None, med, f"{below}: {cause}"
        if ctx.lr is not None and ctx.lr < th.clipfrac_band_min_lr:
            return ("info", None, med, f"{below} with non-zero advantages: small updates, usual at actor lr "
                    f"{ctx.lr:g} (public verl GRPO runs at lr 1e-6: 0.04-0.2)")
        return "info", None, med, f"{below} with non-zero advantages: small updates (check lr and rewards)"
    return "ok", None, med, f"median {_fmt(med)}"


def _zero_advantage_cause(run: Run, th: Thresholds, grad: Series) -> str:
    """Why the gradient is (near) 0 when the advantages say so, else "": GRPO advantages of 0
    (every group's responses scored the same) make the policy gradient exactly 0."""
    mx, mn = run.get(TAG_ADV_MAX), run.get(TAG_ADV_MIN)
    if mx is None or mn is None:
        return ""
    common, imx, imn = np.intersect1d(mx.steps, mn.steps, return_indices=True)
    zero = (np.abs(mx.values[imx]) <= th.zero_adv_eps) & (np.abs(mn.values[imn]) <= th.zero_adv_eps)
    if not zero.any():
        return ""
    steps = common[zero]
    gsteps = np.intersect1d(steps, grad.steps)
    where = f"{len(steps)} of {len(common)} steps"
    scores = [run.get(t) for t in (TAG_SCORE_MAX, TAG_SCORE_MIN)]
    same = ""
    if all(x is not None for x in scores):
        vals = set()
        for st in steps:
            pair = [x.values[x.steps == st] for x in scores]
            if all(p.size for p in pair) and pair[0][0] == pair[1][0]:
                vals.add(float(pair[0][0]))
            else:
                vals = None
                break
        if vals is not None and len(vals) == 1:
            same = f" (every response of the step scored {_fmt(vals.pop())})"
    grad_zero = gsteps.size and np.all(np.abs(grad.values[np.isin(grad.steps, gsteps)]) <= th.zero_adv_eps)
    return (f"at {where} every GRPO advantage was 0: all rewards in each prompt group were equal{same}, so "
            f"the policy gradient is {'exactly ' if grad_zero else ''}0 there - a missing reward signal, not a "
            "small learning rate")


def _resp_jump(run: Run, th: Thresholds, rise: bool) -> CheckResult:
    s = run.get(TAG_RESP_LEN)
    v = s.values
    med = _trailing_medians(v, th.resp_window, th.resp_min_history)
    with np.errstate(invalid="ignore"):
        if rise:
            hit = np.isfinite(v) & np.isfinite(med) & (med > 0) & (v > th.resp_rise_factor * med)
        else:
            hit = np.isfinite(v) & np.isfinite(med) & (med > 0) & (v < th.resp_fall_factor * med)
    i = _first(hit)
    if i is not None:
        what = ("sudden rise: rambling or repetition - read some responses" if rise else
                "sudden fall: lazy / truncated answers or a reward shortcut - read some responses")
        return ("warn", int(s.steps[i]), float(v[i]), f"mean response length {_fmt(v[i])} tokens = "
                f"{v[i] / med[i]:.2f}x the trailing median {_fmt(med[i])}: {what}")
    if not np.isfinite(med).any():
        return "ok", None, _last_finite(s), f"fewer than {th.resp_min_history + 1} steps: no jump check yet"
    return "ok", None, _last_finite(s), "no sudden change"


def check_resp_rise(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    return _resp_jump(run, th, rise=True)


def check_resp_fall(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    return _resp_jump(run, th, rise=False)


def check_resp_truncation(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_RESP_CLIP)
    v, fin = s.values, s.finite
    i = _first_persistent(fin & (v > th.resp_clip_ratio_warn), th.resp_clip_persist)
    if i is not None:
        step, val = _at(s, i)
        return ("warn", step, val, f"{_fmt(100 * val)} % of responses hit max_response_length for "
                f"{th.resp_clip_persist}+ steps: truncated answers score 0 (no boxed answer); raise "
                "data.max_response_length or check for repetition")
    over = fin & (v > th.resp_clip_ratio_warn)
    if not over.any():
        mx = float(np.max(v[fin])) if fin.any() else None
        return "ok", None, _last_finite(s), f"max {_fmt(mx)} <= {th.resp_clip_ratio_warn:g}"
    return "ok", None, _last_finite(s), (f"max {_fmt(float(np.max(v[over])))} > {th.resp_clip_ratio_warn:g} at "
                                         f"{int(over.sum())} step(s), fewer than {th.resp_clip_persist} in a row: "
                                         "not persistent")


def _train_level(score: Series, step: int, th: Thresholds) -> Optional[float]:
    fin = score.finite
    steps, vals = score.steps[fin], score.values[fin]
    sel = vals[(steps <= step) & (steps > step - th.train_window)]
    if sel.size == 0:  # e.g. validation before training (step 0): the first steps
        sel = vals[: th.train_window]
    return float(np.mean(sel)) if sel.size else None


def check_val_train_gap(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    val, score = run.get(ctx.val_reward_tag), run.get(TAG_SCORE_MEAN)
    fin = score.finite
    if not fin.any():
        return "ok", None, None, "no finite training score"
    ts, tv = score.steps[fin], score.values[fin]
    for step, v in zip(val.steps, val.values):
        if not math.isfinite(v):
            continue
        t = float(tv[int(np.argmin(np.abs(ts - step)))])
        a, b = abs(v), abs(t)
        if max(a, b) < th.val_train_min_abs:
            continue
        if v * t < 0 or min(a, b) == 0 or max(a, b) / min(a, b) > th.val_train_ratio_max:
            return ("warn", int(step), float(v), f"validation reward {_fmt(v)} vs training score {_fmt(t)} "
                    f"near step {int(step)}: not the same magnitude (ratio > {th.val_train_ratio_max:g}) - "
                    "check that validation uses the same reward function, prompt format and data")
    return "ok", None, _last_finite(val), f"same magnitude as {TAG_SCORE_MEAN} at every validation"


def _val_drops(run: Run, th: Thresholds, ctx: Context):
    val, score = run.get(ctx.val_reward_tag), run.get(TAG_SCORE_MEAN)
    fin = val.finite
    steps, vals = val.steps[fin], val.values[fin]
    for j in range(1, vals.size):
        b = int(np.argmax(vals[:j]))
        drop = float(vals[b] - vals[j])
        if drop >= th.val_drop:
            rise = None
            if score is not None:
                now, then = _train_level(score, int(steps[j]), th), _train_level(score, int(steps[b]), th)
                if now is not None and then is not None:
                    rise = now - then
            yield int(steps[j]), float(vals[j]), int(steps[b]), float(vals[b]), drop, rise


def check_reward_up_val_down(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    for step, v, bstep, bv, drop, rise in _val_drops(run, th, ctx):
        if rise is not None and rise >= th.train_rise:
            return ("warn", step, v, f"training score rose by {_fmt(rise)} while validation fell by {_fmt(drop)} "
                    f"(from {_fmt(bv)} at step {bstep}): the policy may be exploiting the reward (hacking) "
                    "or overfitting - read some high-reward responses")
    return "ok", None, _last_finite(run.get(ctx.val_reward_tag)), "no validation drop while training reward rose"


def check_val_regression(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    for step, v, bstep, bv, drop, rise in _val_drops(run, th, ctx):
        return ("warn", step, v, f"validation fell by {_fmt(drop)} from its best {_fmt(bv)} at step {bstep}",
                ctx.val_reward_tag)
    return "ok", None, _last_finite(run.get(ctx.val_reward_tag)), "no drop below the best validation value", ctx.val_reward_tag


def check_no_signal(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    mx, mn = run.get(TAG_ADV_MAX), run.get(TAG_ADV_MIN)
    common, imx, imn = np.intersect1d(mx.steps, mn.steps, return_indices=True)
    zero = (np.abs(mx.values[imx]) <= th.zero_adv_eps) & (np.abs(mn.values[imn]) <= th.zero_adv_eps)
    msg = ("all GRPO advantages are 0: every prompt group's responses scored the same, so the "
           "policy gradient is zero")
    i = _first_persistent(zero, th.no_signal_alert_steps)
    if i is not None:
        return "alert", int(common[i]), 0.0, f"{msg} for {th.no_signal_alert_steps}+ consecutive steps - no learning signal"
    i = _first(zero)
    if i is not None:
        return "warn", int(common[i]), 0.0, f"{msg} at {int(zero.sum())} step(s)"
    return "ok", None, None, "some groups have reward variance at every step"


def check_no_reward(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    mean, mx = run.get(TAG_SCORE_MEAN), run.get(TAG_SCORE_MAX)
    common, ime, imx = np.intersect1d(mean.steps, mx.steps, return_indices=True)
    none = (mx.values[imx] <= 0) & (mean.values[ime] <= 0)
    i = _first_persistent(none, th.no_signal_alert_steps)
    if i is not None:
        return ("alert", int(common[i]), float(mean.values[ime][i]), f"no response earned a positive score for "
                f"{th.no_signal_alert_steps}+ steps (critic/score/max <= 0): check the reward function and "
                "the answer format")
    i = _first(none)
    if i is not None:
        return ("warn", int(common[i]), float(mean.values[ime][i]), "no response earned a positive score at "
                f"{int(none.sum())} step(s) (critic/score/max <= 0)")
    return "ok", None, _last_finite(mean), "positive scores at every step"


def check_zero_var_groups(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    groups = {step: g[:2] for step, g in (ctx.rollout_groups or {}).items() if g[0]}
    worst = None
    for step in sorted(groups):
        n, z = groups[step]
        frac = z / n
        level = "alert" if z == n else ("warn" if frac >= th.zero_var_group_frac_warn else None)
        if level and (worst is None or SEVERITY[level] > SEVERITY[worst[0]]):
            worst = (level, step, frac, n, z)
    if worst:
        level, step, frac, n, z = worst
        return (level, step, frac, f"{z}/{n} prompt groups had zero reward variance (all responses scored "
                "the same): they give no GRPO gradient - harder/easier data or more samples per prompt")
    if not groups:
        return "ok", None, None, "no prompt group of 2+ responses in the rollout dumps"
    fr = [z / n for n, z in groups.values()]
    return "ok", None, float(np.mean(fr)), f"mean share of zero-variance groups {_fmt(float(np.mean(fr)))}"


def check_throughput(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_THROUGHPUT)
    v = s.values
    med = _trailing_medians(v, th.perf_window, th.perf_min_history)
    with np.errstate(invalid="ignore"):
        drop = np.isfinite(v) & np.isfinite(med) & (med > 0) & (v < th.perf_drop_factor * med)
    i = _first(drop)
    if i is not None:
        return ("warn", int(s.steps[i]), float(v[i]), f"throughput fell to {_fmt(v[i])} tokens/s/GPU, "
                f"{v[i] / med[i]:.2f}x the trailing median {_fmt(med[i])} (contention, swapping, longer responses?)")
    fin = s.finite
    m = float(np.median(v[fin])) if fin.any() else None
    return "ok", None, m, f"median {_fmt(m)} tokens/s/GPU (higher is better)"


def check_mfu(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_MFU)
    fin = s.finite
    m = float(np.median(s.values[fin])) if fin.any() else None
    if m is not None and m == 0:
        return ("info", None, 0.0, "MFU 0: verl's flops counter has no peak-FLOPS entry for this device "
                "(get_device_flops returns inf, e.g. CPU) - not measured")
    if m is not None and ctx.on_cpu:
        return ("info", None, m, f"median actor MFU {_fmt(100 * m)} % is not meaningful on CPU: {TAG_MAX_MEM} is 0 "
                "at every step (no accelerator memory used), and verl divides by an accelerator's peak FLOPS")
    return "ok", None, m, f"median actor MFU {_fmt(None if m is None else 100 * m)} % (higher is better)"


MISMATCH = "the rollout is not generating with the actor's weights"


def check_rollout_mismatch(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    """The first step where the rollout-vs-actor Pearson correlation is below its threshold or,
    in a run without the old-log-prob pass (no Pearson logged), where the update's actor/ppo_kl
    against the rollout's log-probs is above its threshold."""
    tests = [(TAG_ROLLOUT_PEARSON, lambda v: v < th.rollout_pearson_min, f"< {th.rollout_pearson_min:g}")]
    if run.get(TAG_ROLLOUT_PEARSON) is None:
        tests.append((TAG_PPO_KL, lambda v: v > th.rollout_ppo_kl_max, f"> {th.rollout_ppo_kl_max:g}"))
    first = None
    for tag, bad, limit in tests:
        s = run.get(tag)
        if s is None:
            continue
        with np.errstate(invalid="ignore"):
            i = _first(s.finite & bad(s.values))
        if i is not None and (first is None or s.steps[i] < first[1]):
            first = (tag, int(s.steps[i]), float(s.values[i]), limit)
    if first is not None:
        tag, step, val, limit = first
        others = "; ".join(f"{t} {_fmt(float(x.values[x.steps == step][0]))}" for t in ROLLOUT_TAGS
                           if t != tag and (x := run.get(t)) is not None and np.any(x.steps == step))
        return ("alert", step, val, f"{MISMATCH}: {tag} {_fmt(val)} {limit} at step {step}"
                f"{' (' + others + ')' if others else ''} - the weight sync from the actor to the rollout "
                "failed or skipped weights (e.g. a tied lm_head, vllm-ascend's NZ layout: VLLM_ASCEND_ENABLE_NZ=0)",
                tag)
    parts = []
    for tag in ROLLOUT_TAGS:
        s = run.get(tag)
        if s is not None and s.finite.any():
            v = s.values[s.finite]
            parts.append(f"{tag} {_fmt(float(v.min()))}..{_fmt(float(v.max()))}")
    if run.get(TAG_ROLLOUT_PEARSON) is None and (kl := run.get(TAG_PPO_KL)) is not None and kl.finite.any():
        v = kl.values[kl.finite]
        parts.append(f"{TAG_PPO_KL} {_fmt(float(v.min()))}..{_fmt(float(v.max()))}")
    return "ok", None, _last_finite(run.get(TAG_ROLLOUT_PEARSON)), "rollout and actor agree: " + "; ".join(parts)


def check_val_drop_first_update(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    val = run.get(ctx.val_tag)
    fin = val.finite
    steps, vals = val.steps[fin], val.values[fin]
    if not np.any(steps == 0):
        return "ok", None, None, "no validation at step 0 (trainer.val_before_train=False): nothing to compare", ctx.val_tag
    after = np.flatnonzero(steps > 0)
    if not after.size:
        return "ok", None, None, "no validation after step 0 yet", ctx.val_tag
    v0, j = float(vals[steps == 0][0]), int(after[0])
    v1, s1 = float(vals[j]), int(steps[j])
    if v1 < th.val_first_drop_frac * v0 and v0 - v1 >= th.val_first_drop_abs:
        return ("warn", s1, v1, f"validation fell from {_fmt(v0)} at step 0 to {_fmt(v1)} at step {s1}, the first "
                f"validation after an update (below {th.val_first_drop_frac:g}x and {_fmt(v0 - v1)} lower): the first "
                "updates cannot move the policy that far at the recipe's lr - check that the rollout generates with "
                "the actor's weights (rollout_actor_mismatch) and that the checkpoint and chat template are the "
                "model's", ctx.val_tag)
    return ("ok", None, v1, f"{_fmt(v0)} at step 0 -> {_fmt(v1)} at step {s1}, the first validation after an update",
            ctx.val_tag)


def check_zero_reward_from_start(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_SCORE_MEAN)
    n = max(1, th.zero_reward_steps)
    first = s.values[:n]
    reward = ctx.config.reward if ctx.config is not None else "the configured reward (no Hydra config found beside the log)"
    if len(s) < n:
        return "ok", None, _last_finite(s), f"fewer than {n} steps logged: not judged yet"
    if np.all(first == 0):
        return ("alert", int(s.steps[n - 1]), 0.0, f"{TAG_SCORE_MEAN} exactly 0 at each of the first {n} steps "
                f"({', '.join(str(int(x)) for x in s.steps[:n])}): no response was paid by {reward}. Either the "
                "reward is silently broken (a timeout raising off the main thread, a reward key this verl ignores, "
                "a wrong function name) or the model never answers correctly (as SmolLM2-135M on the cpu "
                "profile): score a known-correct response with that function")
    return ("ok", None, _last_finite(s), f"non-zero training reward within the first {n} steps "
            f"({reward if ctx.config is not None else 'reward function unknown'})")


def _kendall_tau(y: np.ndarray) -> float:
    """Kendall's tau-a of (position, y): +1 rising in every pair, -1 falling in every pair."""
    d = np.sign(y[None, :] - y[:, None])
    n = y.size
    return float(np.triu(d, 1).sum() / (n * (n - 1) / 2))


def _theil_sen(x: np.ndarray, y: np.ndarray) -> Tuple[float, float]:
    """(slope, intercept) of the Theil-Sen line: the median pairwise slope, robust to outliers."""
    i, j = np.triu_indices(x.size, 1)
    slope = float(np.median((y[j] - y[i]) / (x[j] - x[i])))
    return slope, float(np.median(y - slope * x))


def check_resp_decline(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_RESP_LEN)
    fin = s.finite
    x, y = s.steps[fin].astype(np.float64), s.values[fin]
    w = max(3, th.resp_decline_window)
    if y.size < w:
        return "ok", None, _last_finite(s), f"fewer than {w} steps: no trend check yet"
    for end in range(w, y.size + 1):
        size = w
        while size <= end:
            if (end - w) % (size // w):  # a window of k steps is tried every k/W steps: cost ~ steps^2 * W
                size *= 2
                continue
            xs, ys = x[end - size:end], y[end - size:end]
            tau = _kendall_tau(ys)
            if tau <= th.resp_decline_tau:
                slope, icpt = _theil_sen(xs, ys)
                start, stop = slope * xs[0] + icpt, slope * xs[-1] + icpt
                fall = start - stop
                biggest = float(np.max(-np.diff(ys), initial=0.0))
                if start > 0 and fall >= th.resp_decline_frac * start and biggest <= th.resp_decline_step_share * fall:
                    return ("warn", int(xs[-1]), float(ys[-1]), f"mean response length fell steadily over steps "
                            f"{int(xs[0])}-{int(xs[-1])}: {_fmt(start)} -> {_fmt(stop)} tokens on the Theil-Sen line "
                            f"(-{100 * fall / start:.0f} %), Kendall's tau {tau:.2f}. Known on Qwen2.5-1.5B with MATH: "
                            "read some responses - cut-off step-0 responses (missing stop tokens, "
                            "response_length/clip_ratio), a length bias of the loss aggregation, or a reward that "
                            "pays short answers")
            size *= 2
    return "ok", None, _last_finite(s), f"no steady fall over {w}+ steps"


def _logged(run: Run, tag: str) -> str:
    """The name ``tag``'s data is logged under in this run (itself or its SAME_QUANTITY stand-in)."""
    return tag if run.scalars.get(tag) is not None and len(run.scalars[tag]) else SAME_QUANTITY.get(tag, tag)


def check_memory_growth(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    """The memory tag whose Theil-Sen line, after the warm-up steps, rises most (relative to its
    start) among those that rise steadily (Kendall's tau) by enough GB and enough of their start."""
    fits = {}
    for tag in MEMORY_TAGS:
        s = run.get(tag)
        if s is None:
            continue
        x, y = s.steps[s.finite][th.mem_warmup_steps:].astype(np.float64), s.values[s.finite][th.mem_warmup_steps:]
        if y.size >= max(3, th.mem_min_steps):
            slope, icpt = _theil_sen(x, y)
            start = slope * x[0] + icpt
            fits[tag] = (_kendall_tau(y), start, slope * (x[-1] - x[0]), int(x[0]), int(x[-1]))
    if not fits:
        return ("ok", None, None, f"fewer than {th.mem_min_steps} steps after the first {th.mem_warmup_steps}: "
                "no trend check yet")
    grown = {t: f for t, f in fits.items() if f[0] >= th.mem_growth_tau and f[2] >= th.mem_growth_gb
             and f[2] >= th.mem_growth_frac * f[1]}
    if not grown:
        return "ok", None, None, "no steady growth: " + "; ".join(
            f"{_logged(run, t)} {f[2]:+.2f} GB over steps {f[3]}-{f[4]} (tau {f[0]:.2f})" for t, f in fits.items())
    tag, (tau, start, growth, first, last) = max(grown.items(), key=lambda tf: tf[1][2] / max(tf[1][1], 1e-9))
    where = "host" if tag == TAG_CPU_MEM else "device"
    return ("warn", last, _last_finite(run.get(tag)), f"{where} memory grew steadily over steps {first}-{last}: "
            f"{_fmt(start)} -> {_fmt(start + growth)} GB on the Theil-Sen line ({growth / (last - first):+.2f} GB "
            f"per step), Kendall's tau {tau:.2f}. Likely memory not fully freed between steps, e.g. by the rollout's "
            "sleep/wake-up (vllm-ascend#9563 on NPU); it ends in out-of-memory hours in: save checkpoints often "
            "(trainer.save_freq) and relaunch, which resumes with fresh processes; try a newer vllm-ascend / vLLM, "
            "or a lower rollout gpu_memory_utilization to last longer", _logged(run, tag))


def check_empty_responses(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_RESP_MIN)
    steps = s.steps[s.values == 0]
    if not steps.size:
        return "ok", None, _last_finite(s), "no empty response: every step's shortest has a token or more"
    share = run.get(TAG_ABORTED)
    share = share.values[share.steps == steps[0]] if share is not None else np.array([])
    dumped = sum(g[2] for step, g in (ctx.rollout_groups or {}).items() if step in steps)
    return ("warn", int(steps[0]), 0.0, f"{len(steps)} step(s) had an empty response ({TAG_RESP_MIN} 0"
            f"{f'; {_fmt(100 * float(share[0]))} % of step {steps[0]} ({TAG_ABORTED})' if share.size else ''}"
            f"{f'; {dumped} empty outputs in the rollout dumps' if dumped else ''}): verl places a response's "
            "reward at its last token, index -1 for an empty one, i.e. the last padding token, and GRPO sums "
            "token rewards without the response mask, so it leaks into its group's advantages (verl#6310; "
            "reward_manager/naive.py and core_algos.py of 0.6.0 and 0.9.1). Read those responses "
            "(trainer.rollout_data_dir) and make sure none comes back without a token: an aborted or failed "
            "generation")


_T = DEFAULT_THRESHOLDS  # the rule descriptions quote the defaults (override: --set)

RULES: Tuple[Rule, ...] = (
    Rule("entropy_collapse", TAG_ENTROPY, (TAG_ENTROPY,),
         f"alert < {_T.entropy_collapse_abs:g} or (< {_T.entropy_low:g} and < {_T.entropy_collapse_frac:g}x "
         f"initial); warn < {_T.entropy_low:g} and < {_T.entropy_drop_warn_frac:g}x initial; info < "
         f"{_T.entropy_low:g} (confident); initial = median of the first {_T.baseline_steps} steps",
         f"{SRC_GUIDE}; {SRC_TRAINER}", check_entropy_collapse),
    Rule("entropy_high", TAG_ENTROPY, (TAG_ENTROPY,),
         f"info >= {_T.entropy_high:g} (exploring); warn >= {_T.entropy_high:g} and >= "
         f"{_T.entropy_rise_warn_factor:g}x initial", SRC_GUIDE, check_entropy_high),
    Rule("kl_high", TAG_KL_LOSS, (TAG_KL_LOSS,),
         f"warn > {_T.kl_loss_warn:g}, alert > {_T.kl_loss_alert:g} nats/token (logged value x --loss-scale); "
         "reported with kl_loss_coef", f"{SRC_GUIDE}; {SRC_DP_ACTOR}; {SRC_GRPO}; thresholds heuristic",
         check_kl_high),
    Rule("kl_low", TAG_KL_LOSS, (TAG_KL_LOSS,),
         f"warn if still <= {_T.kl_loss_low:g} at the latest step >= {_T.kl_low_min_steps}",
         f"{SRC_GUIDE}; thresholds heuristic", check_kl_low),
    Rule("pg_loss_nan", TAG_PG_LOSS, (TAG_PG_LOSS,), "alert at the first non-finite value",
         f"{SRC_GUIDE}; {SRC_DP_ACTOR}", check_pg_loss_nan),
    Rule("nonfinite_metrics", "actor/*, critic/score/mean, response_length/mean", (),
         "alert at the first non-finite entropy, kl_loss, grad_norm, pg_clipfrac, score or length",
         f"{SRC_DP_ACTOR} (_optimizer_step skips non-finite grad norms)", check_nonfinite),
    Rule("clipfrac_high", TAG_CLIPFRAC, (TAG_CLIPFRAC,),
         f"warn > {_T.clipfrac_healthy_high:g}, alert > {_T.clipfrac_violent:g}",
         f"{SRC_GUIDE}; {SRC_DP_ACTOR}", check_clipfrac_high),
    Rule("clipfrac_low", TAG_CLIPFRAC, (TAG_CLIPFRAC,),
         f"< {_T.clipfrac_too_low:g} for {_T.clipfrac_low_persist}+ steps: warn, or info when on-policy "
         f"(1 update/step) or actor lr < {_T.clipfrac_band_min_lr:g}",
         f"{SRC_GUIDE}; {SRC_DP_ACTOR} (on_policy); {SRC_REAL_CLIPFRAC}", check_clipfrac_low),
    Rule("grad_norm_spike", TAG_GRAD_NORM, (TAG_GRAD_NORM,),
         f"warn > {_T.grad_spike_factor:g}x trailing median ({_T.grad_spike_window} steps, >= "
         f"{_T.grad_spike_min_history} history) and >= {_T.grad_spike_min_value:g}", SRC_GUIDE, check_grad_spike),
    Rule("grad_norm_high", TAG_GRAD_NORM, (TAG_GRAD_NORM,),
         f"warn > {_T.grad_norm_band_high:g} for {_T.grad_high_persist}+ steps; info if median < "
         f"{_T.grad_norm_band_low:g}", f"{SRC_GUIDE}; verl actor grad_clip 1.0 (dp_actor.yaml)", check_grad_high),
    Rule("response_length_rise", TAG_RESP_LEN, (TAG_RESP_LEN,),
         f"warn > {_T.resp_rise_factor:g}x trailing median ({_T.resp_window} steps, >= {_T.resp_min_history} "
         "history)", f"{SRC_GUIDE}; {SRC_METRIC_UTILS}", check_resp_rise),
    Rule("response_length_fall", TAG_RESP_LEN, (TAG_RESP_LEN,),
         f"warn < {_T.resp_fall_factor:g}x trailing median ({_T.resp_window} steps, >= {_T.resp_min_history} "
         "history)", f"{SRC_GUIDE}; {SRC_METRIC_UTILS}", check_resp_fall),
    Rule("response_truncation", TAG_RESP_CLIP, (TAG_RESP_CLIP,),
         f"warn > {_T.resp_clip_ratio_warn:g} for {_T.resp_clip_persist}+ steps",
         f"{SRC_METRIC_UTILS}; {SRC_DAPO} (overlong responses); threshold heuristic", check_resp_truncation),
    Rule("val_train_gap", "<val reward tag>", (TAG_SCORE_MEAN,),
         f"warn if the larger of abs(val), abs(train) is > {_T.val_train_ratio_max:g}x the smaller or the "
         f"signs differ (both < {_T.val_train_min_abs:g}: not judged); train = nearest step",
         f"{SRC_GUIDE}; {SRC_TRAINER} (_validate tag names)", check_val_train_gap, needs_val=True),
    Rule("reward_up_val_down", "<val reward tag>", (TAG_SCORE_MEAN,),
         f"warn if val falls >= {_T.val_drop:g} below its best while the mean train score "
         f"({_T.train_window} steps) rose >= {_T.train_rise:g}",
         "reward-hacking sign; thresholds heuristic (MATH test, 5000 problems: val noise ~0.007)",
         check_reward_up_val_down, needs_val=True),
    Rule("val_regression", "<val reward tag>", (),
         f"warn if val falls >= {_T.val_drop:g} below its best", "thresholds heuristic", check_val_regression,
         needs_val=True),
    Rule("no_learning_signal", TAG_ADV_MAX, (TAG_ADV_MAX, TAG_ADV_MIN),
         f"advantages max = min = 0: warn at a step, alert for {_T.no_signal_alert_steps}+ consecutive steps",
         f"{SRC_GRPO} (group-normalised advantage); {SRC_METRIC_UTILS}", check_no_signal),
    Rule("no_positive_reward", TAG_SCORE_MAX, (TAG_SCORE_MEAN, TAG_SCORE_MAX),
         f"score max <= 0 and mean <= 0: warn at a step, alert for {_T.no_signal_alert_steps}+ consecutive steps",
         f"{SRC_METRIC_UTILS}; {SRC_GRPO}", check_no_reward),
    Rule("zero_variance_groups", "rollout dumps (--rollout-dir)", (),
         f"share of groups with zero score variance: warn >= {_T.zero_var_group_frac_warn:g}, alert = 1",
         f"{SRC_GRPO}; {SRC_DAPO} (dynamic sampling); {SRC_TRAINER} (_dump_generations)",
         check_zero_var_groups, needs_rollouts=True),
    Rule("throughput_drop", TAG_THROUGHPUT, (TAG_THROUGHPUT,),
         f"warn < {_T.perf_drop_factor:g}x trailing median ({_T.perf_window} steps, >= {_T.perf_min_history} "
         "history); else report the median (higher is better)", f"{SRC_GUIDE}; {SRC_METRIC_UTILS}",
         check_throughput),
    Rule("mfu", TAG_MFU, (TAG_MFU,), "informational: median (higher is better); info when 0 (not measured) or when "
         f"{TAG_MAX_MEM} is 0 at every step (a CPU run: not meaningful)",
         f"{SRC_GUIDE}; {SRC_FSDP_WORKERS}", check_mfu),
    Rule("rollout_actor_mismatch", TAG_ROLLOUT_PEARSON, (),
         f"alert \"{MISMATCH}\" at the first step with {TAG_ROLLOUT_PEARSON} < {_T.rollout_pearson_min:g}, or, "
         f"in a run without the old-log-prob pass, {TAG_PPO_KL} > {_T.rollout_ppo_kl_max:g}; "
         f"{TAG_ROLLOUT_PROBS_DIFF} is quoted (logged with rollout.calculate_log_probs=True)",
         f"{SRC_DEBUG_METRICS}; {SRC_RECORDED}", check_rollout_mismatch, needs_any=(TAG_ROLLOUT_PEARSON, TAG_PPO_KL),
         why=("the rollout and the actor compute the same model, so on the rollout's tokens they agree up to "
             "rounding: on the recorded healthy CPU runs (bf16) Pearson 0.9992-0.9996 (the learning run of "
             "benchmarks/results/cpu_learn_current.md: 0.9986-0.9996); in public reports a fully asynchronous "
             "vLLM rollout starts near 0.95 (verl-project/verl #6780) and a vLLM decode against a Hugging Face "
             "prefill of the same tokens gives 0.977 (verl-project/verl-omni #254). Rollouts that do not come from the "
             "actor's weights do not correlate: a CPU weight sync that skipped the tied lm_head gave Pearson "
             "-0.03 (entropy 7.4), rollout inputs misaligned with the actor's 0.13 (verl-omni #254). 0.8 lies "
             "far from both groups. training/rollout_probs_diff_mean is only quoted: its healthy value "
             "(0.006-0.008) is small, and a garbage rollout's would be too, as at entropy 7.4 both sides "
             "give its tokens probabilities below 1e-3. Without the old-log-prob pass (verl's rollout-correction "
             "bypass mode, the CPU profiles) no Pearson is logged, and the update's actor/ppo_kl, the mean "
             "(rollout - actor) log-prob over the rollout's tokens, stands in: on healthy CPU runs (bf16) "
             "|ppo_kl| <= 0.004; the stale-lm_head sync of tests/vllm_sync_probe.py gives 2.3 (fp32, healthy "
             "1e-5); 0.05 lies far from both")),
    Rule("val_drop_after_first_update", "<val tag>", (),
         f"warn if the first validation after step 0 is below {_T.val_first_drop_frac:g}x the step-0 validation "
         f"and at least {_T.val_first_drop_abs:g} lower", "thresholds heuristic, see below",
         check_val_drop_first_update, needs_val=True, why=("far = below half the step-0 value and at least 0.05 lower. Step 0 is validated with the "
             "rollout's initial weights, the next validation (after trainer.test_freq updates, 5 in the "
             "recipe) with the weights synced from the actor: at lr 1e-6 with 10 warm-up steps the policy "
             "has moved by a KL of about 1e-3 nats/token there, which cannot halve the accuracy, so a halving "
             "points at the weight sync or the checkpoint, not at learning. 0.05 is 7 standard errors of an "
             "accuracy near 45 % on MATH's 5,000 test problems (0.007). On the CPU profiles' 8 validation "
             "problems one problem is 0.125, so there a fall from 2 right to 0 can fire by chance")),
    Rule("zero_reward_from_start", TAG_SCORE_MEAN, (TAG_SCORE_MEAN,),
         f"alert if exactly 0 at each of the first {_T.zero_reward_steps} steps; names the reward file and "
         f"function from the run's Hydra config ({HYDRA_CONFIG} beside the log folder, or --config)",
         f"{SRC_METRIC_UTILS}; verl 0.6.0 / 0.9.1 reward loading (custom_reward_function, "
         "reward.custom_reward_function)", check_zero_reward_from_start, why=("3 steps, as no_positive_reward. With a working correctness reward a step's mean is exactly 0 "
             "only when none of its responses is right: at the recipe's 256 x 8 responses and "
             "Qwen2.5-1.5B-Instruct's 43 % on MATH that has a chance near 0.57^2048 = 1e-500 per step; 3 steps "
             "also cover a CPU batch of 16 responses from a model right 10 % of the time (0.9^48 = 0.6 %). A "
             "model that is never right (SmolLM2-135M on the cpu profile) fires it too, and the message says "
             "so; the quick start's 2 steps are too few to judge")),
    Rule("response_length_decline", TAG_RESP_LEN, (TAG_RESP_LEN,),
         f"warn when, over the last {_T.resp_decline_window}, {2 * _T.resp_decline_window}, "
         f"{4 * _T.resp_decline_window} ... logged steps (a window of k steps tried every "
         f"k/{_T.resp_decline_window} steps), Kendall's tau <= {_T.resp_decline_tau:g}, the Theil-Sen "
         f"line falls >= {_T.resp_decline_frac:g} of its start and no single step's fall exceeds "
         f"{_T.resp_decline_step_share:g} of that", f"{SRC_SIMPLERL}; {SRC_METRIC_UTILS}", check_resp_decline,
         why=("steadily = Kendall's tau <= -0.6 (over 10 points, a chance of 0.8 % without a trend, exact "
             "permutation distribution), a fall of the robust Theil-Sen line of at least 15 % of its start, "
             "and no single step carrying more than half of that fall (a one-step fall is "
             "response_length_fall's case). The recipe's response_length/mean averages 2,048 responses, "
             "whose noise is about 1 % of the mean, so 15 % is not noise. Windows double (10, 20, 40 ... "
             "steps) so that a slow decline over a long run is caught as well as a fast one. simpleRL-reason "
             "#65: the mean response length of Qwen2.5-1.5B fell over training on MATH (12k problems, 15 "
             "epochs); #90: it fell on Qwen2.5-7B, and the maintainers pointed at over-long, cut-off step-0 "
             "responses (missing stop tokens)")),
    Rule("memory_growth", TAG_MAX_MEM_RESERVED, (), f"warn when, after the first {_T.mem_warmup_steps} logged steps, "
         f"{_T.mem_min_steps}+ steps of {', '.join(MEMORY_TAGS)} (verl 0.9.1: actor/perf/*) rise with Kendall's tau "
         f">= {_T.mem_growth_tau:g} and their Theil-Sen line grows >= {_T.mem_growth_gb:g} GB and >= "
         f"{_T.mem_growth_frac:g} of its start", f"{SRC_FSDP_WORKERS}; verl 0.9.1 verl/workers/engine_workers.py; "
         "vllm-project/vllm-ascend#9563", check_memory_growth, needs_any=MEMORY_TAGS,
         why=("verl resets the device's peak counters only in its memory profiler, so perf/max_memory_*_gb is "
              "a running peak: flat "
              "once the first steps have set up the optimizer states, the KV cache and the allocator's pools "
              "(hence 2 warm-up steps), rising on after that only when memory is not given back. Host memory "
              "(psutil's system-wide used memory) is noisy: on the recorded healthy CPU learning run it rose "
              "0.9 GB (11 %) over steps 3-12 with tau 0.42, a spike of 3.6 GB included. tau >= 0.6 asks for "
              "a steady rise (without a trend a chance of 1.6 % over 8 steps, 0.8 % over 10; exact "
              "permutation distribution), 1 GB is four cycles of the 240 MB that vllm-ascend#9563 reports "
              "left behind at each sleep/wake-up of the rollout, and 10 % keeps a large device's small drift "
              "quiet. The fit spans the whole run after the warm-up, so a leak of that size is seen 10 steps "
              "in, long before it runs out of memory")),
    Rule("empty_responses", TAG_RESP_MIN, (TAG_RESP_MIN,), f"warn when {TAG_RESP_MIN} is 0 at any step; quotes "
         f"{TAG_ABORTED} (verl 0.9.1) and the rollout dumps' empty outputs (--rollout-dir)",
         f"{SRC_METRIC_UTILS}; verl-project/verl#6310", check_empty_responses),
)


def evaluate(run: Run, th: Thresholds, ctx: Context, rules: Sequence[Rule] = RULES) -> List[Finding]:
    """Run every rule on ``run``; a rule whose metrics are absent is ``skipped``."""
    out = []
    for rule in rules:
        tag = rule.tag
        if rule.needs_val:
            tag = ctx.val_reward_tag or (ctx.val_tag or "val-core/<data_source>/reward/mean@1")
        missing = [t for t in rule.needs if run.get(t) is None]
        if rule.needs_val and (ctx.val_reward_tag is None or run.get(ctx.val_reward_tag) is None):
            missing.append("val-core/*/mean@*")
        if rule.needs_rollouts and not ctx.rollout_groups:
            missing.append("--rollout-dir dumps")
        if rule.id == "nonfinite_metrics" and not any(run.get(t) is not None for t in NONFINITE_TAGS):
            missing.append("actor/* metrics")
        if rule.needs_any and not any(run.get(t) is not None for t in rule.needs_any):
            missing.append(" or ".join(rule.needs_any))
        if missing:
            out.append(Finding(rule.id, tag, "skipped", None, None, f"skipped (no data: {', '.join(missing)})",
                               rule.source))
            continue
        res = rule.check(run, th, ctx)
        level, step, value, message = res[:4]
        if len(res) > 4 and res[4]:
            tag = res[4]
        out.append(Finding(rule.id, tag, level, step, value, message, rule.source))
    return out


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------
def _step_range(run: Run) -> str:
    steps = run.train_steps
    return f"{steps[0]}-{steps[-1]} ({len(steps)} logged)" if steps else "none"


def render_markdown(run: Run, findings: Sequence[Finding], ctx: Context, logdir: Path) -> str:
    """The report for one run as markdown: header, one line per rule, notes."""
    counts = {lvl: sum(f.level == lvl for f in findings) for lvl in LEVELS}
    lines = [
        f"# GRPO health report: {run.name if run.name != '.' else ctx.experiment}",
        "",
        f"- log: `{run.path}`{'; ' + run.about if run.about else ''}; training steps {_step_range(run)}; "
        f"{len(run.scalars)} scalar tags",
        f"- experiment: `{ctx.experiment}` ({ctx.experiment_note}); reward: "
        f"{ctx.config.reward if ctx.config is not None else 'unknown (no Hydra config beside the log; --config)'}",
        f"- validation tag: `{ctx.val_tag or 'none'}`" + (
            f" (compared with training via `{ctx.val_reward_tag}`)" if ctx.val_reward_tag and ctx.val_reward_tag != ctx.val_tag else ""),
        f"- policy updates per step: {ctx.updates_per_step if ctx.updates_per_step is not None else '?'} "
        f"({ctx.updates_note}); actor lr: {_fmt(ctx.lr)} ({ctx.lr_note}); kl_loss_coef: {_fmt(ctx.kl_coef)} "
        f"({ctx.kl_coef_note}); loss scale: {ctx.loss_scale:g}",
        f"- summary: {counts['alert']} alert, {counts['warn']} warn, {counts['info']} info, "
        f"{counts['ok']} ok, {counts['skipped']} skipped",
        "",
        "## Rules",
        "",
    ]
    for f in findings:
        where = f"step {f.step}" if f.step is not None else "-"
        lines.append(f"- **{f.level.upper()}** `{f.rule}` (`{f.tag}`) {where}, value {_fmt(f.value)}: {f.message}")
    lines += [
        "",
        "## Notes",
        "",
        f"- Clip fraction: {ctx.clipfrac_note}.",
        "- verl 0.6.0 logs `actor/pg_loss` and `actor/kl_loss` divided by the number of micro-batches per "
        "mini-batch (dp_actor.py `update_policy`, `loss_scale_factor`); pass `--loss-scale <micro-batches>` "
        "to read the KL rules on the true per-token scale.",
        "- `critic/advantages/max` = `min` = 0 only shows the case where *every* group had zero reward variance; "
        "verl 0.6.0 logs no per-group share. Pass `--rollout-dir` (trainer.rollout_data_dir) to count them.",
        "",
    ]
    return "\n".join(lines)


def finding_json(run: Run, f: Finding) -> dict:
    """One JSON entry (value is null when not finite; value_text keeps it)."""
    finite = f.value is not None and math.isfinite(f.value)
    return {"run": run.name, "id": f.rule, "tag": f.tag, "level": f.level, "step": f.step,
            "value": f.value if finite else None, "value_text": _fmt(f.value) if f.value is not None else None,
            "message": f.message, "source": f.source}


# --------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Band:
    lo: float
    hi: float
    color: str
    label: str
    #: widen the y-axis to show the whole band (so a curve far from it is seen as such).
    include: bool = False


def plot_specs(run: Run, th: Thresholds, ctx: Context) -> List[Tuple[str, List[str], List[Band], str]]:
    """(title, tags, bands, ylabel) of the key curves this run has data for. No MFU panel on a
    CPU run (``ctx.on_cpu``: verl divides by an accelerator's peak FLOPS there)."""
    faint = "" if ctx.clipfrac_band_applies else " (guide; not applied here)"
    specs = [
        ("actor/entropy", [TAG_ENTROPY], [Band(th.entropy_low, th.entropy_high, "tab:green", "guide 0.5-2.0", True),
                                          Band(0, th.entropy_collapse_abs, "tab:red", "collapse")], "nats/token"),
        ("actor/kl_loss", [TAG_KL_LOSS], [Band(0, th.kl_loss_warn, "tab:green", f"<= {th.kl_loss_warn:g}"),
                                          Band(th.kl_loss_warn, th.kl_loss_alert, "tab:orange", "warn"),
                                          Band(th.kl_loss_alert, 1e9, "tab:red", "alert")], "nats/token (logged)"),
        ("actor/pg_loss", [TAG_PG_LOSS], [], "loss"),
        ("actor/pg_clipfrac", [TAG_CLIPFRAC], [
            Band(th.clipfrac_healthy_low, th.clipfrac_healthy_high, "tab:green", "healthy 10-25 %" + faint, True),
            Band(th.clipfrac_violent, 1.0, "tab:red", "> 30 % violent")], "fraction"),
        ("actor/grad_norm", [TAG_GRAD_NORM], [Band(th.grad_norm_band_low, th.grad_norm_band_high, "tab:green",
                                                   "guide 0.1-1.0", True)], "L2 norm"),
        ("response_length/mean", [TAG_RESP_LEN], [], "tokens"),
        ("response_length/clip_ratio", [TAG_RESP_CLIP], [Band(0, th.resp_clip_ratio_warn, "tab:green",
                                                              f"<= {th.resp_clip_ratio_warn:g}", True)], "fraction"),
        ("reward: train vs validation", [TAG_SCORE_MEAN] + [t for t in dict.fromkeys([ctx.val_reward_tag, ctx.val_tag]) if t],
         [], "score"),
        ("rollout vs actor: Pearson of token probabilities", [TAG_ROLLOUT_PEARSON],
         [Band(th.rollout_pearson_min, 1.0, "tab:green", f">= {th.rollout_pearson_min:g}", True)], "correlation"),
        ("perf/throughput", [TAG_THROUGHPUT], [], "tokens/s/GPU"),
    ]
    if not ctx.on_cpu:
        specs.append(("perf/mfu/actor", [TAG_MFU], [], "fraction of peak"))
    return [(t, [g for g in tags if run.get(g) is not None], b, y) for t, tags, b, y in specs
            if any(run.get(g) is not None for g in tags)]


#: Where a verdict on a tag that has no curve of its own is marked: the first of these plotted.
MARK_ON = {
    TAG_ADV_MAX: (TAG_SCORE_MEAN,), TAG_ADV_MIN: (TAG_SCORE_MEAN,), TAG_SCORE_MAX: (TAG_SCORE_MEAN,),
    "rollout dumps (--rollout-dir)": (TAG_SCORE_MEAN,), TAG_RESP_MIN: (TAG_RESP_LEN,),
}

#: (marker, line style, marker size, hollow) per series of a panel: series drawn on top of each
#: other stay visible (each later one a larger hollow marker around the earlier).
SERIES_STYLES = (("o", "-", 3.5, False), ("s", "--", 6.5, True), ("^", ":", 9.0, True), ("D", "-.", 11.0, True))


def _legend_name(tag: str) -> str:
    m = VAL_MEAN_RE.match(tag)
    return f"val-{m['sec']} {m['var']}/mean@{m['n']}" if m else tag


def verdict_marks(findings: Sequence[Finding], specs) -> List[Tuple[Finding, str]]:
    """(finding, plotted tag to mark it on) for each warn/alert verdict with a step."""
    plotted = {t for spec in specs for t in spec[1]}
    out = []
    for f in findings:
        if f.level not in ("warn", "alert") or f.step is None:
            continue
        target = next((t for t in (f.tag, *MARK_ON.get(f.tag, ())) if t in plotted), None)
        if target is not None:
            out.append((f, target))
    return out


def _draw(ax, run: Run, title: str, tags: List[str], bands: List[Band], ylabel: str,
          marks: Sequence[Tuple[Finding, str]]) -> None:
    from matplotlib.ticker import MaxNLocator
    from matplotlib.transforms import blended_transform_factory

    drawn: List[Series] = []
    for k, tag in enumerate(tags):
        s = run.get(tag)
        marker, style, size, hollow = SERIES_STYLES[k % len(SERIES_STYLES)]
        label = _legend_name(tag)
        same = next((tags[j] for j, d in enumerate(drawn) if np.array_equal(d.steps, s.steps)
                     and np.array_equal(d.values, s.values, equal_nan=True)), None)
        if same is not None:
            label += f" (identical to {_legend_name(same)})"
        elif len(s) > 1 and s.finite.all() and np.all(s.values == s.values[0]):
            label += f" ({_fmt(float(s.values[0]))} at every step)"
        line, = ax.plot(s.steps, s.values, linestyle=style, linewidth=1.3, label=label if len(tags) > 1 else None,
                        marker=marker if len(s) <= 40 or k else None, markersize=size)
        if hollow:
            line.set_markerfacecolor("none")
            line.set_markeredgewidth(1.2)
        drawn.append(s)
    ax.relim()
    ax.autoscale_view()
    ylo, yhi = ax.get_ylim()
    for b in bands:
        if b.include:
            pad = 0.05 * (max(yhi, b.hi) - min(ylo, b.lo))
            ylo, yhi = min(ylo, b.lo - pad), max(yhi, b.hi + pad)
    if ylo == yhi:
        ylo, yhi = ylo - 1, yhi + 1
    for b in bands:
        if b.hi > ylo and b.lo < yhi:
            ax.axhspan(max(b.lo, ylo), min(b.hi, yhi), color=b.color, alpha=0.12, label=b.label)
    for tag in tags:
        s = run.get(tag)
        bad = ~s.finite
        if bad.any():
            ax.plot(s.steps[bad], np.full(int(bad.sum()), ylo), "x", color="red", markersize=8, label="non-finite")
    ax.set_ylim(ylo, yhi)
    xlo, xhi = ax.get_xlim()
    text_at = blended_transform_factory(ax.transData, ax.transAxes)
    for k, (f, target) in enumerate(m for m in marks if m[1] in tags):
        color = "red" if f.level == "alert" else "darkorange"
        s = run.get(target)
        at = s.values[s.steps == f.step]
        y = float(at[0]) if at.size and math.isfinite(at[0]) else ylo
        ax.axvline(f.step, color=color, linestyle="--", linewidth=1, alpha=0.7)
        ax.plot([f.step], [y], marker="o", markersize=13, markerfacecolor="none", markeredgecolor=color,
                markeredgewidth=2, linestyle="none")
        right = f.step > (xlo + xhi) / 2
        ax.text(f.step, 0.95 - 0.11 * k, f" {f.level.upper()} {f.rule} ", transform=text_at, fontsize=6.5,
                color=color, fontweight="bold", ha="right" if right else "left", va="top",
                bbox={"facecolor": "white", "edgecolor": color, "alpha": 0.85, "pad": 1.5})
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step", fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, loc="best")


def health_grid(run: Run, findings: Sequence[Finding], th: Thresholds, ctx: Context):
    """The grid of key curves as a matplotlib Figure (None when no curve has data): titled with
    the experiment's name; each warn/alert verdict circled on the curve it concerns at the step
    it fired, with its level and rule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    specs = plot_specs(run, th, ctx)
    if not specs:
        return None
    marks = verdict_marks(findings, specs)
    ncols = 3
    nrows = (len(specs) + ncols - 1) // ncols
    height = 3.2 * nrows + 0.3  # fixed margins in inches (tight_layout costs a second draw)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5 * ncols, height), squeeze=False)
    for ax, spec in zip(axes.flat, specs):
        _draw(ax, run, *spec, marks)
    for ax in list(axes.flat)[len(specs):]:
        ax.set_visible(False)
    counts = {lvl: sum(f.level == lvl for f in findings) for lvl in ("alert", "warn")}
    fig.suptitle(f"GRPO health: {ctx.experiment}", fontsize=12, fontweight="bold")
    shown = os.path.relpath(run.path) if Path(os.path.abspath(run.path)).is_relative_to(Path.cwd()) else run.path
    fig.text(0.5, 1 - 0.52 / height, f"log {shown}; training steps {_step_range(run)}; {counts['alert']} alert, "
             f"{counts['warn']} warn, each circled on its curve at the step it fired (health_report.md explains)",
             ha="center", fontsize=8, color="dimgray")
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.5 / height, top=1 - 1.0 / height, wspace=0.25,
                        hspace=0.5)
    return fig


def render_figures(run: Run, findings: Sequence[Finding], th: Thresholds, ctx: Context) -> Dict[str, bytes]:
    """PNG bytes: ``health_grid.png`` (:func:`health_grid`) and one ``<tag>.png`` per key curve
    with data, marked the same way."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def png(fig) -> bytes:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        return buf.getvalue()

    fig = health_grid(run, findings, th, ctx)
    if fig is None:
        return {}
    out = {"health_grid.png": png(fig)}
    specs = plot_specs(run, th, ctx)
    marks = verdict_marks(findings, specs)
    for spec in specs:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        fig.subplots_adjust(left=0.14, right=0.97, bottom=0.14, top=0.91)
        _draw(ax, run, *spec, marks)
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", spec[0]).strip("_") + ".png"
        out[name] = png(fig)
    return out


# --------------------------------------------------------------------------------------
# Rules table, output folder
# --------------------------------------------------------------------------------------
def rules_markdown() -> str:
    """The rules and thresholds as markdown, from RULES and Thresholds (``--list-rules``;
    tools/sync_readme.py copies it into docs/health_rules.md)."""
    lines = ["| id | metric | fires when (defaults) | source |", "|---|---|---|---|"]
    lines += [f"| `{r.id}` | `{r.tag}` | {r.thresholds} | {r.source} |" for r in RULES]
    values = ", ".join(f"`{f.name}` {getattr(DEFAULT_THRESHOLDS, f.name)!r}" for f in dataclasses.fields(Thresholds))
    lines += ["", f"Thresholds, fields of `Thresholds` (override with `--set NAME=VALUE`): {values}."]
    whys = [f"- `{r.id}`: {r.why}" for r in RULES if r.why]
    if whys:
        lines += ["", "How these thresholds were chosen:", "", *whys]
    return "\n".join(lines)


def default_output_dir(logdir: Path) -> Path:
    """``health/`` beside the log folder: ``outputs/<experiment>/health`` for the launcher's
    ``outputs/<experiment>/tensorboard`` (TENSORBOARD_DIR) or ``.../swanlog`` (SWANLAB_LOG_DIR)."""
    folder = swanlab_root(logdir) or (logdir.parent if logdir.is_file() else logdir)
    return Path(os.path.abspath(folder)).parent / "health"


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------
MANUAL = f"""\
LOGDIR (a path) is either kind of log folder, detected from what it holds:
  SwanLab      a swanlog folder holding {SWANLAB_DB} (LOGGER=swanlab with SWANLAB_MODE=local writes
               it to $SWANLAB_LOG_DIR, the launcher's OUTPUT_DIR/swanlog), one run-* folder in it,
               or the {SWANLAB_DB} file. Each experiment is one run, named <project>/<experiment>.
               swanlab 0.10.3 has no offline reader (swanlab.Api queries a server), so the files
               are read with the standard library, as its local mode writes them
               (swanlab/deprecated/local.py): {SWANLAB_DB} is SQLite (tables project, experiment,
               tag), opened read-only; each scalar's points are JSON lines {{"index": step,
               "data": value}} in <run-*>/logs/<tag folder>/<n>.log.
  TensorBoard  anything else, searched recursively for events.out.tfevents.* (verl's
               _TensorboardAdapter, verl/utils/tracking.py, writes to $TENSORBOARD_DIR, else to
               tensorboard_log/<project>/<experiment>), or one event file. Each folder holding
               event files is one run, named by its path relative to LOGDIR; several files in one
               folder (a resumed run) are read in order. Read with TensorBoard's EventAccumulator
               (every point kept; 0-d tensor summaries count as scalars).
  A folder that is neither is refused. A run still being written can be reported: a truncated
  last record or JSON line is skipped. A step logged twice keeps its last value.

Outputs, all computed first, then each written atomically (temporary file + os.replace;
nothing is written on bad input):
  health_report.md and PNG curves (health_grid.png titled with the experiment's name, one
  <tag>.png per metric, healthy bands shaded, each warn/alert circled on the curve it concerns
  at the step it fired with its level and rule, no MFU panel on a CPU run, series drawn over
  each other told apart by marker and line style and "identical to" in the legend) in
  --output-dir, default health/ beside LOGDIR:
  outputs/<experiment>/health for the launcher's outputs/<experiment>/tensorboard or swanlog.
  Several runs: one subfolder each, the run name with '/' replaced by '__'. The report is also
  printed. --json FILE: {{"schema": 1, "logdir", "runs", "rules": [{{"run", "id", "tag", "level",
  "step", "value", "value_text", "message", "source"}}]}} (value null when not finite).

The run's configuration: Hydra's config.yaml of main_ppo, OUTPUT_DIR/hydra/.hydra/config.yaml
in the launcher's layout (hydra.run.dir=$OUTPUT_DIR/hydra), found beside LOGDIR or given with
--config. It gives the experiment's name (trainer.experiment_name; without it, the folder
holding tensorboard/ or swanlog/) and the reward function verl loaded (verl 0.9.x:
reward.custom_reward_function; verl 0.6.0: custom_reward_function; path and name), which
zero_reward_from_start names. Without it the rules run alike and say "the configured reward".

Levels: ok (checked, nothing found), info (worth knowing, not a problem for this recipe), warn,
alert, skipped (a metric the rule needs is absent; never a failure). A rule reports its worst
level and the first step it fired at.

Exit status: 0 report written (also when rules fired); 1 --fail-on level reached; 2 bad input
(LOGDIR missing or neither kind, no scalars, bad option, a Hydra config that is missing or not YAML),
one line "error: ..." naming the path.

Sources of the rules and numbers (per rule: --list-rules):
  GUIDE   the reference recipe's metric guide: actor/entropy >= 2.0 exploring, < 0.5 confident,
          towards 0 collapse; actor/kl_loss read against kl_loss_coef; pg_loss NaN = numerical
          instability; pg_clipfrac 10-25 % healthy, > 30 % too violent, < 5 % too low;
          grad_norm steady around 0.1-1.0; sudden response-length rise (rambling) or fall (lazy
          answers); validation and critic/score/mean of the same magnitude; perf higher is better.
  verl    0.6.0 source: metric names from workers/actor/dp_actor.py, trainer/ppo/ray_trainer.py,
          trainer/ppo/metric_utils.py, workers/fsdp_workers.py; defaults from
          trainer/config/actor/*.yaml (kl_loss_coef 0.001, low_var_kl, clip_ratio 0.2,
          ppo_epochs 1, grad_clip 1.0). dp_actor.py update_policy multiplies the logged pg_loss
          and kl_loss by loss_scale_factor = 1/(micro-batches per mini-batch) before averaging
          (changed after 0.6.0): --loss-scale undoes it for the KL rules. With one mini-batch and
          ppo_epochs 1 it takes its on_policy branch: the ratio is 1 and pg_clipfrac exactly 0.
  GRPO    Shao et al. 2024 (arXiv:2402.03300): group-normalised advantages, KL-to-reference loss.
  DAPO    Yu et al. 2025 (arXiv:2503.14476): groups whose responses all score the same carry no
          gradient; overlong responses.
  runs    public verl GRPO step logs at actor/lr 1e-6 show pg_clipfrac 0.0003-0.0013, 0.0008 at
          2e-6: the GUIDE's clip band (from classic PPO learning rates) is informational below
          clipfrac_band_min_lr. KL, truncation and validation thresholds are heuristics.
  rollout verl/utils/debug/metrics.py (0.6.0 and 0.9.1) logs the Pearson correlation and the
          absolute difference of the rollout's and the actor's token probabilities. The
          rollout_actor_mismatch threshold comes from recorded healthy CPU runs and a broken
          weight sync (docs/health_rules.md, "How these thresholds were chosen").
  length  hkust-nlp/simpleRL-reason issues #65 and #90: response_length/mean falling over a run
          of Qwen2.5 on MATH.
  memory  perf/max_memory_*_gb and perf/cpu_memory_used_gb (verl 0.6.0 workers/fsdp_workers.py;
          0.9.1 workers/engine_workers.py, under actor/); vllm-project/vllm-ascend#9563: memory
          left behind at each sleep/wake-up of the rollout, out of memory hours in.
  empty   verl-project/verl#6310: an empty response's reward lands on the padding and leaks into
          its group's GRPO advantages (response_length/min 0).
"""


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="health_report.py", epilog=MANUAL,
        description="Health report of a verl GRPO run from its TensorBoard or SwanLab scalars: one line per\n"
                    "rule (ok / info / warn / alert / skipped), a markdown report, PNG curves, optional JSON.",
    )
    p.add_argument("logdir", nargs="?", type=Path, metavar="LOGDIR",
                   help="SwanLab: the swanlog folder (or one run-* folder in it); TensorBoard: a run directory, "
                        "a folder above runs, or one event file")
    p.add_argument("--output-dir", type=Path, metavar="DIR",
                   help="folder for the report and figures (default: health/ beside LOGDIR)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the findings as JSON to FILE")
    p.add_argument("--fail-on", choices=("never", "warn", "alert"), default="never",
                   help="exit 1 when a rule reaches this level (default never)")
    p.add_argument("--run", metavar="SUBSTR",
                   help="only runs whose name contains SUBSTR (TensorBoard: path relative to LOGDIR; SwanLab: "
                        "<project>/<experiment> or the run-* folder)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="override a threshold, a field of Thresholds, int or float (repeatable; names: --list-rules)")
    p.add_argument("--updates-per-step", type=positive_int, metavar="N",
                   help="policy updates per step, ppo_epochs x mini-batches (integer >= 1); default: detected "
                        "(pg_clipfrac and ppo_kl exactly 0 at every step = 1)")
    p.add_argument("--lr", type=float, metavar="LR", help="actor learning rate; default: actor/lr from the log")
    p.add_argument("--kl-coef", type=float, metavar="C", help="actor kl_loss_coef; default: actor/kl_coef from the log")
    p.add_argument("--loss-scale", type=float, default=1.0, metavar="K",
                   help="multiply the logged actor/kl_loss by K > 0 (verl 0.6.0: ppo_mini_batch_size x rollout.n "
                        "/ n_gpus / ppo_micro_batch_size_per_gpu); default 1")
    p.add_argument("--val-tag", metavar="TAG",
                   help=f"validation tag (default {DEFAULT_VAL_TAG}, else the first val-core/*/mean@* tag)")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help=f"the run's Hydra config.yaml, for the experiment's name and the reward function verl loaded "
                        f"(default: OUTPUT_DIR/{HYDRA_CONFIG} when LOGDIR is the launcher's OUTPUT_DIR/tensorboard or "
                        "OUTPUT_DIR/swanlog)")
    p.add_argument("--rollout-dir", type=Path, metavar="DIR",
                   help="verl's trainer.rollout_data_dir (<step>.jsonl dumps), to count zero-variance groups")
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    p.add_argument("--quiet", action="store_true", help="do not print the report")
    p.add_argument("--list-rules", action="store_true", help="print the rules and thresholds (markdown) and exit")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI entry point; returns the exit status (0 ok, 1 --fail-on reached, 2 bad input)."""
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
        logdir = args.logdir
        runs = discover_runs(logdir, args.run)
        rollouts = read_rollout_groups(args.rollout_dir) if args.rollout_dir else None
        if args.config is not None and not args.config.is_file():
            raise DataError(f"{args.config}: --config: no such file (expected a run's Hydra config.yaml)")
        configs = {}
        for run in runs:
            path = args.config or find_run_config(run)
            configs[run.name] = read_run_config(path) if path is not None else None
        if not args.no_figures:
            import importlib.util

            if importlib.util.find_spec("matplotlib") is None:
                raise DataError("matplotlib is not installed: pip install matplotlib, or pass --no-figures")
    except (DataError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    out_root = args.output_dir or default_output_dir(logdir)
    files: Dict[Path, bytes] = {}
    texts, entries, worst = [], [], "ok"
    for run in runs:
        ctx = build_context(run, th, updates_per_step=args.updates_per_step, lr=args.lr, kl_coef=args.kl_coef,
                            loss_scale=args.loss_scale, val_tag=args.val_tag, rollout_groups=rollouts,
                            config=configs[run.name])
        findings = evaluate(run, th, ctx)
        md = render_markdown(run, findings, ctx, logdir)
        texts.append(md)
        entries += [finding_json(run, f) for f in findings]
        for f in findings:
            if SEVERITY[f.level] > SEVERITY[worst]:
                worst = f.level
        out_dir = out_root if len(runs) == 1 else out_root / run.name.replace(os.sep, "__")
        files[out_dir / "health_report.md"] = md.encode()
        if not args.no_figures:
            for name, data in render_figures(run, findings, th, ctx).items():
                files[out_dir / name] = data
    if args.json:
        doc = {"schema": 1, "logdir": str(logdir), "runs": [r.name for r in runs], "rules": entries}
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
    if args.fail_on != "never" and SEVERITY[worst] >= SEVERITY[args.fail_on]:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
