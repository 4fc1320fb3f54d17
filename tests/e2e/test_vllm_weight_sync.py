"""The CPU run's weight sync into vLLM (cpu_support/verl_cpu_platform.reload_weights) inside
verl 0.9.1, and the check that catches a sync that leaves the tied LM head stale (slow; CI runs it).

Runs tests/helpers/vllm_sync_probe.py in the current stack's environment (.venv-current, made by
``setup.sh --device cpu --stack current``) on SmolLM2-135M; without that environment the test
skips, naming it (conftest.run_in_stack; on CI it fails). The platform's fast checks are
tests/unit/test_cpu_platform.py.
"""

from __future__ import annotations

import json

import pytest

from conftest import REPO
from helpers.current_stack import run_current

MODEL = REPO / "models" / "SmolLM2-135M-Instruct"


@pytest.mark.slow
def test_the_weight_sync_reloads_vllm_and_the_check_catches_a_stale_head():
    """The CPU run's weight sync path (vLLM's reload, then the tied head re-processed) gives
    vLLM the actor's log-probs; the same sync without the head's re-processing is caught by the
    bypass mode's actor/ppo_kl check, which the CI learning test and health_report.py apply. The
    rollout/actor Pearson of token probabilities is not enough alone: most sampled tokens keep a
    probability near 1 under a stale head, so it can stay above 0.99."""
    from grpo_math.health.rules import Thresholds

    if not MODEL.is_dir():
        pytest.skip(f"{MODEL} missing: bash setup.sh --device cpu --stack current")
    proc = run_current(f"import runpy, sys; sys.argv = ['probe', '{MODEL}']; "
                       f"runpy.run_path('{REPO / 'tests' / 'helpers' / 'vllm_sync_probe.py'}', run_name='__main__')")
    assert proc.returncode == 0, proc.stderr[-3000:]
    syncs = {r["sync"]: r for r in map(json.loads, (line for line in proc.stdout.splitlines()
                                                     if line.startswith('{"sync"')))}
    healthy, broken = syncs["healthy"], syncs["skip_lm_head_retie"]
    th = Thresholds()
    assert healthy["pearson"] > 0.999 and healthy["max_abs_logprob_diff"] < 0.01, healthy
    # the stale head: far outside what a healthy sync gives
    assert broken["max_abs_logprob_diff"] > 1.0 and broken["pearson"] < healthy["pearson"], broken
    # the bypass mode's signal, actor/ppo_kl on a response the rollout sampled, tells the two apart
    assert abs(healthy["ppo_kl"]) < th.rollout_ppo_kl_max / 10 < 10 * th.rollout_ppo_kl_max < broken["ppo_kl"], syncs
    print(f"healthy {healthy}, broken {broken}; health_report's alert thresholds {th.rollout_pearson_min}, "
          f"{th.rollout_ppo_kl_max}")
