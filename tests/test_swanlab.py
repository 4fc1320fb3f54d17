"""SwanLab logging end to end on CPU (slow; CI runs it after 'bash setup.sh --with-swanlab').

A short launcher run with LOGGER=swanlab (the launcher sets SWANLAB_MODE=local) writes the
local database ``OUTPUT_DIR/swanlog/runs.swanlab`` with the key metrics at every global
step; ``swanlab watch`` serves that folder (the page and the experiment list of its HTTP
API, ``GET /api/v1/project``, route of swanboard's app.py); health_report.py reads it.

Without swanlab[dashboard] the tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO

STEPS = 2
KEY_TAGS = ("critic/score/mean", "actor/entropy", "actor/kl_loss", "actor/pg_loss", "response_length/mean")
PROJECT = "verl_grpo_example_math"  # the launcher's default trainer.project_name
EXPERIMENT = "smollm2_135m_math_cpu"  # profiles/cpu.sh
#: A tiny run: 2 global steps of 2 prompts x 2 responses of at most 32 tokens, validation on
#: the profile's 8 problems at the last step only, a checkpoint (weights only) at the last step:
#: after a last-step save verl's tracker, and with it SwanLab's finish(), used to outlive the run
#: (run_qwen2_5_1_5b.sh, trainer.remove_previous_ckpt_in_save).
RUN_KNOBS = {
    "DEVICE": "cpu", "LOGGER": "swanlab", "TOTAL_STEPS": str(STEPS), "TRAIN_BATCH_SIZE": "2",
    "PPO_MINI_BATCH_SIZE": "2", "N_SAMPLES": "2", "MICRO_BATCH_PER_DEVICE": "4", "MAX_RESPONSE_LENGTH": "32",
    "VAL_BEFORE_TRAIN": "False", "TEST_FREQ": str(STEPS), "SAVE_FREQ": str(STEPS),
}
OVERRIDES = ("actor_rollout_ref.actor.checkpoint.save_contents=[model]",)
#: One verl training run at a time on a shared machine (the lock the developers use).
TRAIN_LOCK = "/tmp/verl_train.lock"
RUN_TIMEOUT_S = 1800  # the run, waiting for the lock included

pytestmark = pytest.mark.slow


def _require_swanlab() -> None:
    missing = [m for m in ("swanlab", "swanboard") if importlib.util.find_spec(m) is None]
    if missing:
        reason = (f"swanlab[dashboard] is not installed ({', '.join(missing)} missing): "
                  "run 'bash setup.sh --with-swanlab'")
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def swan_run(tmp_path_factory):
    """(exit status, OUTPUT_DIR, console log, wall seconds) of the tiny LOGGER=swanlab run.

    Set ``RECIPE_SWANLAB_RUN_DIR`` to the OUTPUT_DIR of an existing LOGGER=swanlab run with
    these knobs to reuse it (development).
    """
    _require_swanlab()
    reuse = os.environ.get("RECIPE_SWANLAB_RUN_DIR")
    if reuse:
        out = Path(reuse)
        return 0, out, (out / "train.log").read_text(errors="replace"), 0.0
    for needed in ("models/SmolLM2-135M-Instruct/config.json", "data/verl/math_level1/train.parquet"):
        if not (REPO / needed).exists():
            pytest.fail(f"{needed} missing: run 'bash setup.sh --device cpu' first")
    out = tmp_path_factory.mktemp("swan_run")
    env = {**os.environ, **RUN_KNOBS, "OUTPUT_DIR": str(out)}
    for inherited in ("SWANLAB_LOG_DIR", "SWANLAB_MODE", "TENSORBOARD_DIR", "LOG_FILE", "CKPT_DIR"):
        env.pop(inherited, None)  # the launcher derives them from OUTPUT_DIR
    cmd = ["bash", str(REPO / "run_qwen2_5_1_5b.sh"), *OVERRIDES]
    if shutil.which("flock"):
        cmd = ["flock", TRAIN_LOCK, *cmd]
    start = time.monotonic()
    # own session: on a timeout the launcher, main_ppo and its Ray processes all end together
    proc = subprocess.Popen(cmd, env=env, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 30)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait_s)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        tail = (out / "train.log").read_text(errors="replace")[-2000:] if (out / "train.log").is_file() else ""
        pytest.fail(f"LOGGER=swanlab run still running after {RUN_TIMEOUT_S} s (killed); log tail:\n{tail}")
    return proc.returncode, out, log, time.monotonic() - start


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 10.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.status, resp.read()


def test_run_writes_the_local_database_with_every_step(swan_run):
    rc, out, log, wall_s = swan_run
    assert rc == 0, log[-4000:]
    print(f"LOGGER=swanlab run: {wall_s:.0f} s")
    assert "SwanLabLocalCallbacker" not in log, "swanlab's local mode failed (is swanboard installed?)"
    swanlog = out / "swanlog"
    assert (swanlog / "runs.swanlab").is_file()
    from health_report import scalars_by_step

    tags = scalars_by_step(swanlog)
    for tag in KEY_TAGS:
        assert sorted(tags.get(tag, {})) == list(range(1, STEPS + 1)), f"{tag}: {tags.get(tag)}"
    assert STEPS in tags["val-core/DigitalLearningGmbH/MATH-lighteval/acc/mean@1"]


def test_swanlab_watch_serves_the_run(swan_run):
    rc, out, log, _ = swan_run
    assert rc == 0, log[-4000:]
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "swanlab", "watch", str(out / "swanlog"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline, status, page = time.monotonic() + 60, None, b""
        while time.monotonic() < deadline and server.poll() is None:
            try:
                status, page = _get(base + "/")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.5)
        assert status == 200, f"swanlab watch did not answer on {base} within 60 s (exit {server.poll()})"
        assert b"<html" in page.lower()
        status, body = _get(base + "/api/v1/project")
        doc = json.loads(body)
        print(f"GET /api/v1/project: HTTP {status}, {json.dumps(doc)[:400]}")
        assert status == 200 and doc["code"] == 0, doc
        assert doc["data"]["name"] == PROJECT
        [exp] = [e for e in doc["data"]["experiments"] if e["name"] == EXPERIMENT]
        assert exp["status"] == 1, exp  # finished
        assert exp["run_id"] in {p.name for p in (out / "swanlog").glob("run-*")}
        tag = urllib.parse.quote("critic/score/mean", safe="")
        status, body = _get(f"{base}/api/v1/experiment/{exp['id']}/tag/{tag}")
        points = json.loads(body)["data"]["list"]
        assert status == 200 and sorted(p["index"] for p in points) == list(range(1, STEPS + 1)), points
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def test_health_report_reads_the_swanlog_dir(swan_run, tmp_path):
    rc, out, log, _ = swan_run
    assert rc == 0, log[-4000:]
    report = tmp_path / "health"
    proc = subprocess.run(
        [sys.executable, str(REPO / "health_report.py"), str(out / "swanlog"), "--output-dir", str(report),
         "--json", str(tmp_path / "health.json"), "--no-figures"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    print("\n".join(proc.stdout.splitlines()[:8]))
    doc = json.loads((tmp_path / "health.json").read_text())
    assert doc["runs"] == [f"{PROJECT}/{EXPERIMENT}"]
    rules = {r["id"]: r for r in doc["rules"]}
    assert rules["pg_loss_nan"]["level"] == "ok" and rules["nonfinite_metrics"]["level"] == "ok"
    assert rules["entropy_collapse"]["level"] != "skipped" and rules["kl_high"]["level"] != "skipped"
    md = (report / "health_report.md").read_text()
    assert f"SwanLab experiment `{PROJECT}/{EXPERIMENT}` (finished); training steps 1-{STEPS} ({STEPS} logged)" in md
