"""PER wiring with the real buffer: DQN TD errors -> update_priority -> sampling follows them.

A zero Q network makes every TD error exactly ``|r|`` on terminal transitions, so the expected
priorities, sampling probabilities and importance weights can be written from the definitions
(Schaul et al. 2015, arXiv 1511.05952, sec. 3.3 and 3.4).
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict

from tdrl.data import PrioritizedReplayBuffer
from tdrl.modules import QValueActor
from tdrl.objectives import DQNLoss, update_priority

N, OBS, ACTIONS, ALPHA, BETA, EPS = 8, 3, 2, 0.7, 0.5, 1e-6
REWARD = torch.arange(N, dtype=torch.float32)  # |td_error| of item i is i


def zero_q_loss() -> DQNLoss:
    net = torch.nn.Linear(OBS, ACTIONS)
    torch.nn.init.zeros_(net.weight)
    torch.nn.init.zeros_(net.bias)
    return DQNLoss(QValueActor(net), double_dqn=True)


def filled_buffer() -> PrioritizedReplayBuffer:
    buffer = PrioritizedReplayBuffer(N, alpha=ALPHA, beta=BETA, eps=EPS, generator=0)
    terminated = torch.ones(N, 1, dtype=torch.bool)
    buffer.extend(
        TensorDict(
            {
                "observation": torch.randn(N, OBS),
                "action": torch.randint(ACTIONS, (N,)),
                ("next", "observation"): torch.randn(N, OBS),
                ("next", "reward"): REWARD.unsqueeze(-1),
                ("next", "terminated"): terminated,
                ("next", "truncated"): ~terminated,
                ("next", "done"): terminated,
            },
            batch_size=[N],
        )
    )
    return buffer


def test_td_errors_become_priorities_and_sampling_follows_them():
    buffer, loss = filled_buffer(), zero_q_loss()
    # New items share the initial max priority: uniform sampling, unit weights.
    batch = buffer.sample(4096)
    assert torch.allclose(batch["priority_weight"], torch.ones(4096))
    counts = np.bincount(batch["index"].numpy(), minlength=N)
    assert counts.min() > 4096 / N * 0.8

    batch = buffer.sample(64)
    out = loss(batch)
    torch.testing.assert_close(out["td_error"], batch["next", "reward"].squeeze(-1))
    update_priority(buffer, batch, out)
    seen = np.unique(batch["index"].numpy())
    assert len(seen) == N  # 64 uniform draws over 8 items: every item was updated

    # Stored priorities are (|td| + eps) ** alpha.
    expected_p = (REWARD.double() + EPS) ** ALPHA
    stored = torch.as_tensor(buffer.state_dict()["priority"][:N], dtype=torch.float64)
    torch.testing.assert_close(stored, expected_p, rtol=1e-6, atol=1e-12)

    # Sampling frequencies follow P(i) = p_i / sum_j p_j: item 0 (td 0) is almost never drawn.
    draws = 40_000
    batch = buffer.sample(draws)
    freq = np.bincount(batch["index"].numpy(), minlength=N) / draws
    prob = (expected_p / expected_p.sum()).numpy()
    np.testing.assert_allclose(freq, prob, atol=0.01)
    assert freq[0] < 1e-3 and freq[N - 1] > freq[1]

    # Importance weights: (N P(i))^-beta normalised by the largest, i.e. (p_i / p_min)^-beta.
    weight = batch["priority_weight"].double()
    expected_w = (expected_p[batch["index"]] / expected_p.min()) ** -BETA
    torch.testing.assert_close(weight, expected_w, rtol=1e-5, atol=1e-8)


def test_weights_scale_the_loss_and_new_items_get_the_max_priority():
    buffer, loss = filled_buffer(), zero_q_loss()
    batch = buffer.sample(N * 8)
    update_priority(buffer, batch, loss(batch))
    batch = buffer.sample(256)
    out = loss(batch)
    per_sample = torch.nn.functional.mse_loss(
        torch.zeros(256), batch["next", "reward"].squeeze(-1), reduction="none"
    )
    torch.testing.assert_close(out["loss"], (per_sample * batch["priority_weight"]).mean())
    assert not torch.allclose(out["loss"], per_sample.mean())

    # Overwriting item 0 (the oldest) gives it the largest priority seen, (7 + eps) ** alpha.
    new = buffer.sample(1).exclude("index", "priority_weight")
    buffer.extend(new)
    stored = buffer.state_dict()["priority"]
    assert float(stored[0]) == float(stored[N - 1]) == max(map(float, stored[:N]))
