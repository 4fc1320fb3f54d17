"""tools/console_summary.py: the launcher's terminal line per global step, from verl's console."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

# lines as verl 0.9.1's console logger and its progress bar print them inside Ray's prefixes
CONSOLE = """\
(TaskRunnerV1 pid=1) {'actor_rollout_ref': {...}}
(TaskRunnerV1 pid=1) step:0 - val-aux/x/score/mean@1:np.float64(0.0) - val-core/x/acc/mean@1:np.float64(0.25)
(TaskRunnerV1 pid=1) Training Progress:   0%|          | 0/2 [00:00<?, ?it/s]
(pid=2) UserWarning: something
(TaskRunnerV1 pid=1) step:1 - actor/ppo_kl:0.0012 - critic/score/mean:0.125 - response_length/mean:106.25 - \
timing_s/gen:16.04 - timing_s/old_log_prob:0.0 - timing_s/ref:8.5 - timing_s/update_actor:25.1 - timing_s/step:51.2
(TaskRunnerV1 pid=1) step:2 - actor/ppo_kl:2e-3 - critic/score/mean:0.5 - response_length/mean:99 - \
timing_s/gen:15 - timing_s/ref:8 - timing_s/update_actor:24 - timing_s/save_checkpoint:3 - timing_s/step:52 - \
timing_s/testing:10 - val-core/x/acc/mean@1:np.float64(0.5)
"""


def summary(text: str) -> list[str]:
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "console_summary.py"), "train.log"], input=text,
                          capture_output=True, text=True, check=True)
    return proc.stdout.splitlines()


def test_one_line_per_global_step_with_its_phases_reward_and_agreement():
    lines = summary(CONSOLE)
    assert lines[0].startswith("main_ppo: starting") and "train.log" in lines[0]
    assert lines[1] == "validation before training: acc 0.250"
    assert lines[2] == ("global step 1/2: 51.2 s (gen 16.0, ref 8.5, update_actor 25.1); reward 0.125; "
                        "response 106 tokens; actor/rollout KL 1.2e-03")
    # testing is timed after verl's step timer closes: the line's seconds include it
    assert lines[3].startswith("global step 2/2: 62.0 s (gen 15.0, ref 8.0, update_actor 24.0, save_checkpoint 3.0, "
                               "testing 10.0); reward 0.500")
    assert lines[3].endswith("validation acc 0.500") and len(lines) == 4


def test_the_pearson_agreement_is_shown_where_verl_logs_it():
    line = summary("step:1 - training/rollout_actor_probs_pearson_corr:0.99921 - actor/ppo_kl:0.0 - "
                   "timing_s/step:3\n")[1]
    assert line.endswith("rollout/actor prob corr 0.9992")


# the end of main_ppo's console when Hydra refuses an override (hydra 1.3, omegaconf 2.3)
HYDRA_REFUSAL = """\
omegaconf.errors.ConfigAttributeError: Key 'total_epoch' is not in struct
    full_key: trainer.total_epoch
    object_type=dict

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "hydra/_internal/config_loader_impl.py", line 392, in _apply_overrides_to_config
hydra.errors.ConfigCompositionException: Could not override 'trainer.total_epoch'.
To append to your config use +trainer.total_epoch=1
"""


def test_a_refused_hydra_override_is_one_line_and_exit_3():
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "console_summary.py"), "train.log"],
                          input=HYDRA_REFUSAL, capture_output=True, text=True)
    assert proc.returncode == 3
    assert proc.stderr.splitlines() == [
        "main_ppo: Hydra refused an override: Could not override 'trainer.total_epoch' (Key 'total_epoch' is not in "
        "struct); expected a key of verl's config, spelled as there (a new key takes a leading +)"]
    assert subprocess.run([sys.executable, str(REPO / "tools" / "console_summary.py"), "train.log"],
                          input=CONSOLE, capture_output=True, text=True).returncode == 0
