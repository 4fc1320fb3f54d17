"""verl's replay buffer, polling the rollout every 50 ms instead of every 2 s.

verl 0.9.1's trainer waits for a step's rollout (and a validation pass) in ``ReplayBuffer.sample``
(``verl/trainer/ppo/v1/replay_buffer.py``), sleeping ``poll_interval`` (2.0 s, not in its config)
between checks: up to 2 s idle, a few per cent of a 40 s CPU step. The CPU profile names this class
through verl's ``trainer.v1.sampler.custom_sampler.{path,name}``.
"""

from __future__ import annotations

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

POLL_INTERVAL_S = 0.05


class QuickPollReplayBuffer(ReplayBuffer):
    def __init__(self, *args, poll_interval: float = POLL_INTERVAL_S, **kwargs):
        super().__init__(*args, poll_interval=poll_interval, **kwargs)
