"""Keyed LSTM/GRU: step mode and sequence mode give the same numbers, states reset exactly at
"is_init", no gradient crosses an episode start, TorchRL's LSTMModule gives the same numbers with
the same weights (both ways), and bad inputs name the key and shape."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.modules import GRUModule as TorchRLGRU
from torchrl.modules import LSTMModule as TorchRLLSTM
from torchrl.modules import set_recurrent_mode

from tdrl.modules import GRUModule, LSTMModule

B, T, F, H, L = 4, 7, 3, 5, 2


def starts() -> torch.Tensor:
    is_init = torch.zeros(B, T, 1, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[1, 3] = True  # row 1 starts a new episode at t = 3, row 2 at t = 5
    is_init[2, 5] = True
    return is_init


def step_by_step(module, x, is_init):
    """Step mode over T steps, carrying the state; returns outputs and the states fed in."""
    names = [k for k in module.in_keys if str(k).startswith("recurrent_state")]  # TorchRL's too
    state = {k: torch.randn(B, L, H) for k in names}  # junk: is_init at t = 0 zeroes it
    outputs, fed = [], {k: [] for k in names}
    for t in range(T):
        td = TensorDict({"obs": x[:, t], "is_init": is_init[:, t], **state}, [B])
        for k in names:
            fed[k].append(torch.where(is_init[:, t, :, None], 0.0, state[k]))
        out = module(td)
        outputs.append(out["feat"])
        state = {k: out["next", k] for k in names}
    return torch.stack(outputs, 1), {k: torch.stack(v, 1) for k, v in fed.items()}


@pytest.mark.parametrize("cls", [LSTMModule, GRUModule])
def test_step_and_sequence_modes_give_the_same_numbers(cls):
    torch.manual_seed(0)
    module = cls(F, H, num_layers=L, in_key="obs", out_key="feat")
    x, is_init = torch.randn(B, T, F), starts()
    stepped, fed = step_by_step(module, x, is_init)
    batch = TensorDict({"obs": x, "is_init": is_init, **fed}, [B, T])
    sequence = module.set_recurrent_mode(True)(batch.clone())["feat"]
    torch.testing.assert_close(sequence, stepped)
    # A chunk cut mid-episode starts from the state stored at its first step.
    torch.testing.assert_close(
        module.set_recurrent_mode(True)(batch[:, 2:])["feat"], stepped[:, 2:]
    )
    with set_recurrent_mode(True):  # TorchRL's global switch selects the mode too
        torch.testing.assert_close(module(batch.clone())["feat"], stepped)
    assert module.set_recurrent_mode(True).rnn is module.rnn  # parameters shared


@pytest.mark.parametrize("cls", [LSTMModule, GRUModule])
def test_the_state_is_zero_where_an_episode_starts(cls):
    torch.manual_seed(0)
    module = cls(F, H, num_layers=L, in_key="obs", out_key="feat")
    x = torch.randn(B, F)
    junk = {k: torch.randn(B, L, H) for k in module.state_keys}
    zero = {k: torch.zeros(B, L, H) for k in module.state_keys}
    init = torch.tensor([[True], [False], [True], [False]])
    with_junk = module(TensorDict({"obs": x, "is_init": init, **junk}, [B]))["feat"]
    with_zero = module(TensorDict({"obs": x, "is_init": init, **zero}, [B]))["feat"]
    torch.testing.assert_close(with_junk[init[:, 0]], with_zero[init[:, 0]])
    assert not torch.allclose(with_junk[~init[:, 0]], with_zero[~init[:, 0]])


def test_no_gradient_crosses_an_episode_start_in_a_sequence():
    torch.manual_seed(0)
    module = LSTMModule(F, H, num_layers=L, in_key="obs", out_key="feat").set_recurrent_mode(True)
    x = torch.randn(B, T, F, requires_grad=True)
    state = {k: torch.zeros(B, T, L, H) for k in module.state_keys}
    out = module(TensorDict({"obs": x, "is_init": starts(), **state}, [B, T]))["feat"]
    out[1, 3:].sum().backward()  # row 1's second episode
    assert torch.equal(x.grad[1, :3], torch.zeros(3, F))  # its first episode: no gradient
    assert (x.grad[1, 3:].abs().sum(-1) > 0).all()
    assert torch.equal(x.grad[[0, 2, 3]], torch.zeros(3, T, F))


@pytest.mark.parametrize(("ours", "theirs"), [(LSTMModule, TorchRLLSTM), (GRUModule, TorchRLGRU)])
def test_torchrl_modules_give_the_same_numbers_with_the_same_weights(ours, theirs):
    torch.manual_seed(0)
    mine = ours(F, H, num_layers=L, in_key="obs", out_key="feat")
    other = theirs(input_size=F, hidden_size=H, num_layers=L, in_key="obs", out_key="feat")
    other_rnn = other.lstm if ours is LSTMModule else other.gru
    other_rnn.load_state_dict(mine.rnn.state_dict())
    assert mine.in_keys == other.in_keys and mine.out_keys == other.out_keys
    x, is_init = torch.randn(B, T, F), starts()
    stepped, fed = step_by_step(mine, x, is_init)
    torch.testing.assert_close(step_by_step(other, x, is_init)[0], stepped)
    batch = TensorDict({"obs": x, "is_init": is_init, **fed}, [B, T])
    with set_recurrent_mode(True):
        torch.testing.assert_close(other(batch.clone())["feat"], stepped, atol=1e-6, rtol=1e-5)
    assert mine.make_tensordict_primer().primers[mine.state_keys[0]].shape == (L, H)


def test_bad_inputs_name_the_key_and_shape():
    module = LSTMModule(F, H, num_layers=L, in_key="obs", out_key="feat")
    td = TensorDict({"obs": torch.randn(B, F), "is_init": torch.ones(B, 1, dtype=torch.bool)}, [B])
    with pytest.raises(KeyError, match="missing key 'recurrent_state_h'.*the recurrent state"):
        module(td.clone())
    bad = td.clone().update({"recurrent_state_h": torch.zeros(B, 1, H),
                             "recurrent_state_c": torch.zeros(B, L, H)})  # fmt: skip
    with pytest.raises(ValueError, match=r"'recurrent_state_h' has shape \(4, 1, 5\)"):
        module(bad)
    ok = td.clone().update({k: torch.zeros(B, L, H) for k in module.state_keys})
    ok["is_init"] = torch.ones(B, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="'is_init' has shape"):
        module(ok)
    with pytest.raises(ValueError, match="sequence mode needs"):
        module.set_recurrent_mode(True)(td.clone().update(
            {k: torch.zeros(B, L, H) for k in module.state_keys}))  # fmt: skip


def test_tdrl_lstm_module_runs_in_a_torchrl_env_rollout():
    # The other way round: tdrl's module inside TorchRL's machinery (InitTracker + its primer).
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torchrl.envs import Compose, GymEnv, InitTracker, TransformedEnv

    torch.manual_seed(0)
    lstm = LSTMModule(4, H, in_key="observation", out_key="embed")
    env = TransformedEnv(
        GymEnv("CartPole-v1"), Compose(InitTracker(), lstm.make_tensordict_primer())
    )
    head = TensorDictModule(lambda e: (e[..., :1] > 0).long().squeeze(-1), ["embed"], ["action"])
    policy = TensorDictSequential(lstm, head)
    env.set_seed(0)
    rollout = env.rollout(30, policy, break_when_any_done=False)
    h, nxt = rollout["recurrent_state_h"], rollout["next", "recurrent_state_h"]
    assert h.shape == (30, 1, H) and torch.equal(h[0], torch.zeros(1, H))
    # TorchRL carries the state: each step starts from the previous step's next state, unless an
    # episode started there (TorchRL resets the primer's entries on reset).
    carried = ~rollout["is_init"][1:, 0]
    assert torch.equal(h[1:][carried], nxt[:-1][carried])
    assert (h[1:][carried].abs().sum((-1, -2)) > 0).all()


def test_an_estimator_runs_a_recurrent_critic_step_by_step_under_global_sequence_mode():
    # V(s_{t+1}) at an episode end is the ended episode's final observation, and the step
    # after it starts the next episode: a sequence over the ("next", ...) inputs would carry
    # the ended episode's state across (is_init is False there), so the estimator runs the
    # critic from each step's stored state, whatever TorchRL's global mode.
    from tensordict.nn import TensorDictSequential

    from tdrl.collectors import Collector
    from tdrl.envs import make_vec_env
    from tdrl.estimators import GAE
    from tdrl.modules import actor_critic

    torch.manual_seed(0)
    with make_vec_env("CartPole-v1", 2, seed=0, max_episode_steps=7) as env:
        actor, critic, _ = actor_critic(
            env.observation_spec, env.action_spec, recurrent="lstm", recurrent_size=8,
            recurrent_critic=True, normalize_observations=False,
        )  # fmt: skip
        batch = Collector(env, TensorDictSequential(actor, critic), 2 * 12).rollout()
    assert batch["next", "truncated"][:, :-1].any()  # an episode ends inside the batch
    gae = GAE(gamma=0.9, lmbda=0.95, value_network=critic)
    with torch.no_grad():
        step = gae(batch.clone())
        with set_recurrent_mode(True):
            under_sequence = gae(batch.clone())
    torch.testing.assert_close(step["state_value"], batch["state_value"])  # as collected
    for key in ("state_value", ("next", "state_value"), "advantage", "value_target"):
        torch.testing.assert_close(under_sequence[key], step[key])
