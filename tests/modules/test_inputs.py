"""Dict observations as one network input: CatKeys and dict_inputs on real env specs."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Bounded, Categorical, Composite, Unbounded

from tdrl.envs import make_vec_env
from tdrl.modules import CatKeys, QValueActor, dict_inputs
from tdrl.modules.networks import flat_dims, q_network


def goal_spec() -> Composite:
    env = make_vec_env("tdrl/BitFlipping5-v0", 2, seed=0)
    spec = env.observation_spec
    env.close()
    return spec


def test_every_entry_in_spec_order_by_default_and_the_selection_in_its_own_order():
    spec = goal_spec()
    every = dict_inputs(spec)
    assert every is not None and every.in_keys == ["achieved_goal", "desired_goal", "observation"]
    chosen = dict_inputs(spec, ["desired_goal", "observation"])
    assert chosen is not None and chosen.width == 10
    td = TensorDict(
        {"observation": torch.zeros(2, 5), "desired_goal": torch.ones(2, 5),
         "achieved_goal": torch.full((2, 5), 7.0)},
        batch_size=[2],
    )  # fmt: skip
    out = chosen(td)["observation_flat"]
    assert out.shape == (2, 10)
    assert torch.equal(out[:, :5], torch.ones(2, 5)) and torch.equal(out[:, 5:], torch.zeros(2, 5))


def test_the_builders_take_the_concatenated_spec_and_the_network_runs_under_next():
    spec = goal_spec()
    cat = dict_inputs(spec, ["observation", "desired_goal"])
    assert cat is not None
    flat = cat.spec(spec)
    env = make_vec_env("tdrl/BitFlipping5-v0", 2, seed=0)
    assert flat_dims(flat, env.action_spec) == (10, 5)
    body = q_network(flat, env.action_spec, (8,))
    actor = QValueActor(body, in_key=cat.out_key)
    td = env.reset()
    actor(cat(td))
    assert td["action_value"].shape == (2, 5) and td["action"].shape == (2,)
    env.close()


def test_a_single_observation_needs_no_concatenation():
    spec = Composite(
        {"observation": Unbounded(shape=(3, 4)), "action_mask": Unbounded(shape=(3, 2))},
        shape=(3,),
    )
    assert dict_inputs(spec) is None
    assert dict_inputs(spec, ["observation"]) is None


def test_nested_and_matrix_entries_are_flattened():
    spec = Composite(
        {
            "a": Unbounded(shape=(4, 2, 3)),
            "b": Composite({"c": Unbounded(shape=(4, 1))}, shape=(4,)),
        },
        shape=(4,),
    )
    cat = dict_inputs(spec)
    assert cat is not None and cat.in_keys == ["a", ("b", "c")] and cat.width == 7
    td = TensorDict({"a": torch.randn(4, 2, 3), "b": {"c": torch.randn(4, 1)}}, batch_size=[4])
    assert cat(td)["observation_flat"].shape == (4, 7)


def test_bad_selections_and_entries_are_named():
    spec = goal_spec()
    with pytest.raises(KeyError, match="'goal' is not in the observation spec"):
        dict_inputs(spec, ["observation", "goal"])
    with pytest.raises(ValueError, match="'observation' is selected twice"):
        dict_inputs(spec, ["observation", "observation"])
    frames = Composite(
        {"pixels": Bounded(0, 255, shape=(2, 3, 8, 8), dtype=torch.uint8),
         "state": Unbounded(shape=(2, 4))},
        shape=(2,),
    )  # fmt: skip
    with pytest.raises(ValueError, match="'pixels' holds uint8 frames"):
        dict_inputs(frames)
    state = dict_inputs(frames, ["state"])
    assert state is not None and state.in_keys == ["state"] and state.width == 4
    discrete = Composite(
        {"room": Categorical(5, shape=(2,)), "x": Unbounded(shape=(2, 1))}, shape=(2,)
    )
    with pytest.raises(ValueError, match="'room' is torch.int64"):
        dict_inputs(discrete)
    cat = CatKeys(["x"], [3])
    with pytest.raises(ValueError, match="entry 'x' has 2 features per item"):
        cat(TensorDict({"x": torch.zeros(5, 2)}, batch_size=[5]))
    with pytest.raises(KeyError, match="'x'"):
        cat(TensorDict({"y": torch.zeros(5, 3)}, batch_size=[5]))


def test_selecting_only_observation_of_a_dict_still_narrows_the_spec():
    spec = goal_spec()
    cat = dict_inputs(spec, ["observation"])
    assert cat is not None and cat.in_keys == ["observation"] and cat.width == 5


def test_actor_critic_on_a_dict_with_an_action_mask_reads_the_concatenation_and_the_mask():
    from torchrl.data import Binary

    from tdrl.modules import actor_critic, network_inputs

    spec = Composite(
        {"a": Unbounded(shape=(3, 2)), "b": Unbounded(shape=(3, 4)),
         "action_mask": Binary(n=5, shape=(3, 5), dtype=torch.bool)},
        shape=(3,),
    )  # fmt: skip
    inputs = network_inputs(spec)
    assert inputs.cat is not None and inputs.cat.in_keys == ["a", "b"]
    actor, critic, norm = actor_critic(
        inputs.spec, Categorical(5, shape=(3,)), observation_key=inputs.key
    )
    assert norm is not None and norm.in_keys == ["observation_flat"]
    assert actor.in_keys == ["observation_flat", "action_mask"]
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[:, 2] = True  # one valid action
    td = TensorDict(
        {"a": torch.randn(3, 2), "b": torch.randn(3, 4), "action_mask": mask}, batch_size=[3]
    )
    inputs.policy(actor)(td)
    assert (td["action"] == 2).all() and td["observation_flat"].shape == (3, 6)
    assert inputs.policy(critic)(td)["state_value"].shape == (3, 1)
