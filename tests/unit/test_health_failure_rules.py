"""The health rules for a weight sync that did not happen, a validation that collapses after the
first update, a reward that pays nothing from the start, a response length that falls steadily,
memory that grows step after step and empty responses: each fires at the step where its failure is planted in a synthetic verl-like run, and
stays silent on every recorded healthy CPU run in tests/data/health_* (both stacks' metric
names)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import health_report
from grpo_math.health import read, rules
from conftest import REPO
from test_health_report import _both, _set, fired, report, write_run

PEARSON, PROBS_DIFF = read.TAG_ROLLOUT_PEARSON, read.TAG_ROLLOUT_PROBS_DIFF
NEW_RULES = ("rollout_actor_mismatch", "val_drop_after_first_update", "zero_reward_from_start",
             "response_length_decline", "memory_growth", "empty_responses")
RECORDED = sorted(p for p in (REPO / "tests" / "data").glob("health_*") if p.is_dir())


# --------------------------------------------------------------------------------------
# rollout_actor_mismatch
# --------------------------------------------------------------------------------------
def _agreement(tags, broken_from=None):
    """Healthy rollout/actor agreement (bf16-like: Pearson 0.995-0.999, probability difference
    ~0.005); from ``broken_from`` on, the values of the sync that skipped the tied lm_head
    (Pearson -0.03)."""
    rng = random.Random(1)

    def f(s, m):
        broken = broken_from is not None and s >= broken_from
        values = {PEARSON: -0.03 if broken else rng.uniform(0.995, 0.999),
                  PROBS_DIFF: 0.31 if broken else rng.uniform(0.004, 0.006)}
        m.update({t: values[t] for t in tags})
    return f


@pytest.mark.parametrize("tags", [(PEARSON, PROBS_DIFF), (PEARSON,)], ids=["with-probs-diff", "pearson-only"])
def test_rollout_actor_mismatch_fires_at_the_broken_sync(tmp_path, tags):
    write_run(tmp_path / "run", override=_agreement(tags, broken_from=8))
    _, entries = report(tmp_path / "run")
    e = entries["rollout_actor_mismatch"]
    assert (e["level"], e["step"]) == ("alert", 8), e
    assert "the rollout is not generating with the actor's weights" in e["message"]
    assert e["tag"] == PEARSON
    if PROBS_DIFF in tags:  # quoted, not judged: a garbage rollout's tokens are unlikely for both sides
        assert f"{PROBS_DIFF} 0.31" in e["message"]
    assert set(fired(entries)) == {"rollout_actor_mismatch"}

    write_run(tmp_path / "ok", override=_agreement(tags))
    _, entries = report(tmp_path / "ok")
    assert entries["rollout_actor_mismatch"]["level"] == "ok", entries["rollout_actor_mismatch"]


def test_rollout_actor_mismatch_at_its_threshold(tmp_path):
    """Just past the threshold fires, just inside it does not."""
    th = rules.DEFAULT_THRESHOLDS
    bad, good = th.rollout_pearson_min - 0.01, th.rollout_pearson_min + 0.01
    write_run(tmp_path / "run", override=_set(PEARSON, lambda s: bad if s >= 5 else good, 1))
    _, entries = report(tmp_path / "run")
    assert (entries["rollout_actor_mismatch"]["level"], entries["rollout_actor_mismatch"]["step"]) == \
        ("alert", 5), entries["rollout_actor_mismatch"]


def test_without_pearson_the_updates_ppo_kl_judges_the_sync(tmp_path):
    """A run without the old-log-prob pass (bypass mode) logs no Pearson: the on-policy update's
    actor/ppo_kl against the rollout's log-probs fires past its threshold, and a healthy one is ok."""
    th = rules.DEFAULT_THRESHOLDS
    write_run(tmp_path / "run", override=_set(read.TAG_PPO_KL, lambda s: 2.3 if s >= 6 else 2e-3, 1), drop=(PEARSON,))
    _, entries = report(tmp_path / "run")
    e = entries["rollout_actor_mismatch"]
    assert (e["level"], e["step"], e["tag"]) == ("alert", 6, read.TAG_PPO_KL), e
    write_run(tmp_path / "edge", override=_set(read.TAG_PPO_KL, th.rollout_ppo_kl_max * 0.9, 1), drop=(PEARSON,))
    _, entries = report(tmp_path / "edge")
    assert entries["rollout_actor_mismatch"]["level"] == "ok", entries["rollout_actor_mismatch"]
    assert read.TAG_PPO_KL in entries["rollout_actor_mismatch"]["message"]


def test_rollout_actor_mismatch_skipped_without_the_metrics(tmp_path):
    write_run(tmp_path / "run", override=_agreement((PROBS_DIFF,), broken_from=3), drop=(read.TAG_PPO_KL,))
    _, entries = report(tmp_path / "run")
    assert entries["rollout_actor_mismatch"]["level"] == "skipped"
    assert PEARSON in entries["rollout_actor_mismatch"]["message"]


# --------------------------------------------------------------------------------------
# val_drop_after_first_update
# --------------------------------------------------------------------------------------
def test_val_drop_after_first_update_fires_at_the_first_validation(tmp_path):
    write_run(tmp_path / "run", val=lambda s: {0: 0.45, 5: 0.20, 10: 0.22, 15: 0.24, 20: 0.25}[s])
    _, entries = report(tmp_path / "run")
    e = entries["val_drop_after_first_update"]
    assert (e["level"], e["step"]) == ("warn", 5) and e["value"] == pytest.approx(0.2), e
    assert "0.45 at step 0" in e["message"]
    assert set(fired(entries)) <= {"val_drop_after_first_update", "val_regression", "reward_up_val_down"}


@pytest.mark.parametrize("values,why", [
    ({0: 0.45, 5: 0.40, 10: 0.42, 15: 0.44, 20: 0.45}, "a drop of 0.05 is above half the step-0 value"),
    ({0: 0.06, 5: 0.02, 10: 0.03, 15: 0.05, 20: 0.06}, "a drop of 0.04 is below the absolute floor 0.05"),
    ({0: 0.30, 5: 0.35, 10: 0.02, 15: 0.03, 20: 0.05}, "the later collapse is not right after the first update"),
], ids=["small-drop", "tiny-values", "later-drop"])
def test_val_drop_after_first_update_silent(tmp_path, values, why):
    write_run(tmp_path / "run", val=lambda s: values[s])
    _, entries = report(tmp_path / "run")
    assert entries["val_drop_after_first_update"]["level"] == "ok", why


def test_val_drop_after_first_update_needs_step_0(tmp_path):
    """trainer.val_before_train=False: no step-0 validation, nothing to compare with."""
    w = write_run(tmp_path / "run", val=None, close=False)
    for step, value in ((5, 0.0), (10, 0.3)):
        w.add_scalar(read.DEFAULT_VAL_TAG, value, step)
    w.close()
    _, entries = report(tmp_path / "run")
    e = entries["val_drop_after_first_update"]
    assert e["level"] == "ok" and "no validation at step 0" in e["message"], e


# --------------------------------------------------------------------------------------
# zero_reward_from_start
# --------------------------------------------------------------------------------------
ZERO = _both(_set("critic/score/mean", 0.0, 1), _set("critic/score/max", 0.0, 1), _set("critic/score/min", 0.0, 1),
             _set("critic/advantages/max", 0.0, 1), _set("critic/advantages/min", 0.0, 1),
             _set("actor/grad_norm", 0.0, 1))
ZERO_ALSO = {"zero_reward_from_start", "no_positive_reward", "no_learning_signal", "val_train_gap"}


def _launcher_layout(root: Path, config_yaml: str) -> Path:
    """OUTPUT_DIR with tensorboard/ and Hydra's hydra/.hydra/config.yaml, as the launcher lays it out."""
    (root / "hydra" / ".hydra").mkdir(parents=True)
    (root / "hydra" / ".hydra" / "config.yaml").write_text(config_yaml)
    return root / "tensorboard"


REFERENCE_CONFIG = """\
custom_reward_function:
  path: /repo/new_math_reward.py
  name: compute_score
trainer:
  experiment_name: qwen2_5_1_5b_math
"""
# verl 0.9.1 composes the old top-level key too, but loads reward.custom_reward_function
CURRENT_CONFIG = """\
custom_reward_function:
  path: null
  name: compute_score
reward:
  custom_reward_function:
    path: /repo/new_math_reward.py
    name: compute_format_score
trainer:
  experiment_name: smollm2_current
"""


@pytest.mark.parametrize("config,named", [
    (REFERENCE_CONFIG, "/repo/new_math_reward.py:compute_score (custom_reward_function in "),
    (CURRENT_CONFIG, "/repo/new_math_reward.py:compute_format_score (reward.custom_reward_function in "),
    (None, "the configured reward"),
], ids=["verl-0.6.0", "verl-0.9.1", "no-config"])
def test_zero_reward_from_start_names_the_loaded_reward(tmp_path, config, named):
    logdir = _launcher_layout(tmp_path / "out", config) if config else tmp_path / "out" / "tensorboard"
    write_run(logdir, override=ZERO, val=lambda s: 0.0)
    _, entries = report(logdir)
    e = entries["zero_reward_from_start"]
    assert (e["level"], e["step"], e["value"]) == ("alert", 3, 0.0), e
    assert named in e["message"], e["message"]
    assert "first 3 steps (1, 2, 3)" in e["message"]
    assert set(fired(entries)) <= ZERO_ALSO


def test_zero_reward_from_start_silent_when_a_response_is_paid_early(tmp_path):
    late = _both(_set("critic/score/mean", 0.0, 1, 2), _set("critic/score/max", 0.0, 1, 2))
    write_run(tmp_path / "run", override=late)
    _, entries = report(tmp_path / "run")
    assert entries["zero_reward_from_start"]["level"] == "ok"
    write_run(tmp_path / "short", steps=2, override=ZERO, val=lambda s: 0.0)  # the quick start's 2 steps
    _, entries = report(tmp_path / "short")
    assert entries["zero_reward_from_start"]["level"] == "ok"
    assert "not judged" in entries["zero_reward_from_start"]["message"]


def test_updates_per_step_come_from_the_config(tmp_path):
    """ppo_epochs x train_batch_size / ppo_mini_batch_size (rounded up), named in the report."""
    batches = "data:\n  train_batch_size: 8\nactor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: 3\n    ppo_epochs: 2\n"
    logdir = _launcher_layout(tmp_path / "out", CURRENT_CONFIG + batches)
    write_run(logdir)
    assert health_report.main([str(logdir), "--quiet", "--no-figures"]) == 0
    text = (tmp_path / "out" / "health" / "health_report.md").read_text()
    assert "- policy updates per step: 6 (ppo_epochs x train_batch_size / ppo_mini_batch_size in " in text
    cfg = tmp_path / "config.yaml"
    cfg.write_text(REFERENCE_CONFIG)
    assert read.read_run_config(cfg).updates_per_step is None


def test_config_option_and_bad_config(tmp_path, capsys):
    write_run(tmp_path / "run", override=ZERO, val=lambda s: 0.0)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(REFERENCE_CONFIG)
    _, entries = report(tmp_path / "run", "--config", str(cfg))
    assert "new_math_reward.py:compute_score" in entries["zero_reward_from_start"]["message"]
    for bad, needle in ((tmp_path / "missing.yaml", "no such file"), (tmp_path / "list.yaml", "not a Hydra config"),
                        (tmp_path / "broken.yaml", "cannot read")):
        if bad.name == "list.yaml":
            bad.write_text("- a\n- b\n")
        elif bad.name == "broken.yaml":
            bad.write_text("a: [unclosed\n")
        out = tmp_path / "o"
        rc = health_report.main([str(tmp_path / "run"), "--config", str(bad), "--output-dir", str(out), "--quiet"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and err.startswith("error: ") and "\n" not in err and needle in err and str(bad) in err, err
        assert not out.exists()


# --------------------------------------------------------------------------------------
# response_length_decline
# --------------------------------------------------------------------------------------
def _length(fn):
    rng = random.Random(3)
    return _set("response_length/mean", lambda s: fn(s) + rng.uniform(-2, 2), 1)


def test_response_length_decline_fires_when_the_fall_passes_15_percent(tmp_path):
    """-5 tokens per step from 400 (noise +-2): a 10-step window falls ~45 tokens, 11-13 % of its
    start, under 15 %; the first 20-step window, ending at step 20, falls ~95 of ~400 (24 %)."""
    write_run(tmp_path / "run", steps=30, override=_length(lambda s: 400 - 5 * (s - 1)))
    _, entries = report(tmp_path / "run")
    e = entries["response_length_decline"]
    assert (e["level"], e["step"]) == ("warn", 20), e
    assert "steps 1-20" in e["message"] and "simpleRL" not in e["message"]
    assert set(fired(entries)) == {"response_length_decline"}


@pytest.mark.parametrize("fn,why", [
    (lambda s: 400 if s < 15 else 250, "a step change is a sudden fall, not a steady one"),
    (lambda s: 400 - 2 * (s - 1), "-2 tokens per step: 10 % over 20 steps"),
    (lambda s: 400 + 30 * ((-1) ** s), "noise only"),
    (lambda s: 300 + 5 * s, "rising"),
], ids=["step", "slow", "noise", "rising"])
def test_response_length_decline_silent(tmp_path, fn, why):
    write_run(tmp_path / "run", steps=30, override=_length(fn))
    _, entries = report(tmp_path / "run")
    assert entries["response_length_decline"]["level"] == "ok", (why, entries["response_length_decline"])


def test_response_length_decline_over_a_long_run(tmp_path):
    """A slow fall over 200 steps (-0.6 tokens/step from 500, noise +-15): no 10- or 20-step
    window falls 15 %, a longer window does."""
    rng = random.Random(5)
    write_run(tmp_path / "run", steps=200, val=None,
              override=_set("response_length/mean", lambda s: 500 - 0.6 * s + rng.uniform(-15, 15), 1))
    _, entries = report(tmp_path / "run")
    e = entries["response_length_decline"]
    assert e["level"] == "warn" and 80 <= e["step"] <= 200, e
    assert int(e["message"].split("steps ")[1].split("-")[0]) < e["step"] - 20


# --------------------------------------------------------------------------------------
# memory_growth
# --------------------------------------------------------------------------------------
def _memory(device, host=lambda s: 20.0, prefix=""):
    """perf/max_memory_reserved_gb (a running peak, as verl logs it) = device(step) and
    perf/cpu_memory_used_gb = host(step), under verl 0.9.1's actor/ prefix when given."""
    rng = random.Random(7)

    def f(s, m):
        m[prefix + read.TAG_MAX_MEM_RESERVED] = max(device(t) for t in range(1, s + 1))
        m[prefix + read.TAG_CPU_MEM] = host(s) + rng.uniform(-0.5, 0.5)
    return f


@pytest.mark.parametrize("prefix", ["", "actor/"], ids=["verl-0.6.0", "verl-0.9.1"])
def test_memory_growth_fires_on_a_steady_leak(tmp_path, prefix):
    """30 GB after 2 warm-up steps, then 0.24 GB more each step (vllm-ascend#9563's size)."""
    write_run(tmp_path / "run", override=_memory(lambda s: 25.0 if s <= 2 else 30 + 0.24 * (s - 3), prefix=prefix))
    _, entries = report(tmp_path / "run")
    e = entries["memory_growth"]
    assert (e["level"], e["step"], e["tag"]) == ("warn", 20, prefix + read.TAG_MAX_MEM_RESERVED), e
    assert "device memory grew steadily over steps 3-20: 30 -> 34.08 GB" in e["message"], e["message"]
    assert "+0.24 GB per step" in e["message"] and "vllm-ascend#9563" in e["message"]
    assert set(fired(entries)) == {"memory_growth"}


def test_memory_growth_fires_on_the_host(tmp_path):
    write_run(tmp_path / "run", override=_memory(lambda s: 30.0, host=lambda s: 20 + 0.3 * s))
    e = report(tmp_path / "run")[1]["memory_growth"]
    assert (e["level"], e["tag"]) == ("warn", read.TAG_CPU_MEM) and e["message"].startswith("host memory"), e


@pytest.mark.parametrize("device,why", [
    (lambda s: 10.0 if s <= 2 else 30.0, "a peak set in the warm-up steps, flat after"),
    (lambda s: 30.0 if s < 10 else 33.0, "one jump is not a steady rise (tau 0.5)"),
    (lambda s: 30 + 0.05 * s, "steady but 0.85 GB over the run, under 1 GB"),
], ids=["warm-up", "one-jump", "small"])
def test_memory_growth_silent(tmp_path, device, why):
    write_run(tmp_path / "run", override=_memory(device))
    e = report(tmp_path / "run")[1]["memory_growth"]
    assert e["level"] == "ok" and "no steady growth" in e["message"], (why, e)


def test_memory_growth_needs_8_steps_after_the_warm_up(tmp_path):
    write_run(tmp_path / "run", steps=9, override=_memory(lambda s: 30 + s))
    e = report(tmp_path / "run")[1]["memory_growth"]
    assert e["level"] == "ok" and "no trend check yet" in e["message"], e
    write_run(tmp_path / "run10", steps=10, override=_memory(lambda s: 30 + s))
    assert report(tmp_path / "run10")[1]["memory_growth"]["level"] == "warn"


# --------------------------------------------------------------------------------------
# empty_responses
# --------------------------------------------------------------------------------------
def _shortest(fn):
    return _set(read.TAG_RESP_MIN, fn, 1)


def test_empty_responses_fire_at_the_first_empty_step(tmp_path):
    """Steps 7 and 12 had a response of 0 tokens; verl 0.9.1's aborted share and the rollout
    dumps are quoted."""
    write_run(tmp_path / "run", override=_both(_shortest(lambda s: 0 if s in (7, 12) else 5),
                                               _set(read.TAG_ABORTED, lambda s: 0.125 if s in (7, 12) else 0.0, 1)))
    dumps = tmp_path / "rollouts"
    dumps.mkdir()
    (dumps / "7.jsonl").write_text("".join(json.dumps({"input": "p", "output": out, "score": score, "step": 7}) + "\n"
                                           for out, score in (("", 0.0), ("", 0.0), ("x", 1.0), ("y", 0.0))))
    _, entries = report(tmp_path / "run", "--rollout-dir", str(dumps))
    e = entries["empty_responses"]
    assert (e["level"], e["step"], e["value"]) == ("warn", 7, 0.0), e
    assert e["message"].startswith("2 step(s) had an empty response (response_length/min 0; 12.5 % of step 7 "
                                   "(response/aborted_ratio); 2 empty outputs in the rollout dumps)"), e["message"]
    assert "verl#6310" in e["message"] and "group's advantages" in e["message"]
    assert set(fired(entries)) == {"empty_responses"}


@pytest.mark.parametrize("fn,why", [
    (lambda s: 5.0, "every response has tokens"),
    (lambda s: 1.0, "one token (an end-of-sequence token alone) is not empty"),
], ids=["healthy", "one-token"])
def test_empty_responses_silent(tmp_path, fn, why):
    write_run(tmp_path / "run", override=_shortest(fn))
    e = report(tmp_path / "run")[1]["empty_responses"]
    assert e["level"] == "ok", (why, e)


def test_empty_responses_on_the_last_step_only(tmp_path):
    write_run(tmp_path / "run", steps=3, override=_shortest(lambda s: 0.0 if s == 3 else 2.0))
    e = report(tmp_path / "run")[1]["empty_responses"]
    assert (e["level"], e["step"]) == ("warn", 3) and e["message"].startswith("1 step(s) had an empty response"), e


# --------------------------------------------------------------------------------------
# Silent on the recorded healthy CPU runs
# --------------------------------------------------------------------------------------
def test_recorded_runs_exist():
    assert RECORDED, "tests/data/health_* holds the recorded healthy CPU runs"


@pytest.mark.parametrize("run_dir", RECORDED, ids=[p.name for p in RECORDED])
def test_new_rules_silent_on_recorded_healthy_runs(run_dir, tmp_path):
    out = tmp_path / "h.json"
    assert health_report.main([str(run_dir / "tensorboard"), "--json", str(out), "--output-dir", str(tmp_path / "health"),
                    "--quiet", "--no-figures"]) == 0
    entries = {e["id"]: e for e in json.loads(out.read_text())["rules"]}
    for rule in NEW_RULES:
        assert entries[rule]["level"] in ("ok", "skipped"), entries[rule]
    if any(t in read.scalars_by_step(run_dir / "tensorboard") for t in read.ROLLOUT_TAGS):
        assert entries["rollout_actor_mismatch"]["level"] == "ok"


@pytest.mark.parametrize("run_dir", RECORDED, ids=[p.name for p in RECORDED])
def test_recorded_runs_config_names_the_experiment_and_reward(run_dir):
    """Hydra's config.yaml beside the log, as the launcher lays it out, is found and read."""
    run = read.discover_runs(run_dir / "tensorboard")[0]
    cfg = read.read_run_config(read.find_run_config(run))
    assert cfg.experiment and cfg.reward_file.endswith("new_math_reward.py")
    assert cfg.reward_name in ("compute_score", "compute_format_score")
    assert read.experiment_name(run, cfg)[0] == cfg.experiment
