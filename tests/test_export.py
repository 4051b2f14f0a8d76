"""tdrl.export: the exported program and the ONNX model act as the policy does.

Each policy kind acts deterministically for 1,000 observations in its env (4 envs x 250 steps,
recorded by tdrl's collector); the torch.export program and onnxruntime, given the same raw
observations (and, for a recurrent policy, the same states), return the same env actions:
exactly for discrete actions, within 1e-5 (the program) and 1e-4 (onnxruntime, float32
kernels of its own) for continuous ones, after the env's clip to the box.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest
import torch
from tensordict.nn import TensorDictSequential

from tdrl import keys
from tdrl.collectors import Collector
from tdrl.envs import make_vec_env
from tdrl.export import export_policy
from tdrl.keyed import next_key
from tdrl.modules import (
    QValueActor,
    actor_critic,
    deterministic_actor,
    tanh_gaussian_actor,
)
from tdrl.modules.networks import q_network
from tdrl.trainers.config import DistributionalConfig
from tests.tiny_envs import Masked

ort = pytest.importorskip("onnxruntime")

STEPS, ENVS = 250, 4


def ppo_actor(env):
    actor, _, norm = actor_critic(env.observation_spec, env.action_spec, hidden_sizes=(16, 16))
    assert norm is not None  # statistics that are not the identity, inside the export
    norm.update(torch.randn(64, *env.observation_spec["observation"].shape[1:]) * 3 + 1)
    return actor


def recurrent_actor(env):
    actor, _, _ = actor_critic(
        env.observation_spec, env.action_spec, hidden_sizes=(16,), recurrent="lstm",
        recurrent_size=8, normalize_observations=False,
    )  # fmt: skip
    return actor


KINDS: dict[str, tuple[Callable, Callable]] = {
    # name: (env factory, policy builder)
    "gaussian_mlp_obs_norm": (lambda: make_vec_env("Hopper-v5", ENVS, seed=0), ppo_actor),
    "tanh_gaussian": (
        lambda: make_vec_env("HalfCheetah-v5", ENVS, seed=1),
        lambda env: tanh_gaussian_actor(env.observation_spec, env.action_spec, (16, 16)),
    ),
    "deterministic": (
        lambda: make_vec_env("Hopper-v5", ENVS, seed=2),
        lambda env: deterministic_actor(env.observation_spec, env.action_spec, (16, 16)),
    ),
    "dqn_mlp": (
        lambda: make_vec_env("CartPole-v1", ENVS, seed=3),
        lambda env: QValueActor(q_network(env.observation_spec, env.action_spec, (16, 16))),
    ),
    "c51": (
        lambda: make_vec_env("CartPole-v1", ENVS, seed=4),
        lambda env: DistributionalConfig(num_atoms=11).build(
            env.observation_spec, env.action_spec, (16,)
        ),
    ),
    "dqn_cnn_minatar": (
        lambda: make_vec_env("MinAtar/Breakout-v1", ENVS, seed=5),
        lambda env: QValueActor(q_network(env.observation_spec, env.action_spec, ())),
    ),
    "dict_input_action_mask": (
        lambda: make_vec_env(lambda: Masked(length=16, one_hot=True), ENVS, seed=6),
        lambda env: actor_critic(env.observation_spec, env.action_spec, hidden_sizes=(8,))[0],
    ),
    "recurrent_lstm": (lambda: make_vec_env("CartPoleNoVel-v1", ENVS, seed=7), recurrent_actor),
}


def _clip(env, action: torch.Tensor) -> torch.Tensor:
    spec = env.action_spec
    if not spec.dtype.is_floating_point:
        return action
    return torch.maximum(torch.minimum(action, spec.space.high[0]), spec.space.low[0])


# two kinds in the default run (continuous with an observation norm and the clip; recurrent),
# the others under the "variants" marker
DEFAULT = ("gaussian_mlp_obs_norm", "recurrent_lstm")


@pytest.mark.parametrize(
    "kind", [k if k in DEFAULT else pytest.param(k, marks=pytest.mark.variants) for k in KINDS]
)
def test_exported_policies_act_as_the_policy(kind, tmp_path):
    if kind == "dqn_cnn_minatar":
        pytest.importorskip("minatar")
    make_env, build = KINDS[kind]
    torch.manual_seed(0)
    with make_env() as env:
        policy = build(env).eval()
        files = export_policy(policy, env, tmp_path, extra={"kind": kind})
        rollout = Collector(env, policy, STEPS * ENVS, deterministic=True).rollout()
        meta = json.loads(files.meta.read_text())
        assert meta["kind"] == kind
        want = _clip(env, rollout[keys.ACTION]).reshape(STEPS * ENVS, *env.action_spec.shape[1:])
    flat = rollout.reshape(-1)
    names = [i["name"] for i in meta["inputs"]]
    inputs = [flat[tuple(n.split(".")) if "." in n else n] for n in names]
    recurrent = keys.IS_INIT in names
    assert want.shape[0] == 1000 and recurrent == (kind == "recurrent_lstm")

    program = torch.export.load(files.program).module()
    with torch.no_grad():
        got = program(*inputs)
    session = ort.InferenceSession(str(files.onnx))
    feed = {i["name"]: x.numpy() for i, x in zip(meta["inputs"], inputs, strict=True)}
    onnx_got = session.run(None, feed)
    assert [o["name"] for o in meta["outputs"]] == [o.name for o in session.get_outputs()]
    if want.dtype.is_floating_point:
        torch.testing.assert_close(got[0], want, atol=1e-5, rtol=0)
        np.testing.assert_allclose(onnx_got[0], want.numpy(), atol=1e-4, rtol=0)
        assert (got[0].abs() <= 1.0).all()  # the box's clip is inside
    else:
        assert torch.equal(got[0], want)
        assert np.array_equal(onnx_got[0], want.numpy())
    if recurrent:  # the next state the collector carried to the next step
        for j, name in enumerate(names[names.index(keys.IS_INIT) + 1 :], start=1):
            nxt = flat[next_key(name)]
            torch.testing.assert_close(got[j], nxt, atol=1e-5, rtol=0)
            np.testing.assert_allclose(onnx_got[j], nxt.numpy(), atol=1e-4, rtol=0)


def test_any_batch_size_and_a_wrong_input_count_is_named(tmp_path):
    with make_vec_env("Hopper-v5", 1, seed=0) as env:
        policy = deterministic_actor(env.observation_spec, env.action_spec, (8,))
        files = export_policy(TensorDictSequential(policy), env, tmp_path, onnx=False)
    assert files.onnx is None and not (tmp_path / "policy.onnx").exists()
    program = torch.export.load(files.program).module()
    for batch in (1, 7):
        assert program(torch.zeros(batch, 11))[0].shape == (batch, 3)
    from tdrl.export import PolicyFunction

    function = PolicyFunction(policy, env)
    with pytest.raises(TypeError, match=r"takes 1 inputs \['observation'\], got 2"):
        function(torch.zeros(2, 11), torch.zeros(2, 11))
