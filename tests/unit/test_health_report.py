"""Tests for health_report.py on synthetic verl-like runs.

Each run is written with a real TensorBoard writer (torch.utils.tensorboard.SummaryWriter,
the writer verl's tracking.py uses; tensorboard's own EventFileWriter when torch is absent)
under the metric names verl 0.6.0 logs. A healthy run fires no warn/alert; each pathology
fires its rule at the step where it was planted.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import health_report
from grpo_math.health import read, rules
from grpo_math.io import DataError
from conftest import REPO

VAL = read.DEFAULT_VAL_TAG


# --------------------------------------------------------------------------------------
# Writing synthetic runs
# --------------------------------------------------------------------------------------
class _TBWriter:
    """Scalars through tensorboard's own EventFileWriter (fallback when torch is missing)."""

    def __init__(self, logdir):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._w = EventFileWriter(str(logdir))

    def add_scalar(self, tag, value, step):
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        summ = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
        self._w.add_event(Event(summary=summ, step=int(step), wall_time=0.0))

    def flush(self):
        self._w.flush()

    def close(self):
        self._w.close()


def make_writer(logdir):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # pragma: no cover - CI has torch
        return _TBWriter(logdir)
    return SummaryWriter(str(logdir))


def healthy(s: int, rng: random.Random) -> dict:
    """One step of a healthy on-policy GRPO run at lr 1e-6 (values like public verl logs)."""
    return {
        "actor/entropy": 1.0 - 0.01 * s,
        "actor/kl_loss": 1e-4 * (s - 1),
        "actor/kl_coef": 0.001,
        "actor/pg_loss": rng.uniform(-0.01, 0.01),
        "actor/pg_clipfrac": 0.0,
        "actor/ppo_kl": 0.0,
        "actor/pg_clipfrac_lower": 0.0,
        "actor/grad_norm": 0.3 + rng.uniform(-0.05, 0.05),
        "actor/lr": 1e-6,
        "response_length/mean": 400 + rng.uniform(-20, 20),
        "response_length/clip_ratio": 0.02,
        "critic/score/mean": 0.3 + 0.0075 * s,
        "critic/score/max": 1.0,
        "critic/score/min": 0.0,
        "critic/advantages/max": 1.5,
        "critic/advantages/min": -1.2,
        "perf/throughput": 1000 + rng.uniform(-50, 50),
        "perf/mfu/actor": 0.3,
        "timing_s/step": 60.0,
    }


def healthy_val(s: int) -> float:
    return 0.30 + 0.005 * s


def write_run(logdir: Path, steps: int = 20, override=None, val=healthy_val, val_every: int = 5,
              drop=(), close: bool = True, seed: int = 0, writer=None):
    """Write a run: ``override(step, metrics)`` edits a step's metrics in place; ``val(step)``
    gives the validation reward logged at step 0, every ``val_every`` steps and the last step;
    tags in ``drop`` are not logged. ``writer``: where to log (default a TensorBoard writer on
    ``logdir``). Returns the writer (open when ``close`` is False)."""
    rng = random.Random(seed)
    w = writer if writer is not None else make_writer(logdir)
    if val is not None:
        w.add_scalar(VAL, val(0), 0)
    for s in range(1, steps + 1):
        m = healthy(s, rng)
        if override:
            override(s, m)
        for k, v in m.items():
            if k not in drop:
                w.add_scalar(k, v, s)
        if val is not None and (s % val_every == 0 or s == steps):
            w.add_scalar(VAL, val(s), s)
    if close:
        w.close()
    else:
        w.flush()
    return w


def report(logdir: Path, *args: str, tmp_json: Path = None):
    """Run the CLI in-process with --json; return (exit code, {(run, rule id): entry})."""
    out = tmp_json or (logdir.parent / f"{logdir.name}.health.json")
    rc = health_report.main([str(logdir), "--json", str(out), "--quiet", "--no-figures", *args])
    if not out.exists():
        return rc, {}
    doc = json.loads(out.read_text())
    return rc, {e["id"]: e for e in doc["rules"]} if len(doc["runs"]) == 1 else doc


def fired(entries: dict) -> dict:
    return {k: e for k, e in entries.items() if e["level"] in ("warn", "alert")}


# --------------------------------------------------------------------------------------
# Healthy run
# --------------------------------------------------------------------------------------
def test_healthy_run_fires_no_rule(tmp_path):
    run = tmp_path / "tensorboard_log" / "proj" / "exp"
    write_run(run)
    rc, entries = report(tmp_path / "tensorboard_log", "--fail-on", "warn")
    assert rc == 0
    assert fired(entries) == {}
    assert len(entries) == len(rules.RULES)
    # clip fraction 0 at lr 1e-6 with one update per step is expected, not a warning
    assert entries["clipfrac_low"]["level"] == "info"
    assert entries["zero_variance_groups"]["level"] == "skipped"


# --------------------------------------------------------------------------------------
# Pathologies: (name, override, val, rule, level, step, other rules allowed to fire)
# --------------------------------------------------------------------------------------
def _set(tag, value, start, end=10**9):
    def f(s, m):
        if start <= s <= end:
            m[tag] = value(s) if callable(value) else value
    return f


def _both(*fs):
    def f(s, m):
        for g in fs:
            g(s, m)
    return f


def _off_policy(s, m):  # several mini-batches: the ratio moves, ppo_kl non-zero
    m["actor/pg_clipfrac"] = 0.15
    m["actor/ppo_kl"] = 1e-3


PATHOLOGIES = [
    ("entropy_collapse", _set("actor/entropy", 0.005, 10), healthy_val, "entropy_collapse", "alert", 10, set()),
    ("entropy_blowup", _set("actor/entropy", 3.0, 10), healthy_val, "entropy_high", "warn", 10, set()),
    ("nan_pg_loss", _set("actor/pg_loss", float("nan"), 7), healthy_val, "pg_loss_nan", "alert", 7, set()),
    ("nan_grad_norm", _set("actor/grad_norm", float("inf"), 9, 9), healthy_val, "nonfinite_metrics", "alert", 9,
     set()),
    ("grad_spike", _set("actor/grad_norm", 5.0, 12, 12), healthy_val, "grad_norm_spike", "warn", 12, set()),
    ("grad_high", _set("actor/grad_norm", 3.0, 6), healthy_val, "grad_norm_band", "warn", 6, {"grad_norm_spike"}),
    ("length_blowup", _set("response_length/mean", 900.0, 14), healthy_val, "response_length_rise", "warn", 14,
     set()),
    ("length_collapse", _set("response_length/mean", 100.0, 14), healthy_val, "response_length_fall", "warn", 14,
     set()),
    ("truncation", _set("response_length/clip_ratio", 0.5, 4), healthy_val, "response_truncation", "warn", 4, set()),
    ("reward_up_val_down", _set("critic/score/mean", lambda s: 0.3 + 0.02 * s, 1),
     lambda s: {0: 0.30, 5: 0.35, 10: 0.40, 15: 0.33, 20: 0.30}[s], "reward_up_val_down", "warn", 15,
     {"val_regression"}),
    ("val_train_gap", None, lambda s: 0.01, "val_train_gap", "warn", 0, set()),
    ("clipfrac_violent", _both(_off_policy, _set("actor/pg_clipfrac", 0.4, 8, 8)), healthy_val, "clipfrac_high",
     "alert", 8, set()),
    ("clipfrac_above_band", _both(_off_policy, _set("actor/pg_clipfrac", 0.27, 8, 8)), healthy_val,
     "clipfrac_high", "warn", 8, set()),
    ("clipfrac_too_low_at_high_lr", _both(_off_policy, _set("actor/pg_clipfrac", 0.01, 1),
                                          _set("actor/lr", 1e-4, 1)), healthy_val, "clipfrac_low", "warn", 1, set()),
    ("no_learning_signal", _both(_set("critic/advantages/max", 0.0, 5, 7), _set("critic/advantages/min", 0.0, 5, 7)),
     healthy_val, "no_learning_signal", "alert", 5, set()),
    ("no_positive_reward", _both(_set("critic/score/mean", 0.0, 1), _set("critic/score/max", 0.0, 1),
                                 _set("critic/advantages/max", 0.0, 1), _set("critic/advantages/min", 0.0, 1)),
     lambda s: 0.0, "no_positive_reward", "alert", 1, {"no_learning_signal", "zero_reward_from_start"}),
    ("kl_drift", _set("actor/kl_loss", 0.5, 9), healthy_val, "kl_high", "warn", 9, set()),
    ("kl_flat", _set("actor/kl_loss", 0.0, 1), healthy_val, "kl_low", "warn", 10, set()),
    ("throughput_drop", _set("perf/throughput", 300.0, 11, 11), healthy_val, "throughput_drop", "warn", 11, set()),
]


@pytest.mark.parametrize("name,override,val,rule,level,step,also", PATHOLOGIES, ids=[p[0] for p in PATHOLOGIES])
def test_pathology_fires_its_rule_at_its_step(tmp_path, name, override, val, rule, level, step, also):
    write_run(tmp_path / "run", override=override, val=val)
    rc, entries = report(tmp_path / "run")
    assert rc == 0  # a report with alerts still exits 0 unless --fail-on
    e = entries[rule]
    assert (e["level"], e["step"]) == (level, step), e
    assert set(fired(entries)) <= {rule} | also, fired(entries)


def test_fail_on_levels(tmp_path):
    write_run(tmp_path / "run", override=_set("actor/pg_loss", float("nan"), 7))
    assert report(tmp_path / "run", "--fail-on", "alert")[0] == 1
    assert report(tmp_path / "run", "--fail-on", "warn")[0] == 1
    assert report(tmp_path / "run", "--fail-on", "never")[0] == 0


def test_json_entry_fields_and_nan_value(tmp_path):
    write_run(tmp_path / "run", override=_set("actor/pg_loss", float("nan"), 7))
    out = tmp_path / "h.json"
    rc, _ = report(tmp_path / "run", tmp_json=out)
    doc = json.loads(out.read_text())
    assert doc["schema"] == 1 and doc["runs"] == ["."]
    e = next(x for x in doc["rules"] if x["id"] == "pg_loss_nan")
    assert e["tag"] == "actor/pg_loss" and e["level"] == "alert" and e["step"] == 7
    assert e["value"] is None and e["value_text"] == "nan" and "dp_actor.py" in e["source"]
    assert {"run", "id", "tag", "level", "step", "value", "message", "source"} <= set(e)


# --------------------------------------------------------------------------------------
# Clip fraction judged against the recipe's lr / update count
# --------------------------------------------------------------------------------------
def test_low_clipfrac_is_informational_at_lr_1e6_even_off_policy(tmp_path):
    # real verl runs at lr 1e-6 with several mini-batches log ~0.001
    write_run(tmp_path / "run", override=_both(_off_policy, _set("actor/pg_clipfrac", 0.001, 1)))
    _, entries = report(tmp_path / "run")
    assert entries["clipfrac_low"]["level"] == "info"
    assert "1e-06" in entries["clipfrac_low"]["message"]


def test_on_policy_detected_without_lr(tmp_path):
    write_run(tmp_path / "run", drop=("actor/lr",))
    _, entries = report(tmp_path / "run")
    assert entries["clipfrac_low"]["level"] == "info"
    assert "on-policy" in entries["clipfrac_low"]["message"]
    # the same log with the band forced on (declared multi-update, high lr) warns
    _, entries = report(tmp_path / "run", "--updates-per-step", "4", "--lr", "1e-4")
    assert entries["clipfrac_low"]["level"] == "warn"


# --------------------------------------------------------------------------------------
# Robustness: short runs, missing metrics, runs in progress, nested runs, tensors
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("steps", [1, 2, 3])
def test_short_runs_report_without_false_alarms(tmp_path, steps):
    write_run(tmp_path / "run", steps=steps)
    out_dir = tmp_path / "out"
    figures = [] if steps == 1 else ["--no-figures"]  # figures of a 1-point run; others: speed
    if steps == 1:
        pytest.importorskip("matplotlib")
    rc = health_report.main([str(tmp_path / "run"), "--output-dir", str(out_dir), "--quiet", "--fail-on", "warn", *figures])
    assert rc == 0
    assert (out_dir / "health_report.md").is_file()
    if steps == 1:
        assert (out_dir / "health_grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resumed_run_keeps_the_latest_value_per_step(tmp_path):
    for value, steps in ((1.0, range(1, 11)), (2.0, range(6, 13))):  # restart from step 6
        w = make_writer(tmp_path / "run")
        for s in steps:
            w.add_scalar("actor/pg_loss", value, s)
        w.close()
    assert len(list((tmp_path / "run").glob("*tfevents*"))) == 2
    s = read.load_scalars(tmp_path / "run")["actor/pg_loss"]
    assert s.steps.tolist() == list(range(1, 13))
    assert s.values.tolist() == [1.0] * 5 + [2.0] * 7


def test_missing_metrics_are_skipped_not_failed(tmp_path):
    w = make_writer(tmp_path / "run")
    for s in (1, 2, 3):
        w.add_scalar("actor/pg_loss", 0.01, s)
    w.close()
    rc, entries = report(tmp_path / "run", "--fail-on", "warn")
    assert rc == 0
    assert entries["pg_loss_nan"]["level"] == "ok"
    for rid in ("entropy_collapse", "kl_high", "clipfrac_low", "val_train_gap", "mfu", "no_learning_signal"):
        assert entries[rid]["level"] == "skipped"
        assert entries[rid]["message"].startswith("skipped (no data")


def test_run_in_progress_with_partial_record(tmp_path):
    w = write_run(tmp_path / "run", steps=6, close=False)
    try:
        ev = next((tmp_path / "run").glob("*tfevents*"))
        with open(ev, "ab") as fh:  # a writer caught mid-record: length header, no payload
            fh.write(b"\x40\x00\x00\x00\x00\x00\x00\x00\x12")
        rc, entries = report(tmp_path / "run")
        assert rc == 0
        assert entries["pg_loss_nan"]["level"] == "ok"
        md = (tmp_path / "health" / "health_report.md").read_text()  # beside the log folder
        assert "training steps 1-6 (6 logged)" in md
    finally:
        w.close()


def test_nested_runs_each_reported_and_selectable(tmp_path):
    root = tmp_path / "logs" / "tensorboard_log" / "proj"
    write_run(root / "exp1")
    write_run(root / "exp2", override=_set("actor/pg_loss", float("nan"), 3))
    out = tmp_path / "all.json"
    rc = health_report.main([str(tmp_path / "logs"), "--json", str(out), "--quiet", "--no-figures"])
    doc = json.loads(out.read_text())
    assert rc == 0
    assert doc["runs"] == ["tensorboard_log/proj/exp1", "tensorboard_log/proj/exp2"]
    nan = {e["run"]: e["level"] for e in doc["rules"] if e["id"] == "pg_loss_nan"}
    assert nan == {"tensorboard_log/proj/exp1": "ok", "tensorboard_log/proj/exp2": "alert"}
    assert (tmp_path / "health" / "tensorboard_log__proj__exp2" / "health_report.md").is_file()
    rc, entries = report(tmp_path / "logs", "--run", "exp2", tmp_json=tmp_path / "one.json")
    assert entries["pg_loss_nan"]["level"] == "alert"


def test_tensor_scalar_summaries_are_read(tmp_path):
    """TF2-style summaries store scalars as 0-d tensors; the reader turns them into scalars."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    w = EventFileWriter(str(tmp_path / "run"))
    meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    for s, v in [(1, 0.2), (2, float("nan")), (3, 0.1)]:
        val = Summary.Value(tag="actor/pg_loss", metadata=meta, tensor=tensor_util.make_tensor_proto(v))
        w.add_event(Event(summary=Summary(value=[val]), step=s, wall_time=0.0))
    w.close()
    _, entries = report(tmp_path / "run")
    assert (entries["pg_loss_nan"]["level"], entries["pg_loss_nan"]["step"]) == ("alert", 2)


def test_rollout_dumps_give_zero_variance_share(tmp_path):
    write_run(tmp_path / "run", steps=3)
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    for step, groups in {1: [[0, 1, 0, 1], [0, 0, 0, 0]], 2: [[1, 1, 1, 1], [0, 0, 0, 0]]}.items():
        lines = [json.dumps({"input": f"prompt {g}", "output": "x", "score": sc, "step": step})
                 for g, scores in enumerate(groups) for sc in scores]
        (dumps / f"{step}.jsonl").write_text("\n".join(lines) + "\n{\"input\": \"trunc")
    _, entries = report(tmp_path / "run", "--rollout-dir", str(dumps))
    e = entries["zero_variance_groups"]
    assert (e["level"], e["step"], e["value"]) == ("alert", 2, 1.0)
    assert "2/2" in e["message"]


def test_threshold_override(tmp_path):
    write_run(tmp_path / "run", override=_set("actor/grad_norm", 5.0, 12, 12))
    _, entries = report(tmp_path / "run", "--set", "grad_spike_factor=50")
    assert entries["grad_norm_spike"]["level"] == "ok"
    th = rules.override_thresholds(rules.DEFAULT_THRESHOLDS, ["grad_spike_window=4", "kl_loss_warn=0.2"])
    assert (th.grad_spike_window, th.kl_loss_warn) == (4, 0.2)
    with pytest.raises(ValueError, match="unknown threshold"):
        rules.override_thresholds(rules.DEFAULT_THRESHOLDS, ["nope=1"])
    with pytest.raises(ValueError, match="int"):
        rules.override_thresholds(rules.DEFAULT_THRESHOLDS, ["grad_spike_window=1.5"])


def test_default_output_is_health_beside_the_log_folder(tmp_path):
    """The launcher's OUTPUT_DIR/tensorboard, OUTPUT_DIR/swanlog and OUTPUT_DIR itself all report to
    OUTPUT_DIR/health."""
    run = tmp_path / "outputs" / "exp"
    write_run(run / "tensorboard", steps=3)
    swan = write_swanlab_run(run / "swanlog", steps=3)
    event = next((run / "tensorboard").glob("*tfevents*"))
    for logdir in (run / "tensorboard", event, run / "swanlog", run / "swanlog" / swan.run_id,
                   run / "swanlog" / "runs.swanlab", run):
        assert read.default_output_dir(logdir) == run / "health", logdir
    assert health_report.main([str(run / "tensorboard"), "--quiet", "--no-figures"]) == 0
    assert (run / "health" / "health_report.md").is_file() and not (run / "tensorboard" / "health").exists()


def test_figures_written_atomically(tmp_path):
    pytest.importorskip("matplotlib")
    write_run(tmp_path / "run", override=_set("actor/grad_norm", 5.0, 12, 12))
    out = tmp_path / "figs"
    assert health_report.main([str(tmp_path / "run"), "--output-dir", str(out), "--quiet"]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"health_grid.png", "health_report.md", "actor_entropy.png", "actor_pg_clipfrac.png",
            "actor_grad_norm.png", "response_length_mean.png", "reward_train_vs_validation.png"} <= names
    assert not [n for n in names if n.endswith(".tmp")]


# --------------------------------------------------------------------------------------
# Bad input: one-line error, exit 2, nothing written
# --------------------------------------------------------------------------------------
def test_errors_exit_2_with_one_line_and_write_nothing(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "events.out.tfevents.1.host").write_bytes(b"not an event file at all" * 10)
    good = tmp_path / "good"
    write_run(good, steps=3)
    cases = [
        ([str(tmp_path / "missing")], "no such file"),
        ([str(empty)], "no TensorBoard event files"),
        ([str(junk)], str(junk)),
        ([str(good), "--set", "bogus=1"], "unknown threshold"),
        ([str(good), "--run", "nomatch"], "nomatch"),
        ([str(good), "--rollout-dir", str(tmp_path / "nodumps")], "nodumps"),
    ]
    for argv, needle in cases:
        out = tmp_path / "o"
        rc = health_report.main(argv + ["--output-dir", str(out), "--json", str(tmp_path / "x.json")])
        err = capsys.readouterr().err.strip()
        assert rc == 2, argv
        assert err.startswith("error: ") and "\n" not in err and needle in err, err
        assert not out.exists() and not (tmp_path / "x.json").exists()


def test_cli_subprocess_and_list_rules(tmp_path):
    res = subprocess.run([sys.executable, str(REPO / "health_report.py"), str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "error:" in res.stderr
    res = subprocess.run([sys.executable, str(REPO / "health_report.py"), "--list-rules"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0
    for rule in rules.RULES:
        assert f"`{rule.id}`" in res.stdout


def test_every_rule_cites_a_source_and_words_its_thresholds_from_them():
    changed = rules.Thresholds(kl_loss_warn=0.123)
    for rule in rules.RULES:
        assert rule.source and rule.describe(rules.DEFAULT_THRESHOLDS) and rule.check.__name__.startswith("check_")
    assert len({r.id for r in rules.RULES}) == len(rules.RULES)
    kl = next(r for r in rules.RULES if r.id == "kl_high")
    assert "0.123" in kl.describe(changed) and "0.123" not in kl.describe(rules.DEFAULT_THRESHOLDS)


def test_truncation_ok_line_reads_correctly(tmp_path):
    # 0.75 at steps 5 and 9: above 0.2 twice, never 3 in a row
    write_run(tmp_path / "run", override=_both(_set("response_length/clip_ratio", 0.75, 5, 5),
                                               _set("response_length/clip_ratio", 0.75, 9, 9)))
    rc, entries = report(tmp_path / "run")
    e = entries["response_truncation"]
    assert e["level"] == "ok"
    assert e["message"].endswith("max 0.75 > 0.2 at 2 step(s), fewer than 3 in a row: not persistent"), e["message"]
    write_run(tmp_path / "calm")
    _, entries = report(tmp_path / "calm")
    assert entries["response_truncation"]["message"].endswith("max 0.02 <= 0.2")


@pytest.mark.parametrize("ratios,level", [((0.9, 0.7), "warn"), ((0.9,), "warn"), ((0.9, 0.1), "ok")],
                         ids=["every-step-of-2", "one-step", "not-every-step"])
def test_truncation_at_every_step_of_a_short_run_warns(tmp_path, ratios, level):
    """Fewer steps than the 3 the rule asks for, each above 0.2: persistent for the whole run."""
    write_run(tmp_path / "run", steps=len(ratios), override=_set("response_length/clip_ratio", lambda s: ratios[s - 1], 1))
    e = report(tmp_path / "run")[1]["response_truncation"]
    assert e["level"] == level, e
    if level == "warn":
        assert (e["step"], e["value"]) == (1, pytest.approx(0.9)) and f"at each of the {len(ratios)} logged steps" in e["message"]


def test_clipfrac_note_quotes_the_guides_10_25_band(tmp_path):
    write_run(tmp_path / "run")
    _, entries = report(tmp_path / "run")
    assert "5-25 %" not in json.dumps(entries)
    assert entries["clipfrac_low"]["level"] == "info"
    assert "far below the guide's 10-25 % band" in entries["clipfrac_low"]["message"]


def test_mfu_on_a_cpu_run_is_info(tmp_path):
    write_run(tmp_path / "cpu", override=_set("perf/max_memory_allocated_gb", 0.0, 1))
    _, entries = report(tmp_path / "cpu")
    assert entries["mfu"]["level"] == "info"
    assert "not meaningful on a CPU run" in entries["mfu"]["message"]
    write_run(tmp_path / "gpu", override=_set("perf/max_memory_allocated_gb", 30.0, 1))
    _, entries = report(tmp_path / "gpu")
    assert entries["mfu"]["level"] == "ok"



LOSS_SCALE_NOTE = "verl 0.6.0 logs `actor/pg_loss` and `actor/kl_loss` divided by"


@pytest.mark.parametrize("run_name,stack", [("health_cpu_reference", "verl 0.6.0 (perf/max_memory_allocated_gb logged)"),
                                            ("health_cpu_current", "verl 0.9.x (reward.custom_reward_function in ")])
def test_the_loss_scale_note_is_for_verl_060_runs_only(tmp_path, run_name, stack):
    assert health_report.main([str(REPO / "tests" / "data" / run_name / "tensorboard"), "--output-dir", str(tmp_path),
                               "--quiet", "--no-figures"]) == 0
    md = (tmp_path / "health_report.md").read_text()
    assert f"- stack: {stack}" in md
    assert (LOSS_SCALE_NOTE in md) == stack.startswith("verl 0.6.0")


def test_the_stack_from_launch_settings(tmp_path):
    """The launcher's CKPT_DIR/launch_settings.json names the stack; without it or the tags, it is unknown."""
    write_run(tmp_path / "out" / "tensorboard", steps=3)
    assert health_report.main([str(tmp_path / "out" / "tensorboard"), "--quiet", "--no-figures"]) == 0
    md = (tmp_path / "out" / "health" / "health_report.md").read_text()
    assert "- stack: unknown (no launch_settings.json" in md and LOSS_SCALE_NOTE not in md
    settings = tmp_path / "out" / "checkpoints" / "launch_settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"knobs": {"STACK": "reference"}}))
    assert health_report.main([str(tmp_path / "out" / "tensorboard"), "--quiet", "--no-figures"]) == 0
    md = (tmp_path / "out" / "health" / "health_report.md").read_text()
    assert f"- stack: verl 0.6.0 (STACK=reference in {settings})" in md and LOSS_SCALE_NOTE in md

# --------------------------------------------------------------------------------------
# SwanLab local logs: the same rules on the same metrics
# --------------------------------------------------------------------------------------
class SwanLogWriter:
    """Writes a swanlab 0.10.3 local-mode log directory the way its LocalCallbacker does
    (layout checked against a real verl run by tests/e2e/test_swanlab.py): ``runs.swanlab``, a
    SQLite database in WAL mode with tables project / experiment / tag, and each tag's points
    as JSON lines ``{"index", "data", "create_time"}`` in ``<run_id>/logs/<folder>/<n>.log``,
    ``slice_size`` points a file (swanlab: 1000), ``<n>`` the slice's last point number."""

    def __init__(self, swanlog: Path, project: str = "proj", experiment: str = "exp", slice_size: int = 1000):
        import sqlite3

        swanlog.mkdir(parents=True, exist_ok=True)
        self.con = sqlite3.connect(swanlog / "runs.swanlab")
        self.con.execute("PRAGMA journal_mode=wal")
        self.con.executescript(
            "CREATE TABLE IF NOT EXISTS project (id INTEGER PRIMARY KEY, name VARCHAR(100) NOT NULL UNIQUE);"
            "CREATE TABLE IF NOT EXISTS experiment (id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL, "
            "run_id TEXT NOT NULL UNIQUE, name VARCHAR(100) NOT NULL, status INTEGER NOT NULL);"
            "CREATE TABLE IF NOT EXISTS tag (id INTEGER PRIMARY KEY, experiment_id INTEGER NOT NULL, "
            "name VARCHAR(255) NOT NULL, folder VARCHAR(255), type VARCHAR(10) NOT NULL);")
        self.con.execute("INSERT OR IGNORE INTO project (name) VALUES (?)", (project,))
        project_id = self.con.execute("SELECT id FROM project WHERE name = ?", (project,)).fetchone()[0]
        n = self.con.execute("SELECT count(*) FROM experiment").fetchone()[0]
        self.run_id = f"run-20260101_00000{n}-abcd{n:04d}"
        cur = self.con.execute("INSERT INTO experiment (project_id, run_id, name, status) VALUES (?, ?, ?, 0)",
                               (project_id, self.run_id, experiment))
        self.exp_id = cur.lastrowid
        self.con.commit()
        self.logs = swanlog / self.run_id / "logs"
        self.logs.mkdir(parents=True)
        self.slice_size = slice_size
        self.folders, self.counts = {}, {}

    def add_scalar(self, tag, value, step):
        if tag not in self.folders:
            self.folders[tag] = str(len(self.folders) + 1)
            self.counts[tag] = 0
            self.con.execute("INSERT INTO tag (experiment_id, name, folder, type) VALUES (?, ?, ?, 'line')",
                             (self.exp_id, tag, self.folders[tag]))
            self.con.commit()
            (self.logs / self.folders[tag]).mkdir()
        self.counts[tag] += 1
        last = -(-self.counts[tag] // self.slice_size) * self.slice_size
        line = json.dumps({"index": int(step), "data": float(value), "create_time": "2026-01-01T00:00:00+00:00"})
        with open(self.logs / self.folders[tag] / f"{last}.log", "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def flush(self):
        pass

    def close(self, status: int = 1):
        self.con.execute("UPDATE experiment SET status = ? WHERE id = ?", (status, self.exp_id))
        self.con.commit()
        self.con.close()


def write_swanlab_run(swanlog: Path, *, project="proj", experiment="exp", slice_size=1000, **kw):
    w = SwanLogWriter(swanlog, project, experiment, slice_size)
    write_run(swanlog, writer=w, **kw)
    return w


def _levels(entries: dict) -> dict:
    return {k: (e["level"], e["step"], e["value_text"], e["message"]) for k, e in entries.items()}


@pytest.mark.parametrize("override", [None, _set("actor/pg_loss", float("nan"), 7),
                                      _set("actor/grad_norm", 5.0, 12, 12), _set("actor/entropy", 0.001, 9)],
                         ids=["healthy", "nan_loss", "grad_spike", "entropy_collapse"])
def test_swanlab_log_gives_the_same_report_as_tensorboard(tmp_path, override):
    write_run(tmp_path / "tb", override=override)
    write_swanlab_run(tmp_path / "swanlog", override=override, slice_size=4)  # several slices per tag
    _, tb = report(tmp_path / "tb")
    rc, sw = report(tmp_path / "swanlog")
    assert rc == 0
    assert _levels(sw) == _levels(tb)
    tb_points, sw_points = read.scalars_by_step(tmp_path / "tb"), read.scalars_by_step(tmp_path / "swanlog")
    assert {t: sorted(v) for t, v in sw_points.items()} == {t: sorted(v) for t, v in tb_points.items()}
    for tag, points in tb_points.items():  # TensorBoard keeps float32, SwanLab's JSON float64
        got = [sw_points[tag][step] for step in points]
        assert np.allclose(got, list(points.values()), rtol=1e-6, atol=0, equal_nan=True), tag


def test_swanlab_run_header_names_the_experiment_and_state(tmp_path):
    w = write_swanlab_run(tmp_path / "swanlog", project="verl_grpo", experiment="cpu", steps=6, close=False)
    try:
        with open(w.logs / w.folders["actor/pg_loss"] / "1000.log", "a") as fh:
            fh.write('{"index": 7, "da')  # a line still being written
        rc = health_report.main([str(tmp_path / "swanlog"), "--quiet", "--no-figures"])
        md = (tmp_path / "health" / "health_report.md").read_text()
    finally:
        w.close()
    assert rc == 0
    assert "# GRPO health report: verl_grpo/cpu" in md
    assert f"- log: `{tmp_path / 'swanlog' / w.run_id}`; SwanLab experiment `verl_grpo/cpu` (running); " \
           "training steps 1-6 (6 logged)" in md


def test_swanlab_directory_forms_are_detected(tmp_path):
    root = tmp_path / "swanlog"
    w1 = write_swanlab_run(root, experiment="exp1", steps=3)
    write_swanlab_run(root, experiment="exp2", steps=4)
    assert read.swanlab_root(root) == root and read.swanlab_root(root / "runs.swanlab") == root
    assert read.swanlab_root(root / w1.run_id) == root and read.swanlab_root(tmp_path) is None
    assert [r.name for r in read.discover_runs(root)] == ["proj/exp1", "proj/exp2"]
    assert [r.name for r in read.discover_runs(root / "runs.swanlab")] == ["proj/exp1", "proj/exp2"]
    assert [r.name for r in read.discover_runs(root / w1.run_id)] == ["proj/exp1"]
    assert [r.name for r in read.discover_runs(root, "exp2")] == ["proj/exp2"]
    assert [r.name for r in read.discover_runs(root, w1.run_id)] == ["proj/exp1"]
    assert sorted(read.scalars_by_step(root / w1.run_id)["actor/pg_loss"]) == [1, 2, 3]
    with pytest.raises(DataError, match="2 SwanLab experiments"):
        read.scalars_by_step(root)
    out = tmp_path / "all.json"
    assert health_report.main([str(root), "--json", str(out), "--quiet", "--no-figures"]) == 0
    assert json.loads(out.read_text())["runs"] == ["proj/exp1", "proj/exp2"]
    assert (tmp_path / "health" / "proj__exp2" / "health_report.md").is_file()


def test_swanlab_database_opened_immutable_when_read_only_fails(tmp_path, monkeypatch):
    """A read-only folder (a copied run) cannot hold WAL's shared-memory file, so a plain
    read-only open fails there (not reproducible as root): the reader retries as immutable."""
    import sqlite3

    write_swanlab_run(tmp_path / "swanlog", steps=3)
    real_connect, uris = sqlite3.connect, []

    def connect(database, *args, **kwargs):
        uris.append(database)
        if database.endswith("mode=ro"):
            raise sqlite3.OperationalError("unable to open database file")
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(read.sqlite3, "connect", connect)
    assert sorted(read.scalars_by_step(tmp_path / "swanlog")["actor/entropy"]) == [1, 2, 3]
    assert [u.rsplit("?", 1)[1] for u in uris] == ["mode=ro", "immutable=1"]


def test_swanlab_and_neither_kind_errors_are_one_line(tmp_path, capsys):
    neither = tmp_path / "neither"
    (neither / "sub").mkdir(parents=True)
    (neither / "sub" / "notes.txt").write_text("x")
    outer = tmp_path / "outputs"
    write_swanlab_run(outer / "swanlog", steps=2)
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "runs.swanlab").write_bytes(b"not a database" * 100)
    empty = tmp_path / "empty_db"
    SwanLogWriter(empty).close()  # an experiment that logged nothing
    cases = [
        (neither, ["no TensorBoard event files", "no SwanLab runs.swanlab", str(neither), "SWANLAB_MODE=local"]),
        (outer, ["SwanLab logs found in " + str(outer / "swanlog")]),
        (corrupt, [str(corrupt / "runs.swanlab"), "cannot read the SwanLab database"]),
        (empty, [str(empty), "hold no scalars yet"]),
        (tmp_path / "swanlog_missing", ["no such file", "SwanLab log directory"]),
    ]
    for path, needles in cases:
        out = tmp_path / "o"
        rc = health_report.main([str(path), "--output-dir", str(out), "--json", str(tmp_path / "x.json")])
        err = capsys.readouterr().err.strip()
        assert rc == 2, path
        assert err.startswith("error: ") and "\n" not in err, err
        for needle in needles:
            assert needle in err, (needle, err)
        assert not out.exists() and not (tmp_path / "x.json").exists()
    rc = health_report.main([str(outer / "swanlog"), "--run", "nomatch", "--quiet", "--no-figures"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "nomatch" in err and "proj/exp" in err and "\n" not in err
