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


def image_spec() -> Composite:
    """Two image entries (a MinAtar-sized one and an Atari-sized one) and a vector, batch [2]."""
    return Composite(
        {"small": Bounded(0, 1, shape=(2, 4, 10, 10), dtype=torch.uint8),
         "large": Bounded(0, 255, shape=(2, 1, 40, 40), dtype=torch.uint8),
         "state": Unbounded(shape=(2, 3))},
        shape=(2,),
    )  # fmt: skip


def image_batch(n: int = 2) -> TensorDict:
    gen = torch.Generator().manual_seed(0)
    return TensorDict(
        {"small": torch.randint(0, 2, (n, 4, 10, 10), dtype=torch.uint8, generator=gen),
         "large": torch.randint(0, 256, (n, 1, 40, 40), dtype=torch.uint8, generator=gen),
         "state": torch.randn(n, 3, generator=gen)},
        batch_size=[n],
    )  # fmt: skip


def test_image_entries_get_a_cnn_each_and_vectors_are_concatenated_as_they_are():
    from tdrl.modules import DictEncoder, MinAtarCNN, NatureCNN

    encoder = dict_inputs(image_spec(), images=True)
    assert isinstance(encoder, DictEncoder)
    assert encoder.in_keys == ["small", "large", "state"]
    small, large, state = encoder.encoders
    assert isinstance(small, MinAtarCNN) and isinstance(large, NatureCNN)
    assert isinstance(state, torch.nn.Identity)
    assert small.features[0].scale == 1.0 and large.features[0].scale == 1 / 255
    assert encoder.widths == [128, 512, 3] and encoder.width == 643
    td = image_batch()
    features = encoder.features(td)
    assert features.shape == (2, 643) and "observation_flat" not in td.keys()
    assert torch.equal(features[:, :128], small(td["small"]))
    assert torch.equal(features[:, 128:640], large(td["large"]))
    assert torch.equal(features[:, 640:], td["state"])
    assert torch.equal(encoder(td)["observation_flat"], features)
    selected = dict_inputs(image_spec(), ["state", "small"], images=True)
    assert selected is not None and selected.in_keys == ["state", "small"]
    assert selected.widths == [3, 128]
    vectors = dict_inputs(image_spec(), ["state"], images=True)  # no image: a plain CatKeys
    assert type(vectors) is CatKeys


def test_a_q_network_with_an_encoder_reads_the_entries_and_trains_the_cnn():
    from tdrl.modules import network_inputs

    inputs = network_inputs(image_spec(), images=True)
    assert inputs.encoder is not None and inputs.cat is None and inputs.transform is None
    action_spec = Categorical(5, shape=(2,))
    qnet = inputs.attach(QValueActor(q_network(inputs.spec, action_spec, (16,)), in_key=inputs.key))
    assert qnet.in_keys == ["small", "large", "state"]
    assert inputs.policy(qnet) is qnet  # nothing in front: the encoder is inside
    td = image_batch()
    out = qnet(td)
    assert out["action_value"].shape == (2, 5) and out["action"].shape == (2,)
    assert torch.equal(out["action_value"], qnet.net(inputs.encoder.features(td)))
    out["chosen_action_value"].sum().backward()
    grads = [p.grad for p in inputs.encoder.parameters()]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)
    names = {name for name, _ in qnet.named_parameters()}
    assert any(name.startswith("encoder.encoders.1.") for name in names)


def test_actor_and_critic_share_one_encoder_or_get_their_own_and_ppg_reads_the_actors():
    from tdrl.modules import aux_value_head
    from tdrl.trainers.config import NetworkConfig

    action_spec = Categorical(5, shape=(2,))
    shared = NetworkConfig().build(image_spec(), action_spec)
    assert shared.actor.encoder is shared.critic.encoder and shared.obs_norm is None
    assert shared.actor.in_keys == shared.critic.in_keys == ["small", "large", "state"]
    own = NetworkConfig().build(image_spec(), action_spec, shared_encoder=False)
    assert own.actor.encoder is not own.critic.encoder
    first = next(own.actor.encoder.parameters())
    assert not torch.equal(first, next(own.critic.encoder.parameters()))  # initialised apart
    td = image_batch()
    assert own.acting(td)["action"].shape == (2,)
    assert own.critic(td)["state_value"].shape == (2, 1)
    aux = aux_value_head(own.actor)
    assert aux.encoder is own.actor.encoder and aux(td)["aux_value"].shape == (2, 1)
    with pytest.raises(ValueError, match="--recurrent is not supported on image entries"):
        NetworkConfig(recurrent="lstm").build(image_spec(), action_spec)


def test_bad_encoders_and_images_are_named():
    from tdrl.modules import BernoulliActor, network_inputs, with_encoder

    inputs = network_inputs(image_spec(), images=True)
    encoder = inputs.encoder
    assert encoder is not None
    with pytest.raises(TypeError, match="read by QValueActor.*; got BernoulliActor"):
        with_encoder(BernoulliActor(torch.nn.Linear(643, 2), in_key=inputs.key), encoder)
    body = q_network(inputs.spec, Categorical(5, shape=(2,)), (8,))
    with pytest.raises(ValueError, match="reads 'observation', the encoder writes"):
        with_encoder(QValueActor(body), encoder)
    qnet = with_encoder(QValueActor(body, in_key=inputs.key), encoder)
    with pytest.raises(ValueError, match="has an encoder already"):
        with_encoder(qnet, encoder)
    td = image_batch()
    td["small"] = td["small"].float()
    with pytest.raises(TypeError, match="DictEncoder: entry 'small': MinAtarCNN: observation must"):
        qnet(td)
    td = image_batch()
    td["state"] = torch.zeros(2, 4)
    with pytest.raises(ValueError, match="entry 'state' has 4 features per item"):
        qnet(td)
    with pytest.raises(KeyError, match="'large'"):
        qnet(image_batch().exclude("large"))


def test_own_encoders_read_the_same_entries_and_targets_copy_the_encoder():
    from tdrl.modules import NetworkInputs, ValueCritic
    from tdrl.modules.networks import mlp
    from tdrl.objectives import DQNLoss

    spec = image_spec()
    inputs = NetworkInputs(spec, dict_inputs(spec, ["large", "state"], images=True))
    assert inputs.encoder is not None and inputs.encoder.in_keys == ["large", "state"]
    value = inputs.attach(ValueCritic(mlp(inputs.encoder.width, 1, (8,)), in_key=inputs.key))
    other = inputs.attach(
        ValueCritic(mlp(inputs.encoder.width, 1, (8,)), in_key=inputs.key), own=True
    )
    assert value.encoder is inputs.encoder and other.encoder is not inputs.encoder
    assert value.in_keys == other.in_keys == ["large", "state"]
    body = q_network(inputs.spec, Categorical(5, shape=(2,)), (8,))
    qnet = inputs.attach(QValueActor(body, in_key=inputs.key), own=True)
    loss = DQNLoss(qnet)
    target = loss.target_value_network.encoder
    assert target is not qnet.encoder
    for online, copied in zip(qnet.encoder.parameters(), target.parameters(), strict=True):
        assert online is not copied and torch.equal(online, copied)


def test_the_random_shift_moves_a_dicts_uint8_images_only():
    from tdrl.trainers.config import AugmentConfig

    spec = Composite(
        {"pixels": Bounded(0, 255, shape=(2, 1, 8, 8), dtype=torch.uint8),
         "grid": Unbounded(shape=(2, 3, 3, 3)),  # float [3, 3, 3]: a vector entry, flattened
         "state": Unbounded(shape=(2, 3))},
        shape=(2,),
    )  # fmt: skip
    shift = AugmentConfig(augment="shift", shift_pad=2).sample_transform(spec)
    assert shift.in_keys == ["pixels", ("next", "pixels")]
    frames = torch.zeros(16, 1, 8, 8, dtype=torch.uint8)
    frames[:, :, 3:5, 3:5] = 255
    grid = torch.randn(16, 3, 3, 3)
    batch = TensorDict(
        {"pixels": frames.clone(), "grid": grid.clone(),
         "next": {"pixels": frames.clone(), "grid": grid.clone()}},
        batch_size=[16],
    )  # fmt: skip
    torch.manual_seed(0)
    out = shift(batch)
    assert not torch.equal(out["pixels"], frames) and not torch.equal(out["next", "pixels"], frames)
    assert torch.equal(out["grid"], grid) and torch.equal(out["next", "grid"], grid)
    del spec["pixels"]
    with pytest.raises(ValueError, match="it needs \\[C, H, W\\] frames .*'grid': torch.float32"):
        AugmentConfig(augment="shift").sample_transform(spec)
