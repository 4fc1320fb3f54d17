"""Reading a run: its scalars (TensorBoard events or SwanLab's local database), verl's rollout
dumps, Hydra's record of the run's configuration and the stack it ran on."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import numpy as np

from grpo_math.io import DataError, one_line

# Metric tags as verl logs them (0.6.0 file names; 0.9.1 logs the same names unless noted).
TAG_ENTROPY = "actor/entropy"  # ray_trainer.py, from the old-log-prob pass
TAG_MAX_MEM = "perf/max_memory_allocated_gb"  # fsdp_workers.py; on CPU 0 (verl 0.6.0) or the worker's RSS
TAG_MAX_MEM_RESERVED = "perf/max_memory_reserved_gb"  # the device allocator's peak
TAG_CPU_MEM = "perf/cpu_memory_used_gb"  # the host's used memory (psutil)
MEMORY_TAGS = (TAG_MAX_MEM_RESERVED, TAG_MAX_MEM, TAG_CPU_MEM)
#: a tag's stand-in where verl logs the same quantity under another name: without the old-log-prob
#: pass (rollout-correction bypass mode) the policy's entropy is the update's actor/entropy_loss
#: (verl/workers/utils/losses.py, with actor.calculate_entropy=True); verl 0.9.1 logs the memory
#: tags from workers/engine_workers.py under actor/
SAME_QUANTITY = {TAG_ENTROPY: "actor/entropy_loss", **{tag: f"actor/{tag}" for tag in MEMORY_TAGS}}
TAG_KL_LOSS = "actor/kl_loss"  # dp_actor.py, only with actor.use_kl_loss=True
TAG_KL_COEF = "actor/kl_coef"  # = actor.kl_loss_coef
TAG_PG_LOSS = "actor/pg_loss"
TAG_CLIPFRAC = "actor/pg_clipfrac"
TAG_PPO_KL = "actor/ppo_kl"  # KL(old || current) inside the update
TAG_GRAD_NORM = "actor/grad_norm"  # pre-clip norm per optimizer step
TAG_LR = "actor/lr"
TAG_RESP_LEN = "response_length/mean"  # metric_utils.py compute_data_metrics
TAG_RESP_CLIP = "response_length/clip_ratio"  # share of responses at max length
TAG_RESP_MIN = "response_length/min"  # the step's shortest response, in tokens
TAG_ABORTED = "response/aborted_ratio"  # the share of responses of length 0
TAG_SCORE_MEAN = "critic/score/mean"  # sequence score before KL
TAG_SCORE_MAX = "critic/score/max"
TAG_SCORE_MIN = "critic/score/min"
TAG_ADV_MAX = "critic/advantages/max"
TAG_ADV_MIN = "critic/advantages/min"
TAG_THROUGHPUT = "perf/throughput"  # tokens / (s * device)
TAG_MFU = "perf/mfu/actor"  # fraction of peak FLOPS
# Rollout vs actor on the rollout's sampled tokens (verl/utils/debug/metrics.py, logged with
# rollout.calculate_log_probs=True): Pearson correlation and mean absolute difference of the
# token probabilities.
TAG_ROLLOUT_PEARSON = "training/rollout_actor_probs_pearson_corr"
TAG_ROLLOUT_PROBS_DIFF = "training/rollout_probs_diff_mean"
ROLLOUT_TAGS = (TAG_ROLLOUT_PEARSON, TAG_ROLLOUT_PROBS_DIFF)
#: The recipe's validation tag (verl: val-core/<data_source>/<var>/mean@<n>, <var> "acc" when the
#: reward function returns an "acc" extra, else "reward").
DEFAULT_VAL_TAG = "val-core/DigitalLearningGmbH/MATH-lighteval/reward/mean@1"
VAL_MEAN_RE = re.compile(r"^val-(?P<sec>core|aux)/(?P<src>.+)/(?P<var>[^/]+)/mean@(?P<n>\d+)$")

SWANLAB_DB = "runs.swanlab"  # the SQLite database of swanlab's local mode
EXPECTED_LOGDIR = (
    "a TensorBoard log directory (events.out.tfevents.*: trainer.logger with 'tensorboard', "
    "$TENSORBOARD_DIR) or a SwanLab log directory (swanlog/ holding " + SWANLAB_DB + ": trainer.logger "
    "with 'swanlab', SWANLAB_MODE=local, $SWANLAB_LOG_DIR)")
#: Hydra's record of main_ppo's configuration, relative to the launcher's OUTPUT_DIR.
HYDRA_CONFIG = Path("hydra") / ".hydra" / "config.yaml"
STACK_VERL = {"reference": "verl 0.6.0", "current": "verl 0.9.1"}


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
    """One run's scalars. ``name``: a TensorBoard run's path relative to LOGDIR ("." for LOGDIR
    itself), a SwanLab run's ``<project>/<experiment>``; ``about``: the SwanLab experiment and its
    state, or ""."""

    name: str
    path: Path
    scalars: Dict[str, Series]
    about: str = ""

    def get(self, tag: Optional[str]) -> Optional[Series]:
        s = self.scalars.get(tag)
        if (s is None or not len(s)) and tag in SAME_QUANTITY:
            s = self.scalars.get(SAME_QUANTITY[tag])
        return s if s is not None and len(s) else None

    def logged(self, tag: str) -> str:
        """The name ``tag``'s data is logged under here (itself or its SAME_QUANTITY stand-in)."""
        return tag if tag in self.scalars and len(self.scalars[tag]) else SAME_QUANTITY.get(tag, tag)

    @property
    def train_steps(self) -> List[int]:
        for tag in (TAG_SCORE_MEAN, TAG_PG_LOSS, TAG_RESP_LEN, TAG_GRAD_NORM):
            if (s := self.get(tag)) is not None:
                return [int(x) for x in s.steps]
        return []


def make_series(points: Iterable[Tuple[int, float]]) -> Series:
    last = {int(step): float(value) for step, value in points}  # in order: a step logged twice keeps its last
    steps = np.array(sorted(last), dtype=np.int64)
    return Series(steps, np.array([last[s] for s in steps], dtype=np.float64))


# ---- TensorBoard ----
def load_scalars(path: Path) -> Dict[str, Series]:
    """Every scalar of one run (a directory of event files, or one event file), read with
    TensorBoard's ``EventAccumulator`` keeping every point; 0-d numeric tensor summaries count as
    scalars. DataError when the reader fails."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    keep = {ea.SCALARS: 0, ea.TENSORS: 0, ea.IMAGES: 1, ea.AUDIO: 1, ea.HISTOGRAMS: 1, ea.COMPRESSED_HISTOGRAMS: 1}
    try:
        acc = ea.EventAccumulator(str(path), size_guidance=keep)
        acc.Reload()
        out = {tag: make_series((e.step, e.value) for e in acc.Scalars(tag)) for tag in acc.Tags()[ea.SCALARS]}
        for tag in acc.Tags()[ea.TENSORS]:
            arrays = [(e.step, tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)]
            if tag not in out and arrays and all(a.size == 1 and a.dtype.kind in "fiub" for _, a in arrays):
                out[tag] = make_series((step, float(a.reshape(-1)[0])) for step, a in arrays)
    except Exception as exc:  # the reader's errors are varied; report them in one line
        raise DataError(f"{path}: cannot read TensorBoard events ({one_line(exc) or type(exc).__name__})") from None
    return out


def find_event_files(logdir: Path) -> List[Path]:
    """Event files under ``logdir`` (recursive, sorted), or ``[logdir]`` if it is one."""
    if not logdir.exists():
        raise DataError(f"{logdir}: no such file or directory (expected {EXPECTED_LOGDIR})")
    if logdir.is_file():
        if "tfevents" not in logdir.name:
            raise DataError(f"{logdir}: not a TensorBoard event file (expected events.out.tfevents.* or {SWANLAB_DB})")
        return [logdir]
    files, swanlogs = [], []
    for root, dirs, names in os.walk(logdir):
        dirs.sort()
        files += [Path(root) / n for n in sorted(names) if "tfevents" in n]
        swanlogs += [root] if SWANLAB_DB in names else []
    if not files:
        hint = f"; SwanLab logs found in {swanlogs[0]}: pass that folder" if swanlogs else ""
        raise DataError(f"{logdir}: no TensorBoard event files (events.out.tfevents.*) and no SwanLab "
                        f"{SWANLAB_DB} found; expected {EXPECTED_LOGDIR}{hint}")
    return files


def with_scalars(runs: List[Run], empty_message: str) -> List[Run]:
    """The runs that logged scalars (a note on stderr for each that has none yet)."""
    kept = [r for r in runs if r.scalars]
    if not kept:
        raise DataError(empty_message)
    for r in runs:
        if not r.scalars:
            print(f"note: {r.path}: no scalars yet, run not reported", file=sys.stderr)
    return kept


def discover_runs(logdir: Path, select: Optional[str] = None) -> List[Run]:
    """The runs under ``logdir``: a SwanLab log directory's experiments, else each directory holding
    TensorBoard event files (or the one event file given). ``select`` keeps runs whose name contains
    it. DataError: neither kind of log, no run matching ``select``, or no scalars at all."""
    if swanlab_root(logdir) is not None:
        return discover_swanlab_runs(logdir, select)
    files = find_event_files(logdir)
    groups = sorted({f.parent for f in files}) if logdir.is_dir() else files
    names = {p: "." if p == logdir else os.path.relpath(p, logdir) for p in groups}
    runs = [Run(names[p], p, {}) for p in groups if select is None or select in names[p]]
    if not runs:
        raise DataError(f"{logdir}: no run path contains {select!r} (runs: {', '.join(names.values())})")
    for run in runs:
        run.scalars = load_scalars(run.path)
    return with_scalars(runs, f"{logdir}: event files hold no scalars yet (expected verl metrics such as "
                              f"{TAG_PG_LOSS}; is the run still starting?)")


def scalars_by_step(path: Path) -> Dict[str, Dict[int, float]]:
    """``{tag: {global step: value}}`` of one run: a TensorBoard run, or a SwanLab log directory
    holding one experiment (or its ``run-*`` folder)."""
    path = Path(path)
    runs = discover_swanlab_runs(path) if swanlab_root(path) is not None else [Run(".", path, load_scalars(path))]
    if len(runs) != 1:
        raise DataError(f"{path}: {len(runs)} SwanLab experiments ({', '.join(r.name for r in runs)}); "
                        "expected one: pass its run-* folder")
    return {tag: dict(zip(s.steps.tolist(), s.values.tolist())) for tag, s in runs[0].scalars.items()}


# ---- SwanLab's local mode: runs.swanlab (SQLite: project, experiment, tag with its folder) and each
# tag's points as JSON lines {"index": step, "data": value} in <run-*>/logs/<folder>/<n>.log ----
def swanlab_root(path: Path) -> Optional[Path]:
    """The SwanLab log directory ``path`` designates (the folder holding runs.swanlab, that file,
    or a ``run-*`` folder in that folder), or None."""
    path = Path(path)
    if path.is_file():
        return path.parent if path.name == SWANLAB_DB else None
    if (path / SWANLAB_DB).is_file():
        return path
    if path.is_dir() and path.name.startswith("run-") and (path.parent / SWANLAB_DB).is_file():
        return path.parent
    return None


def open_swanlab_db(db: Path) -> sqlite3.Connection:
    """Read-only; a folder SQLite cannot write WAL's shared memory into (a read-only copy) is
    opened as immutable instead."""
    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return con
    except sqlite3.Error:
        return sqlite3.connect(f"{db.resolve().as_uri()}?immutable=1", uri=True)


def read_swanlab_points(tag_dir: Path) -> Series:
    """One tag's points from its ``<n>.log`` files in slice order. Lines that are not a JSON object
    with an integer ``index`` and a numeric ``data`` (a line being written, a media entry) are
    skipped; NaN and infinities (JSON extensions NaN / Infinity) are kept."""
    points, logs = [], [p for p in tag_dir.glob("*.log") if p.is_file()]
    for f in sorted(logs, key=lambda p: (0, int(p.stem)) if p.stem.isdigit() else (1, p.name)):
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
                step, value = rec["index"], rec["data"]
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(step, int) and isinstance(value, (int, float)) and not isinstance(value, bool):
                points.append((step, value))
    return make_series(points)


def discover_swanlab_runs(path: Path, select: Optional[str] = None) -> List[Run]:
    """The experiments of a SwanLab log directory, each a Run named ``<project>/<experiment>`` whose
    path is its ``run-*`` folder (given a ``run-*`` folder, only that one); tags of type ``line``."""
    path = Path(path)
    root = swanlab_root(path)
    if root is None:
        raise DataError(f"{path}: not a SwanLab log directory (expected a folder holding {SWANLAB_DB})")
    only = path.name if path.is_dir() and path != root else None
    try:
        with closing(open_swanlab_db(root / SWANLAB_DB)) as con:
            rows = con.execute("SELECT e.id, e.run_id, e.name, e.status, p.name FROM experiment e "
                               "JOIN project p ON p.id = e.project_id ORDER BY e.id").fetchall()
            tags = con.execute("SELECT experiment_id, name, folder FROM tag WHERE type = 'line'").fetchall()
    except sqlite3.Error as exc:
        raise DataError(f"{root / SWANLAB_DB}: cannot read the SwanLab database ({exc}; expected swanlab's "
                        "local-mode runs.swanlab with tables project, experiment, tag)") from None
    states = {0: "running", 1: "finished", -1: "crashed or stopped"}
    runs = []
    for exp_id, run_id, exp_name, status, project in rows:
        name = f"{project}/{exp_name}"
        if (only is not None and run_id != only) or (select is not None and select not in name
                                                     and select not in str(run_id)):
            continue
        state = states.get(status, f"status {status}")
        run = Run(name, root / str(run_id), {}, f"SwanLab experiment `{name}` ({state})")
        for _, tag, folder in (t for t in tags if t[0] == exp_id):
            if (tag_dir := run.path / "logs" / (folder or tag)).is_dir() and len(s := read_swanlab_points(tag_dir)):
                run.scalars[tag] = s
        runs.append(run)
    if not runs:
        names = ", ".join(f"{p}/{n} ({r})" for _, r, n, _, p in rows) or "none"
        what = f"experiment {only!r}" if only else (f"experiment matching {select!r}" if select else "experiment")
        raise DataError(f"{root}: no SwanLab {what} in {SWANLAB_DB} (experiments: {names})")
    return with_scalars(runs, f"{path}: SwanLab logs hold no scalars yet (expected verl metrics such as "
                              f"{TAG_PG_LOSS} under {runs[0].path / 'logs'}; is the run still starting?)")


# ---- Rollout dumps (trainer.rollout_data_dir, ray_trainer.py _dump_generations) ----
def read_rollout_groups(rollout_dir: Path) -> Dict[int, Tuple[int, int, int]]:
    """Per step of ``<step>.jsonl`` (a line per response: input, output, score, step): (prompt
    groups of 2+ responses, those whose responses all scored the same, responses with an empty
    ``output``). Responses are grouped by identical prompt text; malformed lines are skipped."""
    files = sorted((p for p in rollout_dir.glob("*.jsonl") if p.stem.isdigit()), key=lambda p: int(p.stem))
    if not rollout_dir.is_dir() or not files:
        what = "not a directory" if not rollout_dir.is_dir() else "no <step>.jsonl rollout dumps"
        raise DataError(f"{rollout_dir}: {what} (expected verl's trainer.rollout_data_dir)")
    out = {}
    for f in files:
        groups: Dict[str, List[float]] = {}
        empty = 0
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
                groups.setdefault(str(rec["input"]), []).append(float(rec["score"]))
                empty += rec.get("output") == ""
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        sized = [g for g in groups.values() if len(g) >= 2]
        if sized or empty:
            out[int(f.stem)] = (len(sized), sum(max(g) - min(g) <= 1e-9 for g in sized), empty)
    return out


# ---- The run's configuration: Hydra's config.yaml and the launcher's launch_settings.json ----
@dataclass(frozen=True)
class RunConfig:
    """From a run's Hydra config: the experiment's name, the reward function verl loaded
    (``reward_file`` None: verl's built-in reward, by data_source) and the checkpoint folder."""

    path: Path
    experiment: Optional[str]
    reward_key: str
    reward_file: Optional[str]
    reward_name: Optional[str]
    ckpt_dir: Optional[str] = None
    device: Optional[str] = None  # trainer.device
    #: policy updates per global step: actor.ppo_epochs x (data.train_batch_size / actor.ppo_mini_batch_size)
    updates_per_step: Optional[int] = None

    @property
    def reward(self) -> str:
        if not self.reward_file:
            return (f"verl's built-in default_compute_score (chosen by data_source; {self.reward_key}.path is "
                    f"empty in {self.path})")
        return f"{self.reward_file}:{self.reward_name or 'compute_score'} ({self.reward_key} in {self.path})"


def log_folder(path: Path) -> Path:
    """The folder the logger wrote ``path`` into: a TensorBoard run's directory, a SwanLab run's swanlog."""
    return swanlab_root(path) or (path.parent if path.is_file() else path)


def find_run_config(run: Run) -> Optional[Path]:
    """``OUTPUT_DIR/hydra/.hydra/config.yaml`` beside the launcher's OUTPUT_DIR/tensorboard or swanlog."""
    path = log_folder(run.path).resolve().parent / HYDRA_CONFIG
    return path if path.is_file() else None


def read_run_config(path: Path) -> RunConfig:
    """Read Hydra's ``config.yaml`` of a main_ppo run. verl 0.9.x loads the reward from
    ``reward.custom_reward_function`` (the top-level key still composes but is ignored), verl 0.6.0
    from the top-level ``custom_reward_function``. DataError when it is not a YAML mapping."""
    import yaml  # PyYAML, a dependency of verl's omegaconf

    try:
        cfg = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise DataError(f"{path}: cannot read the run's Hydra config ({one_line(exc)})") from None
    if not isinstance(cfg, dict):
        raise DataError(f"{path}: not a Hydra config (expected a YAML mapping with trainer, data, ...)")

    def section(d: dict, key: str) -> dict:
        return v if isinstance(v := d.get(key), dict) else {}

    trainer, reward = section(cfg, "trainer"), section(cfg, "reward")
    key = "reward.custom_reward_function" if isinstance(reward.get("custom_reward_function"), dict) \
        else "custom_reward_function"
    crf = section(reward if key.startswith("reward.") else cfg, "custom_reward_function")
    text = {k: str(v) if v else None for k, v in (("name", trainer.get("experiment_name")), ("path", crf.get("path")),
                                                   ("fn", crf.get("name")), ("ckpt", trainer.get("default_local_dir")),
                                                   ("device", trainer.get("device")))}
    actor = section(section(cfg, "actor_rollout_ref"), "actor")
    try:
        updates = int(actor.get("ppo_epochs", 1)) * -(-int(section(cfg, "data")["train_batch_size"])
                                                       // int(actor["ppo_mini_batch_size"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        updates = None
    return RunConfig(Path(path), text["name"], key, text["path"], text["fn"], text["ckpt"], text["device"], updates)


def experiment_name(run: Run, config: Optional[RunConfig]) -> Tuple[str, str]:
    """(the experiment's name, where it comes from): trainer.experiment_name; else a SwanLab run's
    ``<project>/<experiment>``; else the folder above a log folder named tensorboard or swanlog
    (the launcher's OUTPUT_DIR); else the run's folder (verl's tensorboard_log/<project>/<experiment>)."""
    if config is not None and config.experiment:
        return config.experiment, f"trainer.experiment_name in {config.path}"
    if run.about:
        return run.name, "SwanLab experiment"
    folder = log_folder(run.path).resolve()
    if folder.name in ("tensorboard", "swanlog"):
        return folder.parent.name, f"the folder holding {folder.name}/"
    return folder.name, "the log folder"


def run_stack(run: Run, config: Optional[RunConfig]) -> Tuple[Optional[str], str]:
    """(verl's version, how it is known) of the stack that made the run: STACK in the launcher's
    launch_settings.json (grpo_math/launch_guard.py, in CKPT_DIR), else the reward key of the Hydra config (verl 0.9.x's
    reward.custom_reward_function), else the tags (verl 0.9.1 logs the worker's memory under
    actor/perf/, verl 0.6.0 under perf/); (None, "unknown") when none tells."""
    folders = [Path(config.ckpt_dir)] if config is not None and config.ckpt_dir else []
    for folder in folders + [log_folder(run.path).resolve().parent / "checkpoints"]:
        try:
            stack = json.loads((settings := folder / "launch_settings.json").read_text())["knobs"]["STACK"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if stack in STACK_VERL:
            return STACK_VERL[stack], f"STACK={stack} in {settings}"
    if config is not None and config.reward_key.startswith("reward."):
        return "verl 0.9.x", f"{config.reward_key} in {config.path}"
    for tag, verl in ((f"actor/{TAG_MAX_MEM}", "verl 0.9.x"), (TAG_MAX_MEM, "verl 0.6.0")):
        if tag in run.scalars:
            return verl, f"{tag} logged"
    return None, "no launch_settings.json, verl 0.9 Hydra config or memory tag tells"


def default_output_dir(logdir: Path) -> Path:
    """``health/`` beside the log folder: ``outputs/<experiment>/health`` for the launcher's
    ``outputs/<experiment>/tensorboard`` or ``.../swanlog``, and for that OUTPUT_DIR itself."""
    folder = Path(os.path.abspath(log_folder(logdir)))
    if any((folder / name).is_dir() for name in ("tensorboard", "swanlog")):
        return folder / "health"
    return folder.parent / "health"
