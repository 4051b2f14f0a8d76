"""Networks built from an env's specs: the on-policy actor-critic pair, PyTorch's default init.

Observation normalization sits inside both networks (:class:`NormalizedInput` in front of each
MLP) rather than in the rollout: the batch keeps the raw observations, the actor, the critic and
the bootstrap values ``V(s_{t+1})`` all see the same transform, and the statistics are updated
between batches (``obs_norm.update(batch["observation"])`` after the updates), so within a batch
the policy that collected and the policy being trained normalize identically (the PPO ratio is
exactly 1 at the first minibatch). The statistics are buffers of both networks, so they travel
with their ``state_dict`` into checkpoints. Tianshou's MuJoCo examples and SB3's ``VecNormalize``
update per step instead; the difference is a one-batch lag of the statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

import torch
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from tensordict.utils import NestedKey
from torch import nn
from torchrl.data import Binary as BinarySpec
from torchrl.data import Categorical as CategoricalSpec
from torchrl.data import Composite, TensorSpec
from torchrl.data import MultiCategorical as MultiCategoricalSpec

from tdrl import keys
from tdrl.modules.actors import (
    BernoulliActor,
    CategoricalActor,
    GaussianActor,
    MultiCategoricalActor,
    TanhGaussianActor,
    encoder_of,
)
from tdrl.modules.cnn import frame_cnn
from tdrl.modules.critics import ValueCritic
from tdrl.modules.deterministic import DeterministicActor
from tdrl.modules.distributional import to_noisy
from tdrl.modules.ensembles import EnsembleCritic, EnsembleMLP
from tdrl.modules.inputs import with_encoder
from tdrl.modules.mlp import HIDDEN_GAIN, POLICY_GAIN, VALUE_GAIN, mlp, orthogonal_init_
from tdrl.modules.normalization import RunningObservationNorm
from tdrl.modules.qvalue import q_mlp
from tdrl.modules.recurrent import GRUModule, LSTMModule, RecurrentActor
from tdrl.modules.renorm import BatchRenorm
from tdrl.modules.residual import ResidualMLP
from tdrl.modules.sde import GSDEActor

Network = Literal["auto", "mlp", "cnn", "impala"]
"""A network body: auto (a CNN on uint8 frames, else an MLP), mlp, cnn (MinAtar's or the Nature
CNN by frame size) or impala (the IMPALA ResNet)."""

# The recurrent actor's intermediate keys: the normalized observation and the RNN's output.
NORMALIZED, EMBED = keys.NORMALIZED_OBSERVATION, keys.EMBED

__all__ = [
    "NormalizedInput",
    "action_bounds",
    "actor_critic",
    "aux_value_head",
    "deterministic_actor",
    "flat_dims",
    "is_frames",
    "pixel_network",
    "q_ensemble",
    "q_network",
    "tanh_gaussian_actor",
    "torch_default_init_",
]


def torch_default_init_(module: nn.Module) -> nn.Module:
    """Re-initialise every ``nn.Linear`` of ``module`` with PyTorch's default (Kaiming-uniform)
    init; returns ``module``.

    ``tdrl.modules.mlp`` initialises orthogonally (the on-policy convention of Andrychowicz et
    al. 2020, arXiv 2006.05990). The off-policy baselines (SB3, Tianshou, CleanRL) keep PyTorch's
    default, and their tuned settings assume it: DQN on CartPole-v1 with rl-baselines3-zoo's
    settings reaches 500 with the default init and stays near 100 with the orthogonal one.
    """
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            layer.reset_parameters()
    return module


class NormalizedInput(nn.Module):
    """``obs_norm.normalize(x)`` as a layer (no statistics update: call ``obs_norm.update``).

    Shapes:
        ``[*B, *obs_shape] -> [*B, *obs_shape]``.
    """

    def __init__(self, obs_norm: RunningObservationNorm) -> None:
        super().__init__()
        self.obs_norm = obs_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.obs_norm.normalize(x)


def actor_critic(
    observation_spec: Composite,
    action_spec: TensorSpec,
    *,
    hidden_sizes: Sequence[int] = (64, 64),
    init_log_std: float = -0.5,
    normalize_observations: bool = True,
    activation: type[nn.Module] = nn.Tanh,
    recurrent: Literal["lstm", "gru"] | None = None,
    recurrent_size: int = 64,
    recurrent_critic: bool = False,
    sde_sample_freq: int = 0,
    ortho_init: bool = True,
    rescale_actions: bool = True,
    shared_encoder: bool = True,
    observation_key: NestedKey = keys.OBSERVATION,
    network: Network = "auto",
) -> tuple[TensorDictModuleBase, TensorDictModuleBase, RunningObservationNorm | None]:
    """A policy and a value network for an env's specs (the Tianshou/CleanRL MuJoCo setup):
    ``actor_critic(env.observation_spec, env.action_spec)``; TorchRL env specs work too.

    Continuous actions: ``GaussianActor`` (state-independent log-std, initial ``init_log_std``,
    Tianshou's -0.5) rescaled to the env's bounds; discrete actions: ``CategoricalActor``. Both
    networks are ``hidden_sizes`` MLPs with orthogonal init (policy head gain 0.01, value head 1).

    With ``sde_sample_freq > 0`` a continuous policy is a :class:`~tdrl.modules.GSDEActor`
    (gSDE: exploration noise linear in the last hidden layer's features, new weights every
    ``sde_sample_freq`` steps; SB3's ``use_sde``), ``init_log_std`` its initial log-std.

    With ``recurrent`` the actor is a :class:`~tdrl.modules.recurrent.RecurrentActor`: an LSTM
    or GRU of ``recurrent_size`` on the (normalized) observation, then the ``hidden_sizes`` head
    on its output (``"embed"``); the critic stays a feed-forward network on the observation
    (sb3-contrib's ``RecurrentPPO`` with ``enable_critic_lstm=False``), so the value estimator
    runs on the rollout as for any critic. Categorical and Gaussian policies only. With
    ``recurrent_critic`` the critic has its own recurrent layer too (``enable_critic_lstm=True``;
    its state under ``"recurrent_state_*_critic"``): the collector must then run it beside the
    actor (``NetworkConfig.build``'s ``acting``) so that its state is stored for training.

    ``ortho_init=False`` re-initialises every linear layer of both networks with PyTorch's
    default (:func:`torch_default_init_`; SB3's ``ortho_init=False``, e.g. the zoo's recurrent
    PPO); recurrent layers keep PyTorch's default either way. ``rescale_actions=False`` leaves a
    Gaussian policy's mean and scale in the env's units (SB3's unsquashed PPO policies: the env
    clips the actions) instead of rescaling ``[-1, 1]`` to the env's bounds.

    On uint8 frames ``[C, H, W]`` (MinAtar, Atari: :func:`is_frames`) both heads sit on a CNN
    (:func:`pixel_network`: MinAtar's or the Nature CNN with its hidden layer), orthogonally
    initialised with gain sqrt(2): one shared CNN (CleanRL's ``ppo_atari.py``, SB3's
    ``CnnPolicy``), or with ``shared_encoder=False`` one each, for algorithms whose value
    updates must not move the policy (TRPO's trust region, PPG's separate networks). The frames
    are scaled inside the CNN, not normalized (``normalize_observations`` does not apply;
    ``hidden_sizes`` and ``activation`` neither). Recurrent and gSDE policies on frames are
    refused.

    ``observation_key``: the flat entry the networks (and the normalizer) read, e.g. a dict
    observation's concatenation (:class:`~tdrl.modules.NetworkInputs`).

    ``network`` (:func:`pixel_network`): ``"auto"`` as above; ``"mlp"`` the MLPs (frames are
    refused: they take one flat observation); ``"cnn"`` or ``"impala"``
    (:class:`~tdrl.modules.ImpalaCNN`, the Procgen and PPG papers' network) on frames.

    Returns:
        ``(actor, critic, obs_norm)``; ``obs_norm`` is ``None`` without normalization.

    Shapes:
        observation ``[*B, obs_dim]`` (one flat ``"observation"`` entry) or uint8 frames
        ``[*B, C, H, W]``; the specs may carry leading batch dims, e.g. ``[num_envs]``.
    """
    cnn = pixel_network(observation_spec, network)
    if cnn is not None:
        if recurrent is not None or sde_sample_freq:
            what = f"recurrent={recurrent!r}" if recurrent is not None else "sde_sample_freq"
            raise ValueError(f"actor_critic: {what} on frames is not supported (a CNN policy)")
        encoders = (cnn(None),) if shared_encoder else (cnn(None), cnn(None))
        return _pixel_actor_critic(
            observation_spec, action_spec, encoders, init_log_std, ortho_init, rescale_actions
        )
    obs_dim, _ = flat_dims(observation_spec, action_spec)
    key = observation_key
    obs_norm = RunningObservationNorm(obs_dim, in_keys=(key,)) if normalize_observations else None

    def trunk(out_features: int, gain: float) -> nn.Module:
        net = mlp(obs_dim, out_features, hidden_sizes, activation=activation, output_gain=gain)
        return net if obs_norm is None else nn.Sequential(NormalizedInput(obs_norm), net)

    spec = action_spec
    actor: TensorDictModuleBase
    critic: TensorDictModuleBase
    if recurrent is not None:
        actor = _recurrent_actor(
            obs_dim, spec, recurrent, recurrent_size, hidden_sizes, activation, init_log_std,
            obs_norm, sde_sample_freq, rescale_actions, key,
        )  # fmt: skip
        if recurrent_critic:
            critic = _recurrent_critic(
                obs_dim, recurrent, recurrent_size, hidden_sizes, activation, obs_norm, key
            )
        else:
            critic = ValueCritic(trunk(1, VALUE_GAIN), in_key=key)
    elif recurrent_critic:
        raise ValueError("recurrent_critic needs a recurrent actor (recurrent='lstm' or 'gru')")
    else:
        actor = _feed_forward_actor(
            observation_spec, spec, trunk, init_log_std, sde_sample_freq, rescale_actions,
            lambda: _features(obs_dim, hidden_sizes, activation, obs_norm), key,
        )  # fmt: skip
        critic = ValueCritic(trunk(1, VALUE_GAIN), in_key=key)
    if not ortho_init:
        torch_default_init_(actor)
        torch_default_init_(critic)
    return actor, critic, obs_norm


def aux_value_head(
    actor: TensorDictModuleBase, *, out_key: NestedKey = keys.AUX_VALUE
) -> ValueCritic:
    """A value head on a policy's own hidden layers: PPG's auxiliary value (Cobbe et al. 2020,
    arXiv 2009.04416), trained in its auxiliary phase so that the policy's features learn what
    the value needs.

    The head is the actor's network without its output layer, shared (the same modules and
    parameters, observation normalization and a dict observation's image encoder included),
    then a new linear layer to ``[*B, 1]``
    (orthogonal init, gain 1) written under ``out_key``. The actor's ``net`` must be a
    feed-forward ``nn.Sequential`` ending in a linear layer, as :func:`actor_critic` builds it
    (recurrent and gSDE actors are refused, named).

    Shapes:
        reads the actor's observation ``[*B, obs]``; writes ``[*B, 1]``.
    """
    body, width = _without_output_layer(getattr(actor, "net", None), type(actor).__name__)
    head = nn.Linear(width, 1)
    nn.init.orthogonal_(head.weight, VALUE_GAIN)
    nn.init.zeros_(head.bias)
    encoder = encoder_of(actor)  # image entries: the actor's CNN encoder, shared
    if encoder is None:
        return ValueCritic(nn.Sequential(body, head), in_key=actor.in_keys[0], out_key=out_key)
    value = ValueCritic(nn.Sequential(body, head), in_key=encoder.out_key, out_key=out_key)
    return with_encoder(value, encoder)


def _without_output_layer(net: nn.Module | None, owner: str) -> tuple[nn.Module, int]:
    """``net`` without its last linear layer (sharing the other modules), and that layer's input
    width."""
    if isinstance(net, nn.Sequential) and len(net):
        last = net[-1]
        if isinstance(last, nn.Linear):
            return net[:-1], last.in_features
        if isinstance(last, nn.Sequential):
            inner, width = _without_output_layer(last, owner)
            return nn.Sequential(*list(net)[:-1], inner), width
    raise ValueError(
        f"aux_value_head: {owner} has no feed-forward network ending in a linear layer (its "
        f"'net' is {type(net).__name__}); recurrent and gSDE actors have no such head"
    )


def _pixel_actor_critic(
    observation_spec: Composite,
    action_spec: TensorSpec,
    encoders: tuple[nn.Module, ...],
    init_log_std: float,
    ortho_init: bool,
    rescale_actions: bool,
) -> tuple[TensorDictModuleBase, TensorDictModuleBase, None]:
    """A policy and a value head on CNN ``encoders`` (their hidden features): one shared, or
    the policy's and the value's."""
    width = int(encoders[0].hidden)  # type: ignore[arg-type]
    if ortho_init:
        orthogonal_encoders_(encoders)
    heads = iter(encoders * 2 if len(encoders) == 1 else encoders)  # the policy's, the value's

    def trunk(out_features: int, gain: float) -> nn.Module:
        return nn.Sequential(next(heads), orthogonal_init_(nn.Linear(width, out_features), gain))

    def no_sde() -> tuple[nn.Module, int]:
        raise AssertionError("gSDE is refused on frames")

    actor = _feed_forward_actor(
        observation_spec, action_spec, trunk, init_log_std, 0, rescale_actions, no_sde
    )
    critic = ValueCritic(trunk(1, VALUE_GAIN))
    if not ortho_init:
        torch_default_init_(actor)
        torch_default_init_(critic)
    return actor, critic, None


def orthogonal_encoders_(encoders: Sequence[nn.Module]) -> None:
    """Orthogonal weights with gain sqrt(2) and zero biases for every convolution and linear
    layer of ``encoders`` (CleanRL's ``ppo_atari.py`` init), in order, an encoder met twice
    (shared by two networks) once."""
    seen: set[int] = set()
    for encoder in encoders:
        if id(encoder) in seen:
            continue
        seen.add(id(encoder))
        for layer in encoder.modules():
            if isinstance(layer, nn.Conv2d):
                orthogonal_init_(layer, HIDDEN_GAIN)
            elif isinstance(layer, nn.Linear):
                orthogonal_init_(layer, HIDDEN_GAIN)


def _feed_forward_actor(
    observation_spec: Composite,
    spec: TensorSpec,
    trunk: Callable[[int, float], nn.Module],
    init_log_std: float,
    sde_sample_freq: int,
    rescale_actions: bool,
    sde_features: Callable[[], tuple[nn.Module, int]],
    key: NestedKey = keys.OBSERVATION,
) -> TensorDictModuleBase:
    """The MLP policy for ``spec`` reading ``key``: categorical kinds, or a Gaussian (or
    gSDE) one."""
    # An env-provided action mask (an "action_mask" observation entry) is honoured.
    mask_key = keys.ACTION_MASK if keys.ACTION_MASK in observation_spec.keys() else None
    masked = {"in_key": key, "mask_key": mask_key}
    if isinstance(spec, MultiCategoricalSpec):  # before Categorical: it is a subclass there
        nvec = [int(n) for n in spec.nvec.reshape(-1, spec.shape[-1])[0]]
        return MultiCategoricalActor(trunk(sum(nvec), POLICY_GAIN), nvec, **masked)
    if isinstance(spec, BinarySpec):
        return BernoulliActor(trunk(int(spec.shape[-1]), POLICY_GAIN), in_key=key)
    if isinstance(spec, CategoricalSpec):
        return CategoricalActor(trunk(int(spec.space.n), POLICY_GAIN), **masked)
    return _gaussian(
        spec, lambda: trunk(int(spec.shape[-1]), POLICY_GAIN), init_log_std, sde_sample_freq,
        key, sde_features, rescale_actions,
    )  # fmt: skip


def _recurrent_actor(
    obs_dim: int,
    spec: TensorSpec,
    kind: str,
    size: int,
    hidden_sizes: Sequence[int],
    activation: type[nn.Module],
    init_log_std: float,
    obs_norm: RunningObservationNorm | None,
    sde_sample_freq: int,
    rescale_actions: bool,
    key: NestedKey = keys.OBSERVATION,
) -> RecurrentActor:
    body = _recurrent_body(obs_dim, kind, size, obs_norm, EMBED, None, key)

    def head(out_features: int) -> nn.Module:
        return mlp(size, out_features, hidden_sizes, activation=activation, output_gain=POLICY_GAIN)

    actor: TensorDictModuleBase
    # TorchRL's Binary is a subclass of its Categorical (space.n == 2): test it first
    if isinstance(spec, CategoricalSpec) and not isinstance(
        spec, (MultiCategoricalSpec, BinarySpec)
    ):
        actor = CategoricalActor(head(int(spec.space.n)), in_key=EMBED)
    elif isinstance(spec, (CategoricalSpec, BinarySpec)):
        raise ValueError(f"recurrent actors are Categorical or Gaussian; got {type(spec).__name__}")
    else:
        actor = _gaussian(
            spec, lambda: head(int(spec.shape[-1])), init_log_std, sde_sample_freq, EMBED,
            lambda: _features(size, hidden_sizes, activation, None), rescale_actions,
        )  # fmt: skip
    return RecurrentActor(*body, actor)


def _recurrent_critic(
    obs_dim: int,
    kind: str,
    size: int,
    hidden_sizes: Sequence[int],
    activation: type[nn.Module],
    obs_norm: RunningObservationNorm | None,
    key: NestedKey = keys.OBSERVATION,
) -> TensorDictSequential:
    """A value network with its own LSTM or GRU (state under the critic's keys), then an MLP."""
    states = (
        [keys.CRITIC_RECURRENT_STATE_H, keys.CRITIC_RECURRENT_STATE_C]
        if kind == "lstm"
        else [keys.CRITIC_RECURRENT_STATE]
    )
    body = _recurrent_body(obs_dim, kind, size, obs_norm, keys.CRITIC_EMBED, states, key)
    head = mlp(size, 1, hidden_sizes, activation=activation, output_gain=VALUE_GAIN)
    return TensorDictSequential(*body, ValueCritic(head, in_key=keys.CRITIC_EMBED))


def _recurrent_body(
    obs_dim: int,
    kind: str,
    size: int,
    obs_norm: RunningObservationNorm | None,
    out_key: str,
    state_keys: list[str] | None,
    key: NestedKey = keys.OBSERVATION,
) -> list[TensorDictModuleBase]:
    """The (normalized) observation ``key`` into an LSTM or GRU of ``size`` writing
    ``out_key``."""
    body: list[TensorDictModuleBase] = []
    source: NestedKey = key
    if obs_norm is not None:
        body.append(TensorDictModule(NormalizedInput(obs_norm), [key], [NORMALIZED]))
        source = NORMALIZED
    if kind not in ("lstm", "gru"):
        raise ValueError(f"recurrent must be 'lstm', 'gru' or None, got {kind!r}")
    rnn_cls = LSTMModule if kind == "lstm" else GRUModule
    body.append(rnn_cls(obs_dim, size, in_key=source, out_key=out_key, state_keys=state_keys))
    return body


def _features(
    in_features: int,
    hidden_sizes: Sequence[int],
    activation: type[nn.Module],
    obs_norm: RunningObservationNorm | None,
) -> tuple[nn.Module, int]:
    """A policy's hidden layers without its output layer, ending in the activation (the
    features gSDE's noise reads), and their width."""
    if not hidden_sizes:
        layers: nn.Module = nn.Identity()
        width = in_features
    else:
        *inner, width = hidden_sizes
        layers = nn.Sequential(
            mlp(in_features, width, inner, activation=activation, output_gain=HIDDEN_GAIN),
            activation(),
        )
    net = layers if obs_norm is None else nn.Sequential(NormalizedInput(obs_norm), layers)
    return net, width


def _gaussian(
    spec: TensorSpec,
    net: Callable[[], nn.Module],
    init_log_std: float,
    sde_sample_freq: int,
    in_key: NestedKey,
    sde_features: Callable[[], tuple[nn.Module, int]],
    rescale_actions: bool,
) -> TensorDictModuleBase:
    """A Gaussian policy for a Box ``spec``: ``net()``'s mean with a state-independent log-std,
    or, with ``sde_sample_freq > 0``, gSDE on ``sde_features()`` (its own layers); actions
    rescaled from ``[-1, 1]`` to the spec's bounds, or in the env's units without
    ``rescale_actions``."""
    action_dim = int(spec.shape[-1])
    low, high = action_bounds(spec) if rescale_actions else (None, None)
    if sde_sample_freq > 0:
        body, width = sde_features()
        return GSDEActor(
            body, width, action_dim, init_log_std=init_log_std, sample_freq=sde_sample_freq,
            in_key=in_key, action_low=low, action_high=high,
        )  # fmt: skip
    return GaussianActor(
        net(), action_dim, in_key=in_key, init_log_std=init_log_std, action_low=low,
        action_high=high,
    )  # fmt: skip


def flat_dims(observation_spec: Composite, action_spec: TensorSpec) -> tuple[int, int]:
    """``(obs_dim, action_dim)`` of one flat ``"observation"`` and a Box (or Discrete: the number
    of actions) action space; specs may carry leading batch dims."""
    entries = [k for k in observation_spec.keys(True, True) if k != keys.ACTION_MASK]
    leaf = observation_spec.get(keys.OBSERVATION, None) if entries == [keys.OBSERVATION] else None
    if leaf is not None and len(leaf.shape) != len(observation_spec.shape) + 1:
        features = tuple(leaf.shape[len(observation_spec.shape) :])
        raise ValueError(
            f"this network needs one flat {keys.OBSERVATION!r} entry, got {leaf.dtype} "
            f"{features}; frames [C, H, W] take a CNN (--network auto, cnn or impala)"
        )
    if leaf is None:
        raise ValueError(
            f"this network needs one flat {keys.OBSERVATION!r} entry, got {entries}; for a dict "
            "of vectors build it on tdrl.modules.network_inputs(spec).spec, reading its .key"
        )
    if isinstance(action_spec, CategoricalSpec) and not isinstance(
        action_spec,
        (MultiCategoricalSpec, BinarySpec),  # Binary subclasses Categorical
    ):
        return int(leaf.shape[-1]), int(action_spec.space.n)
    return int(leaf.shape[-1]), int(action_spec.shape[-1])


def action_bounds(action_spec: TensorSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-dimension ``(low, high)`` of a Box action spec (batch dims dropped)."""
    if not hasattr(action_spec.space, "low"):
        raise ValueError(f"a bounded (Box) action space is needed, got {action_spec}")
    dim = int(action_spec.shape[-1])
    return (
        action_spec.space.low.reshape(-1, dim)[0],
        action_spec.space.high.reshape(-1, dim)[0],
    )


def tanh_gaussian_actor(
    observation_spec: Composite,
    action_spec: TensorSpec,
    hidden_sizes: Sequence[int],
    *,
    batch_renorm: dict[str, Any] | None = None,
    residual: bool = False,
    observation_key: NestedKey = keys.OBSERVATION,
) -> TanhGaussianActor:
    """SAC's actor: a ReLU MLP with PyTorch's default init writing a tanh-squashed Gaussian in
    the env's action box (Tianshou's and SB3's SAC networks). ``batch_renorm``: keyword
    arguments of a :class:`~tdrl.modules.renorm.BatchRenorm` before every linear layer (CrossQ's
    actor, as sb3-contrib's), or None. ``residual``: SimBa's residual blocks instead, one per
    hidden width (:class:`~tdrl.modules.residual.ResidualMLP`). ``observation_key``: the entry
    it reads (``NetworkInputs.key`` for a dict observation)."""
    return _bounded_actor(TanhGaussianActor, 2, observation_spec, action_spec, hidden_sizes,
                          batch_renorm, residual, observation_key)  # fmt: skip


BoundedActor = TypeVar("BoundedActor", TanhGaussianActor, DeterministicActor)


def _bounded_actor(
    actor: type[BoundedActor],
    outputs_per_dim: int,
    observation_spec: Composite,
    action_spec: TensorSpec,
    hidden_sizes: Sequence[int],
    batch_renorm: dict[str, Any] | None,
    residual: bool,
    observation_key: NestedKey,
) -> BoundedActor:
    """``actor`` on :func:`_actor_net` with ``outputs_per_dim`` outputs per action dimension,
    scaled to the action box, reading ``observation_key``."""
    obs_dim, action_dim = flat_dims(observation_spec, action_spec)
    low, high = action_bounds(action_spec)
    net = _actor_net(obs_dim, outputs_per_dim * action_dim, hidden_sizes, batch_renorm, residual)
    return actor(net, action_dim, in_key=observation_key, action_low=low, action_high=high)


def _actor_net(
    obs_dim: int,
    out: int,
    hidden_sizes: Sequence[int],
    batch_renorm: dict[str, Any] | None,
    residual: bool,
) -> nn.Module:
    """The off-policy actors' network: a ReLU MLP (PyTorch's default init), with batch renorm
    before every linear layer if asked, or SimBa's residual blocks."""
    if residual:
        return ResidualMLP(obs_dim, out, hidden_sizes, batch_renorm=batch_renorm)
    net = torch_default_init_(mlp(obs_dim, out, hidden_sizes, activation=nn.ReLU))
    if batch_renorm is None:
        return net
    layers: list[nn.Module] = []
    for layer in net.children():
        if isinstance(layer, nn.Linear):
            layers.append(BatchRenorm(layer.in_features, **batch_renorm))
        layers.append(layer)
    return nn.Sequential(*layers)


def deterministic_actor(
    observation_spec: Composite,
    action_spec: TensorSpec,
    hidden_sizes: Sequence[int],
    *,
    residual: bool = False,
    observation_key: NestedKey = keys.OBSERVATION,
) -> DeterministicActor:
    """DDPG's and TD3's actor: a ReLU MLP with PyTorch's default init, tanh-scaled to the box
    (``residual``: SimBa's residual blocks instead, one per hidden width), reading
    ``observation_key``."""
    return _bounded_actor(DeterministicActor, 1, observation_spec, action_spec, hidden_sizes,
                          None, residual, observation_key)  # fmt: skip


def q_ensemble(
    observation_spec: Composite,
    action_spec: TensorSpec,
    hidden_sizes: Sequence[int],
    num_members: int = 2,
    num_outputs: int = 1,
    *,
    dropout: float = 0.0,
    layer_norm: bool = False,
    batch_renorm: dict[str, Any] | None = None,
    residual: bool = False,
    observation_key: NestedKey = keys.OBSERVATION,
) -> EnsembleCritic:
    """``num_members`` Q(s, a) critics evaluated as one batched ensemble (SAC, TD3, REDQ);
    ``num_outputs`` > 1: each outputs that many quantiles of the return (TQC). ``dropout`` and
    ``layer_norm`` after each hidden layer make DroQ's critics, ``batch_renorm`` before each
    linear layer CrossQ's (:class:`~tdrl.modules.ensembles.EnsembleMLP`); ``residual``: SimBa's
    residual blocks, one per hidden width (:class:`~tdrl.modules.residual.ResidualMLP`; its
    norms batch renorm with ``batch_renorm``). The critics read ``observation_key`` and
    ``"action"``."""
    obs_dim, action_dim = flat_dims(observation_spec, action_spec)
    if residual:
        if dropout or layer_norm:
            raise ValueError("q_ensemble: residual blocks take no dropout or extra LayerNorm")
        body = ResidualMLP(
            obs_dim + action_dim, num_outputs, hidden_sizes, num_members=num_members,
            batch_renorm=batch_renorm,
        )  # fmt: skip
        return EnsembleCritic(body, in_keys=(observation_key, keys.ACTION))
    net = EnsembleMLP(
        obs_dim + action_dim, num_outputs, hidden_sizes, num_members=num_members,
        dropout=dropout, layer_norm=layer_norm, batch_renorm=batch_renorm,
    )  # fmt: skip
    return EnsembleCritic(net, in_keys=(observation_key, keys.ACTION))


def is_frames(observation_spec: Composite) -> bool:
    """Whether the ``"observation"`` entry is uint8 frames ``[C, H, W]`` (``tdrl.envs.pixels``:
    MinAtar, Atari); specs may carry leading batch dims."""
    leaf = observation_spec.get(keys.OBSERVATION, None)
    return (
        leaf is not None
        and leaf.dtype == torch.uint8
        and len(leaf.shape) == len(observation_spec.shape) + 3
    )


def pixel_network(
    observation_spec: Composite, network: Network = "auto"
) -> Callable[..., nn.Module] | None:
    """The CNN class for ``network`` with its input set (:func:`~tdrl.modules.cnn.frame_cnn`:
    ``"cnn"``: :class:`MinAtarCNN` on frames under 36 pixels, :class:`NatureCNN` from 36;
    ``"impala"``: :class:`ImpalaCNN`), or None for an MLP. ``"auto"``: the CNN on uint8 frames
    (:func:`is_frames`), the MLP otherwise; a CNN without frames is an error."""
    leaf = observation_spec.get(keys.OBSERVATION, None)
    frames = is_frames(observation_spec)
    if network == "mlp" or (network == "auto" and not frames):
        return None
    if not frames:
        raise ValueError(
            f"--network {network} needs uint8 frames [C, H, W] under 'observation', got {leaf}"
        )
    return frame_cnn(leaf, network)


def q_network(
    observation_spec: Composite,
    action_spec: TensorSpec,
    hidden_sizes: Sequence[int],
    *,
    network: Network = "auto",
    dueling: bool = False,
    atoms: int = 1,
    noisy_std: float | None = None,
    noisy_heads_only: bool = False,
) -> nn.Module:
    """A Q network over the env's discrete actions with PyTorch's default init (SB3's): an MLP
    of ``hidden_sizes`` on a flat observation (:func:`q_mlp`) or the CNN of
    :func:`pixel_network` on frames, plain or dueling, with ``atoms`` outputs per action (1: Q
    values; C51's atoms or QR-DQN's quantiles otherwise). ``noisy_std``: its linear layers
    become noisy ones with that initial sigma (:func:`to_noisy`; ``noisy_heads_only``: only the
    output layers).

    Shapes:
        ``[*B, *obs] -> [*B, num_actions * atoms]``.
    """
    cnn = pixel_network(observation_spec, network)
    if cnn is None:
        obs_dim, num_actions = flat_dims(observation_spec, action_spec)
        body = q_mlp(obs_dim, num_actions, hidden_sizes, dueling=dueling, atoms=atoms)
    else:
        num_actions = int(action_spec.space.n)
        body = cnn(num_actions * atoms, dueling=dueling, atoms=atoms)
    torch_default_init_(body)
    if noisy_std is not None:
        to_noisy(body, noisy_std, heads_only=noisy_heads_only)
    return body


def quantile_embedding_parts(
    observation_spec: Composite,
    action_spec: TensorSpec,
    hidden_sizes: Sequence[int],
    *,
    network: Network = "auto",
    noisy_std: float | None = None,
    noisy_heads_only: bool = False,
) -> tuple[nn.Module, nn.Module, int]:
    """IQN's and FQF's networks (Dabney et al. 2018, arXiv 1806.06923): ``(features, head,
    width)``. ``features`` maps an observation to ``psi(s)`` of ``width`` (an MLP of
    ``hidden_sizes``, its last width being ``width``, or the hidden features of the CNN of
    :func:`pixel_network`, as in the IQN paper); ``head`` maps ``psi(s) * phi(tau)`` to one
    value per action. PyTorch's default init; ``noisy_std`` as in :func:`q_network`
    (``noisy_heads_only``: the head alone).

    Shapes:
        features ``[*B, *obs] -> [*B, width]``; head ``[*B, N, width] -> [*B, N, num_actions]``.
    """
    num_actions = int(action_spec.space.n)
    cnn = pixel_network(observation_spec, network)
    if cnn is None:
        obs_dim, _ = flat_dims(observation_spec, action_spec)
        *hidden, width = hidden_sizes
        features: nn.Module = nn.Sequential(q_mlp(obs_dim, width, hidden), nn.ReLU())
    else:  # the CNN's hidden features (its features-only form)
        features = cnn(None)
        width = features.hidden  # type: ignore[assignment]  # the CNN's feature width (an int)
    head = q_mlp(width, num_actions, ())
    for part in (features, head):
        noisy = noisy_std is not None and (not noisy_heads_only or part is head)
        torch_default_init_(to_noisy(part, noisy_std) if noisy else part)  # type: ignore[arg-type]
    return features, head, width
