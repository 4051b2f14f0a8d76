"""The collector carries an LSTM's state from step to step and across batches, zeroes it exactly
where an episode starts (same-step autoreset inside a batch), stores the state each step acted
from, and a resumed collector continues with the same state."""

from __future__ import annotations

import torch
from tensordict.nn import InteractionType, TensorDictSequential, set_interaction_type
from torchrl.modules import LSTMModule as TorchRLLSTM
from torchrl.modules import set_recurrent_mode

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env
from tdrl.modules import GaussianActor, LSTMModule, mlp
from tests.tiny_envs import Episodic

N, HIDDEN = 3, 8


def recurrent_policy(lstm=None):
    lstm = lstm or LSTMModule(2, HIDDEN, in_key="observation", out_key="embed")
    return TensorDictSequential(lstm, GaussianActor(mlp(HIDDEN, 1), 1, in_key="embed"))


def envs():
    # episodes of 3, 4 and 5 steps: starts at different steps inside a batch of 8
    return make_vec_env([lambda n=n: Episodic(n, fill=0.5) for n in (3, 4, 5)], N, seed=0)


def test_state_is_carried_reset_at_episode_starts_and_stored():
    torch.manual_seed(0)
    with envs() as env:
        collector = Collector(env, recurrent_policy(), N * 8, total_frames=N * 16)
        first, second = list(collector)
    for batch in (first, second):
        h, nxt = batch["recurrent_state_h"], batch["next", "recurrent_state_h"]
        is_init = batch["is_init"][..., 0]
        assert torch.equal(h[is_init], torch.zeros_like(h[is_init]))  # zero at every start
        assert (h[~is_init].abs().sum((-1, -2)) > 0).all()  # carried everywhere else
        # within a batch: the state a step acted from is the previous step's next state
        carried = ~is_init[:, 1:]
        assert torch.equal(h[:, 1:][carried], nxt[:, :-1][carried])
    starts = first["is_init"][:, :, 0]
    assert starts[0].nonzero().flatten().tolist() == [0, 3, 6]  # env 0: episodes of 3 steps
    assert starts[2].nonzero().flatten().tolist() == [0, 5]
    # across the batch cut: the second batch starts from the first one's last next state
    cont = ~second["is_init"][:, 0, 0]
    assert torch.equal(
        second["recurrent_state_h"][:, 0][cont], first["next", "recurrent_state_h"][:, -1][cont]
    )


def test_sequence_mode_reproduces_the_collected_log_probs():
    # What recurrent PPO relies on: the stored states let training recompute each step exactly.
    torch.manual_seed(0)
    policy = recurrent_policy()
    with envs() as env:
        batch = next(iter(Collector(env, policy, N * 8, total_frames=N * 8)))
    replay = batch.select("observation", "is_init", "recurrent_state_h", "recurrent_state_c",
                          "action").clone()  # fmt: skip
    with set_recurrent_mode(True), set_interaction_type(InteractionType.DETERMINISTIC):
        out = policy(replay)
    torch.testing.assert_close(out["loc"], batch["loc"])
    dist = policy[1].get_dist(out)
    torch.testing.assert_close(dist.log_prob(batch["action"]), batch["action_log_prob"])


def test_torchrl_lstm_module_runs_in_the_collector_and_resume_keeps_the_state():
    torch.manual_seed(0)
    lstm = TorchRLLSTM(input_size=2, hidden_size=HIDDEN, in_key="observation", out_key="embed")
    policy = recurrent_policy(lstm)
    with envs() as env:
        collector = Collector(env, policy, N * 4, total_frames=N * 40)
        collector.rollout()
        state = collector.state_dict()
        after = collector.rollout()
    with envs() as env:
        fresh = Collector(env, policy, N * 4, total_frames=N * 40)
        assert fresh.load_state_dict(state)
        torch.manual_seed(1)  # the actions differ, the states fed in at t = 0 do not
        replayed = fresh.rollout()
    for key in ("recurrent_state_h", "recurrent_state_c"):
        torch.testing.assert_close(replayed[key][:, 0], after[key][:, 0])
        assert replayed[key][:, 0].abs().sum() > 0  # a real carried state, not zeros


def test_a_recurrent_critic_beside_the_actor_gives_consistent_values_to_gae():
    # sb3-contrib's enable_critic_lstm: the critic's own LSTM acts beside the actor, so the
    # collector stores its state; GAE then recomputes V(s_t) exactly and V(s_{t+1}) from the
    # state after step t, which equals V at t + 1 wherever the episode goes on.
    from tdrl.estimators import GAE
    from tdrl.modules import actor_critic

    torch.manual_seed(0)
    with envs() as env:
        actor, critic, _ = actor_critic(
            env.observation_spec, env.action_spec, recurrent="lstm", recurrent_size=HIDDEN,
            recurrent_critic=True, hidden_sizes=(8,),
        )  # fmt: skip
        critic_keys = ["recurrent_state_h_critic", "recurrent_state_c_critic"]
        assert set(critic_keys) <= set(critic.in_keys) and "recurrent_state_h" not in critic.in_keys
        collector = Collector(env, TensorDictSequential(actor, critic), N * 8, total_frames=N * 16)
        _, batch = list(collector)  # the second: states carried over the batch cut
    collected = batch["state_value"].clone()
    out = GAE(gamma=0.9, lmbda=0.8, value_network=critic)(batch.exclude("state_value"))
    torch.testing.assert_close(out["state_value"], collected)
    done = batch["next", "done"][:, :-1, 0]
    nxt = out["next", "state_value"]
    torch.testing.assert_close(nxt[:, :-1][~done], collected[:, 1:][~done])
    assert not torch.allclose(nxt[:, :-1][done], collected[:, 1:][done])  # a reset follows
    # Training replays chunks in sequence mode from the stored states: the same values.
    with set_recurrent_mode(True):
        replay = critic(batch.select(*critic.in_keys).clone())
    torch.testing.assert_close(replay["state_value"], collected)


def test_a_recurrent_critic_needs_a_recurrent_actor():
    import pytest

    from tdrl.modules import actor_critic

    with envs() as env, pytest.raises(ValueError, match="recurrent_critic needs a recurrent"):
        actor_critic(env.observation_spec, env.action_spec, recurrent_critic=True)
