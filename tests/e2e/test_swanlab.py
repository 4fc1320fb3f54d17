"""SwanLab logging end to end on CPU (slow; CI runs it after 'bash setup.sh --with-swanlab').

The session's quick-start run on the default stack (tests/conftest.py ``cpu_run``) logs with
LOGGER=tensorboard,swanlab where swanlab[dashboard] is installed in that stack's environment (the launcher sets
SWANLAB_MODE=local). It writes the local database ``OUTPUT_DIR/swanlog/runs.swanlab`` with the
key metrics at every global step; it saves a checkpoint at its last step, after which verl's
tracker, and with it SwanLab's finish(), used to outlive the run (run_qwen2_5_1_5b.sh,
trainer.remove_previous_ckpt_in_save). ``swanlab watch`` serves that folder (the page and the
experiment list of its HTTP API, ``GET /api/v1/project``, route of swanboard's app.py);
health_report.py reads it.

Without swanlab[dashboard] the tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import REPO, missing_environment, swanlab_installed
from grpo_math.stacks import stack_python

STEPS = 2  # profiles/cpu.sh TOTAL_STEPS
KEY_TAGS = ("critic/score/mean", "actor/ppo_kl", "actor/kl_loss", "actor/pg_loss", "response_length/mean")
PROJECT = "verl_grpo_example_math"  # the launcher's default trainer.project_name
EXPERIMENT = "smollm2_135m_math_cpu"  # profiles/cpu.sh

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def swan_run(cpu_run):
    """(exit status, OUTPUT_DIR, console log, wall seconds) of the session's CPU run."""
    for python in (stack_python(cpu_run.stack), sys.executable):  # the run's, and the one reading it here
        if not swanlab_installed(python):
            missing_environment(f"swanlab[dashboard] is not installed in {python}: run 'bash setup.sh --with-swanlab'")
    if not (cpu_run.output_dir / "swanlog").is_dir():
        pytest.fail(f"{cpu_run.output_dir} has no swanlog/: the CPU run did not log to SwanLab")
    return cpu_run.returncode, cpu_run.output_dir, cpu_run.log, cpu_run.wall_s


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
    print(f"LOGGER=tensorboard,swanlab run: {wall_s:.0f} s")
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
    assert rules["rollout_actor_mismatch"]["level"] != "skipped" and rules["kl_high"]["level"] != "skipped"
    md = (report / "health_report.md").read_text()
    assert f"SwanLab experiment `{PROJECT}/{EXPERIMENT}` (finished); training steps 1-{STEPS} ({STEPS} logged)" in md
