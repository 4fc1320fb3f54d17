"""verl's replay buffer, polling the rollout every 50 ms instead of every 2 s.

verl 0.9.1's trainer waits for a step's rollout (and for a validation pass) in
``ReplayBuffer.sample`` (``verl/trainer/ppo/v1/replay_buffer.py``), sleeping ``poll_interval``
(2.0 s, which its config does not expose) between checks: a rollout that ends just after a check
idles up to 2 s. On a CPU step of about 40 s that is a few per cent. The CPU profile names this
class through verl's own extension point, ``trainer.v1.sampler.custom_sampler.{path,name}``.
"""

from __future__ import annotations

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

POLL_INTERVAL_S = 0.05


class QuickPollReplayBuffer(ReplayBuffer):
    def __init__(self, *args, poll_interval: float = POLL_INTERVAL_S, **kwargs):
        super().__init__(*args, poll_interval=poll_interval, **kwargs)
