"""Multi-agent envs and their collector: TorchRL's multi-agent layout, same-step autoreset,
agents that leave early (masked), and the errors for what one group cannot hold."""

from __future__ import annotations

import pytest
import torch

from tdrl.collectors import MultiAgentCollector, evaluate
from tdrl.envs import PettingZooVecEnv, make_vec_env
from tests.tiny_envs import LeavingAgents, MaskedAgents

pytest.importorskip("vmas")
pytest.importorskip("mpe2")

A = "agents"


def test_a_vmas_batch_has_the_agents_entries_and_real_final_observations():
    env = make_vec_env("vmas/navigation", 3, seed=0, n_agents=2, max_steps=4)
    batch = MultiAgentCollector(env, None, 3 * 6).rollout()
    assert batch.batch_size == (3, 6) and batch.names == [None, "time"]
    assert batch[A, "observation"].shape == (
        3,
        6,
        2,
        env.observation_spec[A, "observation"].shape[-1],
    )
    assert batch[A, "action"].shape == (3, 6, 2, 2) and batch[A, "mask"].all()
    assert batch["next", A, "reward"].shape == (3, 6, 2, 1)
    for flag in ("done", "terminated", "truncated"):
        assert batch["next", A, flag].shape == (3, 6, 2, 1)
        assert batch["next", flag].shape == (3, 6, 1) and not batch[flag].any()
    # episodes of 4 steps: truncated (not terminated) at step 3, every agent and the episode
    done = batch["next", "done"].squeeze(-1)
    assert done[:, 3].all() and done.sum() == 3
    assert batch["next", A, "truncated"][:, 3].all() and not batch["next", "terminated"].any()
    # the step after the end acts from the reset observation, not from the final one
    final, reset = batch["next", A, "observation"][:, 3], batch[A, "observation"][:, 4]
    assert not torch.equal(final, reset)
    assert torch.equal(batch["next", A, "observation"][:, 2], batch[A, "observation"][:, 3])
    ids = batch["collector", "traj_ids"]
    assert (ids[:, 4] != ids[:, 3]).all() and (ids[:, :4] == ids[:, :1]).all()


def test_mpe_simple_spread_has_a_global_state_and_per_agent_rewards():
    env = make_vec_env("mpe2/simple_spread_v3", 2, seed=1, N=3, max_cycles=5)
    assert env.n_agents == 3 and not env.continuous
    batch = MultiAgentCollector(env, None, 2 * 5).rollout()
    assert batch["state"].shape == (2, 5, 54) and batch["next", "state"].shape == (2, 5, 54)
    assert batch[A, "action"].dtype == torch.int64
    assert batch["next", "truncated"][:, 4].all() and batch["next", "done"].sum() == 2


def test_an_agent_that_leaves_early_is_masked_done_and_rewardless_until_the_episode_ends():
    env = PettingZooVecEnv(LeavingAgents, 1, seed=0)  # agent 0 ends at 2, 1 at 4, 2 cut at 5
    ones = torch.ones(1, 3, dtype=torch.int64)
    collector = MultiAgentCollector(env, lambda td: td.set((A, "action"), ones), 7)
    batch = collector.rollout()
    mask = batch[A, "mask"][0]  # [T, agents]: takes part in step t
    assert mask[:, 0].tolist() == [True, True, False, False, False, True, True]
    assert mask[:, 1].tolist() == [True] * 4 + [False, True, True]
    terminated = batch["next", A, "terminated"][0, :, :, 0]
    truncated = batch["next", A, "truncated"][0, :, :, 0]
    assert terminated[:, 0].tolist()[:5] == [False, True, True, True, True]
    assert terminated[:, 2].tolist()[:5] == [False] * 5 and truncated[4, 2]
    reward = batch["next", A, "reward"][0, :, :, 0]
    assert reward[:5, 0].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]  # nothing once gone
    assert (batch[A, "observation"][0, 2:5, 0] == 0).all()
    # the episode ends when the last agent does (step 4), and only then
    assert batch["next", "done"][0, :, 0].tolist() == [False] * 4 + [True, False, False]
    assert batch["next", "truncated"][0, 4, 0] and not batch["next", "terminated"][0, 4, 0]
    assert collector.episodes["episode_length"].tolist() == [5]


def test_an_agent_that_joins_mid_episode_is_refused_by_name():
    env = PettingZooVecEnv(LeavingAgents, 1, seed=0, late=True)
    env.reset()
    with pytest.raises(ValueError, match=r"agent 'a_2' appeared mid-episode in env 0"):
        env.step(torch.zeros(1, 3, dtype=torch.int64))


def test_agents_with_different_spaces_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"agents 'adversary_0' and 'agent_0' have different "
                                         r"observation spaces"):  # fmt: skip
        make_vec_env("mpe2/simple_adversary_v3", 1, seed=0)


def test_a_wrong_action_shape_or_dtype_is_named():
    env = make_vec_env("mpe2/simple_spread_v3", 2, seed=0, N=3, max_cycles=5)
    env.reset()
    with pytest.raises(ValueError, match=r"\('agents', 'action'\): expected shape \(2, 3\)"):
        env.step(torch.zeros(2, 3, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"discrete actions must be integers, got dtype"):
        env.step(torch.zeros(2, 3))


def test_evaluation_plays_exactly_the_asked_episodes_with_the_agents_mean_return():
    env = make_vec_env("vmas/navigation", 3, seed=0, n_agents=2, max_steps=4)
    result = evaluate(env, None, 4, seed=3)
    assert result["n_episodes"] == 4 and result["length_mean"] == 4
    again = evaluate(env, None, 4, seed=3)
    assert again["return_mean"] == result["return_mean"]  # seeded: the same episodes


def test_a_restored_collector_goes_on_with_fresh_seeded_episodes_and_new_ids():
    env = make_vec_env("vmas/navigation", 2, seed=0, n_agents=2, max_steps=4)
    collector = MultiAgentCollector(env, None, 2 * 3)
    first = collector.rollout()
    state = collector.state_dict()
    other = MultiAgentCollector(make_vec_env("vmas/navigation", 2, seed=0, n_agents=2, max_steps=4),
                                None, 2 * 3)  # fmt: skip
    assert other.load_state_dict(state) is False and other.frames == 6
    batch = other.rollout()
    assert int(batch["collector", "traj_ids"].min()) > int(first["collector", "traj_ids"].max())


def test_the_layout_is_torchrls_and_round_trips_through_its_replay_buffer():
    """Every entry TorchRL's VmasEnv rollout has (its info entries aside) is in tdrl's batch of
    the same scenario with the same shape and dtype; the batch goes through TorchRL's replay
    buffer and comes back equal."""
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.envs import VmasEnv

    theirs = VmasEnv("navigation", num_envs=2, n_agents=3, max_steps=10, seed=0)
    rollout = theirs.rollout(5, break_when_any_done=False)
    ours = MultiAgentCollector(make_vec_env("vmas/navigation", 2, seed=0, n_agents=3,
                                            max_steps=10), None, 2 * 5).rollout()  # fmt: skip
    for key in rollout.keys(True, True):
        if "info" in key:
            continue
        mine = ours.get(key)
        assert mine.shape == rollout.get(key).shape and mine.dtype == rollout.get(key).dtype, key
    buffer = ReplayBuffer(storage=LazyTensorStorage(100))
    flat = ours.reshape(-1)
    buffer.extend(flat)
    back = buffer[:]
    assert set(back.keys(True, True)) >= set(flat.keys(True, True))
    for key in flat.keys(True, True):
        torch.testing.assert_close(back.get(key), flat.get(key))


@pytest.mark.parametrize("scenario, agents", [("balance", 3), ("transport", 4)])
def test_other_vmas_scenarios_come_in_the_same_layout(scenario, agents):
    env = make_vec_env(f"vmas/{scenario}", 2, seed=0, max_steps=3)
    batch = MultiAgentCollector(env, None, 2 * 4).rollout()
    assert env.n_agents == agents and batch["next", A, "reward"].shape == (2, 4, agents, 1)
    assert batch["next", "done"][:, 2].all() and not batch["next", "done"][:, 3].any()


def test_an_agent_terminated_and_truncated_at_once_is_terminated():
    env = PettingZooVecEnv(LeavingAgents, 1, seed=0, lengths=(5, 5, 9), overlap=True)
    batch = MultiAgentCollector(env, None, 5).rollout()  # agents 0, 1 end at 5 with both flags
    terminated = batch["next", A, "terminated"][0, 4, :, 0]
    truncated = batch["next", A, "truncated"][0, 4, :, 0]
    assert terminated.tolist() == [True, True, False] and truncated.tolist() == [False, False, True]


def test_an_evaluation_does_not_rewind_the_training_envs_random_stream():
    """VMAS keeps one random state per process: each env swaps in its own, so the resets of a
    training env are the same whether or not a seeded evaluation ran between its batches."""

    def starts(evaluate_between: bool) -> torch.Tensor:
        env = make_vec_env("vmas/navigation", 2, seed=0, n_agents=2, max_steps=3)
        other = make_vec_env("vmas/navigation", 2, seed=5, n_agents=2, max_steps=3)
        collector = MultiAgentCollector(env, None, 2 * 6)
        batches = [collector.rollout()]
        if evaluate_between:
            evaluate(other, None, 2, seed=7)
        batches.append(collector.rollout())
        return torch.cat([b[A, "observation"] for b in batches], 1)

    torch.testing.assert_close(starts(False), starts(True))


def test_a_collector_restored_late_in_a_run_resets_with_a_valid_seed():
    env = make_vec_env("vmas/navigation", 2, seed=0, n_agents=2, max_steps=4)
    collector = MultiAgentCollector(env, None, 2 * 3)
    state = collector.state_dict() | {"frames": 1_200_000}
    collector.load_state_dict(state)
    assert collector.rollout().batch_size == (2, 3)  # VMAS seeds numpy: below 2**32


def test_a_masked_envs_valid_actions_come_per_agent_and_random_actions_keep_to_them():
    env = PettingZooVecEnv(MaskedAgents, 3, seed=0)  # a forbidden action raises in the env
    assert env.observation_spec[A, "action_mask"].shape == (3, 2, 3)
    batch = MultiAgentCollector(env, None, 3 * 10).rollout()  # episodes of 4: resets inside
    valid = batch[A, "action_mask"]
    assert valid.dtype == torch.bool and (valid.sum(-1) == 2).all()
    taken = valid.gather(-1, batch[A, "action"].unsqueeze(-1))
    assert taken.all()
    # the next step's mask is the one its observation came with (the final one at an episode end)
    t = batch["next", A, "observation"][..., 0].long()
    forbidden = (t + torch.arange(2)) % 3
    assert not batch["next", A, "action_mask"].gather(-1, forbidden.unsqueeze(-1)).any()
