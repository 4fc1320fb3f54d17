"""Resume (RESUME_MODE=auto -> verl's trainer.resume_mode=auto) on CPU after a run stopped during a
checkpoint save: slow, CI runs it.

The session's quick-start run on the default stack (``cpu_run``, STACK=current) trained GRPO
steps 1-2 and saved ``global_step_2``. A copy of its outputs is made to look like a run that went
on to step 3 and stopped while verl saved it: ``global_step_3`` holds only the model shard (verl
0.9.1 ``v1/trainer_base.py`` writes the shards first and ``latest_checkpointed_iteration.txt``
only after a complete save, so the tracker still says 2), and the stopped run's train.log is
there. A launch with TOTAL_STEPS=3 must then name the partial ``global_step_3``, keep the earlier
log, load the last complete checkpoint, global_step_2, and train only step 3, with the data loader
continuing where it stopped. (The stop is made, not provoked by a kill: a killed launch cost a
whole start-up of CI time, and what it showed of verl's save order is the source above.)

Evidence, most direct first:
- the log says it loaded ``global_step_2`` and set the global step to 2;
- the new run's TensorBoard events hold ``actor/pg_loss`` for step 3 only (not 1, 2, 3);
- ``global_step_3`` is saved and ``latest_checkpointed_iteration.txt`` says 3;
- data position: verl saves the StatefulDataLoader state in ``global_step_N/data.pt``; its
  sampler counter reads 12 prompts after step 3 (2 x 4 before, + 4), not 4 (a restart);
- the prompts rolled out at step 3 (``trainer.rollout_data_dir`` dump) are rows 8-11 of the
  sampler's order, which verl's own ``create_rl_sampler`` (seeded, data.seed) reproduces,
  and none of rows 0-7 that steps 1-2 trained on.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO, launch_output
from grpo_math.launch_guard import checkpoint_problem

pytestmark = pytest.mark.slow

BATCH = 4  # profiles/cpu.sh TRAIN_BATCH_SIZE
MAX_PROMPT = 320  # profiles/cpu.sh MAX_PROMPT_LENGTH
MODEL = REPO / "models" / "SmolLM2-135M-Instruct"
TRAIN = REPO / "data" / "verl" / "math_level1" / "train.parquet"


#: what the stack's verl prints when it resumes from FOLDER at global step 2 (the CPU runs' stack,
#: current: verl 0.9.1 verl/trainer/ppo/v1/trainer_base.py)
RESUME_LINES = {"current": ("Resuming from {folder}, setting global step to 2",)}

#: verl's own sampler order, run by the stack's python on the run's composed data config
#: (create_rl_sampler: verl 0.9.1 verl/trainer/ppo/utils.py)
SAMPLER_ORDER = """
import json, sys
from omegaconf import OmegaConf
from verl.trainer.ppo.utils import create_rl_sampler
data = OmegaConf.load(sys.argv[1]).data
print(json.dumps(list(iter(create_rl_sampler(data, range(int(sys.argv[2])))))))
"""


def launch_command(out):
    return ["bash", str(REPO / "run_qwen2_5_1_5b.sh"), f"trainer.rollout_data_dir={out / 'rollouts'}"]


#: what verl 0.9.1 (``v1/trainer_base.py``) has written of global_step_3 when a save stops after the
#: model shard: that shard (here a copy of step 2's), no optimizer, extra state or data.pt, and the
#: tracker still at 2, since verl writes it only after a complete save
PARTIAL_SAVE = ("actor/model_world_size_1_rank_0.pt",)
#: the console log of the run that stopped, which the relaunch must keep
EARLIER_LOG = "the run that stopped while saving global_step_3\n"


@pytest.fixture(scope="module")
def stopped(cpu_run, tmp_path_factory):
    """(OUTPUT_DIR, environment) of a copy of the quick-start run's outputs as a run that stopped
    while it saved global_step_3 leaves them (PARTIAL_SAVE), with its train.log."""
    assert cpu_run.returncode == 0, cpu_run.log[-3000:]
    assert (cpu_run.ckpt_dir / "global_step_2" / "data.pt").is_file()
    out = tmp_path_factory.mktemp("resume")
    ckpt = out / "checkpoints"
    shutil.copytree(cpu_run.ckpt_dir, ckpt)
    for name in PARTIAL_SAVE:
        (ckpt / "global_step_3" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ckpt / "global_step_2" / name, ckpt / "global_step_3" / name)
    (out / "train.log").write_text(EARLIER_LOG)
    # PREFLIGHT=0: cpu_run's launch ran preflight.py on the same settings (10 s a launch saved)
    env = {**os.environ, "STACK": cpu_run.stack, "DEVICE": "cpu", "OUTPUT_DIR": str(out), "CKPT_DIR": str(ckpt),
           "TOTAL_STEPS": "3", "VAL_BEFORE_TRAIN": "False", "RESUME_MODE": "auto", "SAVE_FREQ": "3", "TEST_FREQ": "-1",
           "PREFLIGHT": "0"}
    return out, env


def test_the_partial_checkpoint_is_told_from_the_complete_one(stopped):
    ckpt = stopped[0] / "checkpoints"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert checkpoint_problem(ckpt / "global_step_3") is not None
    assert checkpoint_problem(ckpt / "global_step_2") is None


@pytest.fixture(scope="module")
def resumed(stopped):
    """The launch again after the stop (RESUME_MODE=auto)."""
    out, env = stopped
    proc = subprocess.run(launch_command(out), env=env, cwd=out, capture_output=True, text=True, timeout=1800)
    log = launch_output(proc, out)[0]
    assert proc.returncode == 0, log[-4000:]
    return out, log, env["STACK"]


def test_relaunch_names_the_partial_checkpoint_and_keeps_the_earlier_log(resumed):
    out, log, stack = resumed
    ckpt = out / "checkpoints"
    assert (f"run_qwen2_5_1_5b.sh: global_step_3 in {ckpt} is not the tracked checkpoint (stopped during the "
            "save?); resuming from global_step_2, the last complete one") in log
    assert "the earlier train.log kept as train.1.log" in log
    assert (out / "train.1.log").read_text() == EARLIER_LOG
    assert RESUME_LINES[stack][0].format(folder=ckpt / "global_step_3") not in log


def test_loads_global_step_2(resumed):
    out, log, stack = resumed
    for line in RESUME_LINES[stack]:
        assert line.format(folder=out / "checkpoints" / "global_step_2") in log
    assert "Training from scratch" not in log


def test_trains_step_3_only(resumed):
    from test_cpu_e2e import scalars

    out, _, _ = resumed
    tags = scalars(out / "tensorboard")
    assert sorted(tags["actor/pg_loss"]) == [3]
    assert sorted(tags["critic/score/mean"]) == [3]


def test_saves_global_step_3(resumed):
    out, _, _ = resumed
    ckpt = out / "checkpoints"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    assert (ckpt / "global_step_3" / "actor" / "model_world_size_1_rank_0.pt").is_file()
    assert checkpoint_problem(ckpt / "global_step_3") is None  # the partial folder, rewritten complete


def test_data_loader_continues(resumed):
    import torch

    out, _, _ = resumed

    def yielded(step: int) -> int:
        state = torch.load(out / "checkpoints" / f"global_step_{step}" / "data.pt", weights_only=False)
        # a loader with worker processes (dataloader_num_workers > 0) nests its own state in a snapshot
        state = state.get("_snapshot", {}).get("_main_snapshot", state)
        return state["_sampler_iter_state"]["samples_yielded"]

    assert yielded(2) == 2 * BATCH
    assert yielded(3) == 3 * BATCH  # a restart from the first batch would read 1 * BATCH


def test_step_3_prompts_are_the_next_rows_of_the_sampler(resumed):
    """The prompts of step 3 are positions 8-11 of verl's seeded sampler order, as the stack's own
    verl draws it from the run's data config (shuffle, seed)."""
    import pyarrow.parquet as pq

    import preflight
    from grpo_math.stacks import stack_python

    out, log, stack = resumed
    # verl's RLHFDataset keeps rows whose templated prompt fits MAX_PROMPT (filter_overlong_prompts);
    # counted as verl counts them (preflight.prompt_length)
    rows = pq.read_table(TRAIN, columns=["prompt"]).column("prompt").to_pylist()
    tok = preflight.load_tokenizer(MODEL)
    lengths = [preflight.prompt_length(tok, messages) for messages in rows]
    kept = [messages[0]["content"] for messages, n in zip(rows, lengths) if n <= MAX_PROMPT]
    assert f"filter dataset len: {len(kept)}" in log
    order = json.loads(subprocess.run(
        [str(stack_python(stack)), "-c", SAMPLER_ORDER, str(out / "hydra" / ".hydra" / "config.yaml"), str(len(kept))],
        capture_output=True, text=True, check=True).stdout)
    dumped = [json.loads(line) for line in (out / "rollouts" / "3.jsonl").read_text().splitlines()]
    assert {d["step"] for d in dumped} == {3}

    def norm(text: str) -> str:
        return re.sub(r"\s+", "", text)  # decoding may drop a space (clean_up_tokenization_spaces)

    inputs = {norm(d["input"]) for d in dumped}
    position = {}
    for i, idx in enumerate(order[: 3 * BATCH]):
        position[norm(kept[idx])] = i
    trained = sorted(i for problem, i in position.items() if any(problem in text for text in inputs))
    assert trained == list(range(2 * BATCH, 3 * BATCH))
