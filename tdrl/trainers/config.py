"""Typed configs that are also the command line (tyro: a frozen dataclass becomes the CLI).

A recipe's ``Config`` is composed, not inherited: its algorithm's own fields plus groups,
``run: RunConfig`` always, and those it needs of :class:`WorkersConfig`, :class:`ReplayConfig`,
and the algorithm-family groups below. A recipe changes a group's defaults by giving it a
default instance (``run: RunConfig = RunConfig(env_id="CartPole-v1")``). :func:`parse` keeps
the command line flat (``--env-id``, not ``--run.env-id``), so a field name is unique within a
recipe's config; :func:`configure` builds a config from the same flat names in Python. Every
field is range-checked when its group is made (:func:`configclass`). All step counts are env
steps (frames).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # torch depends on typing_extensions
    from typing_extensions import dataclass_transform

if TYPE_CHECKING:
    import torch
    from tensordict import TensorDictBase
    from tensordict.nn import TensorDictModuleBase
    from torchrl.data import Composite, TensorSpec

    from tdrl.modules import NetworkInputs, RewardScaling, RunningObservationNorm

T = TypeVar("T")

# Fields that must be >= 1, and those that must be >= 0, wherever they appear.
_POSITIVE = {
    "total_frames", "num_envs", "eval_episodes", "eval_envs", "threads", "frames_per_batch",
    "batch_size", "buffer_size", "epochs", "minibatch_size", "critic_steps", "n_steps",
    "cg_iters", "policy_delay", "sub_sample_len",
    "target_update_interval", "recurrent_size", "seq_len", "slice_len", "num_workers",
    "steps_per_batch", "expert_episodes", "disc_steps", "disc_batch_size", "critic_minibatch_size",
    "frame_stack", "steps", "num_critics", "num_quantiles", "policy_iterations", "aux_epochs",
    "aux_minibatch_size", "shift_pad",
}  # fmt: skip
_NON_NEGATIVE = {
    "eval_every", "log_every", "checkpoint_every", "stop_after_frames", "init_random_frames",
    "eps_frames", "max_backtracks", "burn_in", "gp_lambda", "sde_sample_freq", "policy_noise",
    "noise_clip", "top_quantiles_to_drop", "renorm_warmup", "her_goals", "lr_decay_frames",
}  # fmt: skip
_UNIT = {"gamma", "lmbda", "tau", "eps_init", "eps_end", "per_beta", "intrinsic_gamma"}


def _check_field(name: str, value: object) -> None:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if name.endswith("hidden_sizes") and any(int(h) < 1 for h in value):  # type: ignore[attr-defined]
            raise ValueError(f"{flag}: every width must be >= 1, got {value}")
        return
    if name in _POSITIVE and value < 1:
        raise ValueError(f"{flag} must be >= 1, got {value}")
    if name in _NON_NEGATIVE and not value >= 0:  # NaN too
        raise ValueError(f"{flag} must be >= 0, got {value}")
    if name == "stop_at_return" and math.isnan(value):
        raise ValueError(f"{flag} must be a number (inf: never stop), got {value}")
    if (name == "lr" or name.endswith("_lr")) and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{flag} (a learning rate) must be finite and > 0, got {value}")
    if name in _UNIT and not 0.0 <= value <= 1.0:
        raise ValueError(f"{flag} must lie in [0, 1], got {value}")
    positive = ("utd_ratio", "step_timeout", "max_kl", "alpha_init")
    if name in positive and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{flag} must be finite and > 0, got {value}")
    if name == "max_grad_norm" and not value > 0:  # False for NaN
        # < 0 would flip every gradient, 0 zero them, NaN make them NaN; inf: no clipping
        raise ValueError(f"{flag} must be > 0 (inf: no clipping), got {value}")
    if (name.endswith("_coeff") or name == "beta_clone") and not (
        math.isfinite(value) and value >= 0
    ):
        raise ValueError(f"{flag} (a loss weight) must be finite and >= 0, got {value}")
    if name == "adam_beta1" and not 0.0 <= value < 1.0:
        raise ValueError(f"{flag} must lie in [0, 1), got {value}")
    if name == "seed" and value < 0:
        raise ValueError(f"{flag} must be >= 0, got {value}")
    if name == "layout_seed" and value < -1:
        raise ValueError(f"{flag} must be >= 0 (-1: a new layout each episode), got {value}")


@dataclass_transform(frozen_default=True)
def configclass(cls: type[T]) -> type[T]:
    """A frozen dataclass whose numeric fields are range-checked when it is made: counts that
    must be >= 1 or >= 0, learning rates (``lr``, ``*_lr``) finite and > 0, ``max_grad_norm``
    > 0 (inf: no clipping), loss weights (``*_coeff``) finite and >= 0, ``gamma``, ``lmbda``,
    ``tau`` in [0, 1]; an error names the flag and the value. Nested groups check themselves."""
    own = cls.__dict__.get("__post_init__")

    def __post_init__(self: Any) -> None:
        for f in fields(self):
            _check_field(f.name, getattr(self, f.name))
        if own is not None:
            own(self)

    cls.__post_init__ = __post_init__  # type: ignore[attr-defined]
    return dataclass(frozen=True)(cls)


class RunFolderError(FileExistsError):
    """A fresh run pointed at a used run folder, or ``--resume`` at one it cannot resume; on
    the command line (:func:`parse`) it prints as one line, not a traceback."""


def _one_line_errors(kind: type[BaseException], error: BaseException, trace: Any) -> None:
    if isinstance(error, RunFolderError):
        print(f"error: {error}", file=sys.stderr)
    else:
        sys.__excepthook__(kind, error, trace)


def parse(config_cls: type[T], args: Sequence[str] | None = None, *, description: str = "") -> T:
    """Build ``config_cls`` from the command line: flat flags (``--env-id``, ``--lr``) for the
    fields of every group; ``--help`` shows ``description`` (a recipe passes its docstring: what
    it does, its example commands) and the fields by group with their one-line docs."""
    import tyro

    sys.excepthook = _one_line_errors
    return tyro.cli(
        tyro.conf.OmitArgPrefixes[config_cls],  # type: ignore[index,misc,valid-type]
        args=args,
        description=description or None,
    )


def _group_fields(config_cls: type) -> dict[str, tuple[str, ...]]:
    """flat field name -> its path of attribute names in ``config_cls``."""
    paths: dict[str, tuple[str, ...]] = {}
    for f in fields(config_cls):
        kind = f.type if isinstance(f.type, type) else None
        default = f.default if f.default is not dataclasses.MISSING else None
        group = type(default) if dataclasses.is_dataclass(default) else kind
        if group is not None and dataclasses.is_dataclass(group):
            paths[f.name] = (f.name,)  # the whole group, by its name
            for name, path in _group_fields(group).items():
                paths[name] = (f.name, *path)
        else:
            paths[f.name] = (f.name,)
    return paths


def configure(config: type[T] | T, **values: Any) -> T:
    """A config with the fields named by their flat names (as on the command line) set,
    wherever their group is: ``configure(sac.Config, env_id="Pendulum-v1", batch_size=64)``,
    or a changed copy of a config instance: ``configure(cfg, seed=1)``. Every field not given
    keeps its value (a class: the recipe's defaults); a group's name replaces the whole group
    (``configure(cfg, log=LogConfig(progress=False))``). An unknown name is a ``TypeError`` that
    names it."""
    config_cls = config if isinstance(config, type) else type(config)
    paths = _group_fields(config_cls)
    unknown = sorted(set(values) - set(paths))
    if unknown:
        raise TypeError(f"{config_cls.__name__} has no field(s) {unknown}")
    default = None if isinstance(config, type) else config
    return _build(config_cls, default, {paths[k]: v for k, v in values.items()})  # type: ignore[no-any-return]


def _build(cls: type, default: Any, values: dict[tuple[str, ...], Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        own = {path[1:]: v for path, v in values.items() if path[0] == f.name}
        if not own:
            continue
        if () in own:  # a whole group, then any of its fields given by name on top
            group = own.pop(())
            kwargs[f.name] = _build(type(group), group, own) if own else group
            continue
        current = getattr(default, f.name) if default is not None else f.default
        kwargs[f.name] = _build(type(current), current, own)
    return cls(**kwargs) if default is None else dataclasses.replace(default, **kwargs)


def flat_dict(cfg: Any) -> dict[str, Any]:
    """A config's fields under their flat names (the command line's), groups flattened."""
    out: dict[str, Any] = {}
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out.update(flat_dict(value))
        else:
            out[f.name] = value
    return out


@configclass
class LogConfig:
    """Where a run's logs go besides its CSV files."""

    tensorboard: bool = True
    """write TensorBoard event files."""
    wandb: bool = False
    """also log to Weights & Biases (the wandb extra; WANDB_MODE=offline logs without network)."""
    wandb_project: str = "tdrl"
    """W&B project of the run."""
    video: bool = False
    """record one deterministic evaluation episode to video/final.mp4 at the end (the video
    extra; MuJoCo needs MUJOCO_GL=egl without a display)."""
    progress: bool = True
    """show a progress bar."""
    curve: bool = True
    """plot curve.png from eval.csv at the end."""


@configclass
class RunConfig:
    """What every recipe run has: the task and its envs, the budget, the seed, the evaluation
    schedule, the run folder with its logs and checkpoints, the device (:class:`Run` reads it)."""

    def __post_init__(self) -> None:
        if self.stop_after_frames and not self.checkpoint_every:
            raise ValueError(
                f"--stop-after-frames {self.stop_after_frames} pauses the run to be resumed, "
                "but --checkpoint-every 0 writes no checkpoint to resume from"
            )
        if self.device not in ("auto", "cpu"):  # plain names need no torch (--help stays fast)
            self.torch_device  # noqa: B018  # checks --device
        if self.compile_mode != "default" and not self.compile:
            raise ValueError(f"--compile-mode {self.compile_mode} needs --compile")
        if self.cudagraphs and self.device == "cpu":
            raise ValueError(
                "--cudagraphs captures the update step on a CUDA device; this run's --device is "
                "cpu (--device cuda, or drop --cudagraphs)"
            )

    def refuse_cudagraphs(self, recipe: str, why: str) -> None:
        """Raise, naming ``recipe`` and ``why``, if --cudagraphs is asked of a recipe whose step
        cannot be captured (--compile alone still applies)."""
        if self.cudagraphs:
            raise ValueError(f"--cudagraphs: {recipe} {why}; use --compile without --cudagraphs")

    def compile_options(self) -> dict[str, Any]:
        """--compile, --compile-mode and --cudagraphs as the keywords of
        :func:`tdrl.trainers.compiled_step`."""
        return {"compile": self.compile, "mode": self.compile_mode, "cudagraphs": self.cudagraphs}

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes`` (a recipe's default run from a preset: ``OFF_POLICY_RUN``)."""
        return dataclasses.replace(self, **changes)

    @property
    def torch_device(self) -> torch.device:
        """``device`` resolved ("auto": CUDA when present), checked to exist here."""
        import torch

        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        try:
            device = torch.device(self.device)
        except RuntimeError as err:
            raise ValueError(f"--device {self.device!r} is not a device: {err}") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"--device {self.device!r}: this machine has no CUDA device")
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"--device must be cpu, cuda[:N] or auto, got {self.device!r}")
        return device

    env_id: str = "Hopper-v5"
    """gymnasium id of the task."""
    total_frames: int = 200_000
    """env steps in total."""
    num_envs: int = 8
    """parallel training envs."""
    mode: Literal["sync", "async"] = "sync"
    """one process (sync; exact resume) or one subprocess per env (async)."""
    env_backend: Literal["gymnasium", "envpool", "torchrl", "mujoco_warp"] = "gymnasium"
    """who runs the training envs: gymnasium vector envs, envpool's C++ threads (sync only),
    TorchRL's GymEnv (a SerialEnv of num_envs) through tdrl.envs.from_torchrl, or MuJoCo Warp's
    worlds on --device (Hopper-v5, Walker2d-v5, HalfCheetah-v5; tdrl.envs.warp_backend)."""
    seed: int = 0
    """seed of the envs, the networks and the sampling (evaluation: seed + 10000)."""
    eval_every: int = 20_000
    """env steps between evaluations (0: only at the end)."""
    eval_episodes: int = 10
    """episodes per evaluation."""
    eval_deterministic: bool = True
    """evaluate the policy's deterministic action (the mode); --no-eval-deterministic: its
    sampled one, as rl-baselines3-zoo and CleanRL evaluate on Atari (a greedy Breakout policy
    may never press FIRE after a lost life). A policy that is deterministic anyway (TD3's, DDPG's
    and the greedy Q policies) acts the same; noisy nets act on their last noise draw; the final
    video stays deterministic."""
    eval_envs: int = 5
    """parallel evaluation envs (at most eval_episodes are made)."""
    stop_at_return: float = math.inf
    """stop once an evaluation's mean return reaches this (time-to-solve runs)."""
    log_every: int = 0
    """env steps between rows of train.csv (0: after every batch)."""
    checkpoint_every: int = 20_000
    """env steps between checkpoints, one also at the end (0: never); off-policy checkpoints
    include the replay buffer."""
    stop_after_frames: int = 0
    """end this process after this many env steps of its own (0: never; a resumed run counts
    from where it resumed); it checkpoints there, so --resume goes on (needs checkpoint_every)."""
    resume: bool = False
    """continue the run in log_dir from its newest checkpoint (refused when it was written by
    another recipe, with other settings or on other data: see --resume-allow-changes)."""
    resume_allow_changes: bool = False
    """with --resume: continue although the checkpoint was written by another recipe, with other
    settings or on other data (the differences are printed and kept in warnings.log). Without
    it only the budget, evaluation, logging, pausing, device, threads and workers may change."""
    log_dir: str = ""
    """run folder (default runs/<algo>/<env_id>/seed<seed>)."""
    threads: int = 1
    """torch CPU threads (one is fastest for small networks)."""
    device: str = "cpu"
    """where the networks, the losses and the replay buffer live: cpu, cuda, cuda:N, or auto
    (CUDA when present). The envs always step on the CPU."""
    compile: bool = False
    """torch.compile the update step (loss, backward, optimizer step) before the first update;
    the first steps are slower while it compiles."""
    compile_mode: Literal[
        "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"
    ] = "default"
    """torch.compile's mode, with --compile."""
    cudagraphs: bool = False
    """capture the update step in a CUDA graph (tensordict's CudaGraphModule) and replay it
    (--device cuda; with --compile, the compiled step is captured)."""
    step_timeout: float = 120.0
    """async envs: seconds a step may take before the stuck workers are named and stopped."""
    flush_denormal: bool = True
    """flush subnormal floats to zero on CPU while the run trains: Adam's moments of dead ReLU
    units decay into subnormals, which the CPU handles tens of times slower."""
    log: LogConfig = LogConfig()


# Fields added to the configs after checkpoints were written without them, with the value those
# runs had: a resume compares a saved config that lacks one against this value.
FIELDS_ADDED: dict[str, Any] = {
    "layout_seed": -1, "rnd_first_visit": False, "icm_first_visit": False,
    # sac.py's REDQ options and td3.py's --noise (DDPG joined it)
    "sub_sample_len": 2, "critic_dropout": 0.0, "critic_layer_norm": False, "noise": "gaussian",
    "update_order": "joint",  # sac.py --update-order
    "cql_bc_steps": 0, "cql_deterministic_backup": False,  # offline.py's CQL, before the authors'
    "apex_epsilon": False,  # drqn.py's per-env epsilons
}  # fmt: skip


def added_field(name: str, recipe: str | None) -> Any:
    """The value field ``name`` had in a run saved before it existed (None: not an added field):
    :data:`FIELDS_ADDED`'s, and for ``algo`` the recipe's own algorithm (td3.py and sac.py ran
    TD3 and SAC before they took DDPG, TQC, CrossQ and REDQ as ``--algo``)."""
    return recipe if name == "algo" else FIELDS_ADDED.get(name)


# Settings a --resume may change without --resume-allow-changes: where and how the run is kept,
# logged, evaluated and computed, and its budget (a schedule over the budget, such as
# --lr-decay or PER's beta, stretches to the new one from the checkpoint on). Every other field
# changes what is learned and must match the checkpoint's.
RESUME_MAY_CHANGE = frozenset({
    "resume", "resume_allow_changes", "log_dir", "total_frames", "stop_after_frames",
    "stop_at_return", "eval_every", "eval_episodes", "eval_envs", "eval_deterministic", "log_every",
    "checkpoint_every", "threads", "device", "compile", "compile_mode", "cudagraphs",
    "step_timeout", "flush_denormal", "num_workers", "ray_address", "tensorboard", "wandb",
    "wandb_project", "video", "progress", "curve",
})  # fmt: skip


# The run settings of the off-policy MuJoCo recipes (SAC, TD3, DDPG, REDQ): one env, 1M steps,
# an evaluation every 10k, a train row every 1k, a checkpoint (with the buffer) every 100k.
OFF_POLICY_RUN = RunConfig(
    env_id="HalfCheetah-v5", total_frames=1_000_000, num_envs=1, eval_every=10_000,
    log_every=1_000, checkpoint_every=100_000,
)  # fmt: skip
# The Q-learning recipes' (DQN, Rainbow) on CartPole-v1, rl-baselines3-zoo's budget.
Q_LEARNING_RUN = RunConfig(
    env_id="CartPole-v1", total_frames=50_000, num_envs=1, eval_every=5_000, log_every=1_000,
    checkpoint_every=25_000,
)  # fmt: skip
# The multi-agent recipes' (MAPPO, QMIX, MADDPG): BenchMARL 1.5.1's experiment settings
# (conf/experiment/base_experiment.yaml: 10 envs, evaluations of 10 episodes every 120k frames)
# and task configs (conf/task/vmas/navigation.yaml, conf/task/pettingzoo/simple_spread.yaml).
MULTIAGENT_RUN = RunConfig(
    env_id="vmas/navigation", total_frames=1_200_000, num_envs=10, eval_every=120_000,
    eval_episodes=10, log_every=6_000, checkpoint_every=120_000,
)  # fmt: skip
MULTIAGENT_TASKS: dict[str, dict[str, Any]] = {
    "vmas/navigation": dict(
        max_steps=100,
        n_agents=3,
        collisions=True,
        agents_with_same_goal=1,
        split_goals=False,
        observe_all_goals=False,
        shared_rew=False,
        lidar_range=0.35,
        agent_radius=0.1,
    ),
    "mpe2/simple_spread_v3": dict(max_cycles=100, N=3, local_ratio=0.5),
}


@configclass
class WorkersConfig:
    """Collection in other processes: Ray actors or local subprocesses."""

    collector: Literal["local", "ray", "process"] = "local"
    """local: tdrl's Collector in this process; ray: a RayCollector of num_workers Ray actors
    with num_envs envs each (the ray extra); process: the same on local subprocesses. Weights
    are sent after every update."""
    num_workers: int = 2
    """collector=ray|process: worker count."""
    ray_address: str = ""
    """collector=ray: a running Ray cluster to join ('auto', 'host:port'); empty: a local Ray."""
    steps_per_batch: int = 1
    """env steps of each env per collected batch, stored before its gradient steps (1: SB3's
    and Tianshou's default; with collector=ray, e.g. 50: fewer round trips to the workers)."""


@configclass
class ReplayConfig:
    """An off-policy run's replay: capacity, sampling, and when learning starts."""

    buffer_size: int = 1_000_000
    """replay buffer capacity."""
    batch_size: int = 256
    """transitions per gradient step."""
    init_random_frames: int = 10_000
    """uniform random steps before the policy acts and learning starts."""
    utd_ratio: float = 1.0
    """gradient steps per env step (the update-to-data ratio)."""


# BenchMARL 1.5.1's off-policy replay: 1000 gradient steps of 128 per 6000 frames, a 1M buffer.
MULTIAGENT_REPLAY = ReplayConfig(
    buffer_size=1_000_000, batch_size=128, init_random_frames=0, utd_ratio=1000 / 6000
)


@configclass
class PERConfig:
    """Prioritized replay (Schaul et al. 2015, arXiv 1511.05952) and n-step returns."""

    n_steps: int = 1
    """n-step returns from the buffer."""
    prioritized: bool = False
    """prioritized replay (proportional), on the loss's per-sample priorities."""
    per_alpha: float = 0.6
    """PER priority exponent."""
    per_beta: float = 0.4
    """PER importance-weight exponent at the start, annealed to 1 by the end."""

    def buffer_kwargs(self) -> dict[str, Any]:
        """What :func:`tdrl.data.make_replay_buffer` takes of this group."""
        return dict(prioritized=self.prioritized, alpha=self.per_alpha, beta=self.per_beta,
                    n_steps=self.n_steps)  # fmt: skip

    def anneal(self, buffer: Any, frames: int, total_frames: int) -> None:
        """A prioritized ``buffer``'s importance-weight exponent, linear from ``per_beta`` to 1
        over the run's env steps (Schaul et al., sec. 3.4); nothing for a uniform buffer."""
        from tdrl.data import PrioritizedReplayBuffer
        from tdrl.modules import linear_schedule

        if isinstance(buffer, PrioritizedReplayBuffer):
            buffer.beta = linear_schedule(self.per_beta, 1.0, total_frames, frames)


@configclass
class DistributionalConfig:
    """The return distribution of the distributional DQNs and its parameters."""

    algo: Literal["c51", "qrdqn", "iqn", "fqf", "dqn"] = "c51"
    """the return distribution: atoms (c51), quantiles (qrdqn), sampled (iqn) or proposed (fqf);
    dqn: none, a scalar Q (Rainbow without its distribution, Hessel et al.'s ablation)."""
    num_atoms: int = 51
    """c51: atoms of the support."""
    v_min: float = 0.0
    """c51: lowest return of the support (returns beyond it are clamped; Atari: -10)."""
    v_max: float = 100.0
    """c51: highest return of the support (CartPole's discounted returns lie in [0, 100])."""
    num_quantiles: int = 25
    """qrdqn: quantiles per action (the paper: 200; the loss compares N x N pairs a sample)."""
    num_fractions: int = 32
    """fqf: fractions per state (32 in the paper)."""
    fraction_lr: float = 2.5e-9
    """fqf: learning rate of the fraction proposal network (the paper's, with Adam here)."""
    fraction_entropy_coeff: float = 0.0
    """fqf: weight of the proposal's entropy bonus."""

    def build(
        self,
        observation_spec: Composite,
        action_spec: TensorSpec,
        hidden_sizes: Sequence[int],
        *,
        dueling: bool = False,
        network: Literal["auto", "mlp", "cnn", "impala"] = "auto",
        noise: NoisyConfig | None = None,
    ) -> torch.nn.Module:
        """The greedy Q actor of ``algo`` (SB3's init; noisy layers where ``noise`` asks):
        c51 and qrdqn an MLP or CNN with ``num_actions x atoms`` outputs (``dueling``: a
        value/advantage head per atom); iqn and fqf state features times an embedding of the
        quantile fractions, then a head; dqn recipes/dqn.py's network (one output an action)."""
        from tdrl.modules import (
            CategoricalQValueActor,
            FQFQValueActor,
            IQNQValueActor,
            QuantileQValueActor,
            QValueActor,
        )
        from tdrl.modules.networks import q_network, quantile_embedding_parts

        if dueling and self.algo in ("iqn", "fqf"):
            raise ValueError(f"--dueling is for --algo c51 and qrdqn, not {self.algo}")
        num_actions = int(action_spec.space.n)
        noise = noise if noise is not None else NoisyConfig()
        net: dict[str, Any] = dict(
            network=network, noisy_std=noise.std, noisy_heads_only=noise.noisy_layers == "heads"
        )
        if self.algo == "dqn":
            return QValueActor(q_network(observation_spec, action_spec, hidden_sizes,
                                         dueling=dueling, **net))  # fmt: skip
        if self.algo in ("c51", "qrdqn"):
            atoms = self.num_atoms if self.algo == "c51" else self.num_quantiles
            body = q_network(observation_spec, action_spec, hidden_sizes, dueling=dueling,
                             atoms=atoms, **net)  # fmt: skip
            if self.algo == "c51":
                return CategoricalQValueActor(
                    body, num_actions, v_min=self.v_min, v_max=self.v_max, num_atoms=atoms
                )
            return QuantileQValueActor(body, num_actions, num_quantiles=atoms)
        features, head, width = quantile_embedding_parts(
            observation_spec, action_spec, hidden_sizes, **net
        )
        if self.algo == "iqn":
            return IQNQValueActor(features, head, num_actions, width)
        return FQFQValueActor(features, head, num_actions, width, num_fractions=self.num_fractions)


@configclass
class NoisyConfig:
    """Noisy nets (Fortunato et al. 2017, arXiv 1706.10295): exploration by learned noise."""

    noisy: bool = False
    """noisy linear layers (new noise every env and gradient step) explore instead of epsilon."""
    noisy_std: float = 0.5
    """--noisy: initial sigma_0 of every noisy layer (Fortunato et al.: 0.5; Tianshou: 0.1)."""
    noisy_layers: Literal["all", "heads"] = "all"
    """--noisy: every linear layer (Hessel et al.) or each head's output layer (Tianshou)."""
    noisy_epsilon: bool = False
    """--noisy: keep epsilon-greedy on top of the noise (Tianshou's Rainbow; Hessel et al.: off)."""

    @property
    def std(self) -> float | None:
        """The noisy layers' initial sigma, None without --noisy."""
        return self.noisy_std if self.noisy else None


@configclass
class PixelConfig:
    """Frames as observations: the network body, frame stacks and the Atari options."""

    network: Literal["auto", "mlp", "cnn", "impala"] = "auto"
    """network body: auto (a CNN on uint8 frames, else an MLP of hidden_sizes), mlp, cnn
    (MinAtar's or the Nature CNN by frame size) or impala (the IMPALA ResNet)."""
    frame_stack: int = 1
    """pixel envs: frames per observation (DQN on Atari: 4), each stored once in the buffer."""
    terminal_on_life_loss: bool = False
    """Atari: a lost life ends the training episode (evaluation plays whole games)."""
    clip_rewards: bool = False
    """learn from rewards clipped to [-1, 1] (DQN on Atari); logged returns stay the env's."""
    layout_seed: int = -1
    """tdrl/MiniGrid-*: every episode on the layout of this seed, in training and evaluation (a
    singleton task); -1: a new layout each episode."""

    def env_kwargs(self, env_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """What :func:`tdrl.trainers.make_envs` takes for ``env_id``: both envs' options, the
        training envs'; a layout seed for a task without layouts is refused by name."""
        both: dict[str, Any] = {"frame_stack": self.frame_stack} if self.frame_stack > 1 else {}
        if self.layout_seed >= 0:
            if not env_id.startswith("tdrl/MiniGrid-"):
                raise ValueError(
                    f"--layout-seed {self.layout_seed}: only the tdrl/MiniGrid-* tasks have "
                    f"layouts to fix; {env_id!r} has none"
                )
            both["layout_seed"] = self.layout_seed
        train = {"terminal_on_life_loss": True} if self.terminal_on_life_loss else {}
        return both, train


@configclass
class AugmentConfig:
    """Augmented replay samples (the replay-buffer recipes on frames or image entries)."""

    augment: Literal["off", "shift"] = "off"
    """augment the sampled frames (shift: DrQ's random shift of up to shift_pad pixels, the
    observation and the next observation each their own; Kostrikov et al. 2020)."""
    shift_pad: int = 4
    """--augment shift: the largest shift in pixels (DrQ: 4 for 84x84 frames)."""

    def sample_transform(self, observation_spec: Composite, then: Any = None) -> Any:
        """The replay buffer's sample transform: the augmentation (torch's global generator,
        which checkpoints save), then ``then`` (a dict observation's concatenation), either or
        none. An augmentation shifts every image entry (``[C, H, W]``: the frames under
        ``"observation"``, a dict observation's uint8 entries, which its networks read through
        CNNs), at the root and under ``"next"``; an env without one is refused."""
        if self.augment == "off":
            return then
        import torch

        from tdrl import keys
        from tdrl.data.augment import RandomShift

        batch_dims = len(observation_spec.shape)
        found = {
            key: leaf for key, leaf in observation_spec.items(True, True) if key != keys.ACTION_MASK
        }
        images = [  # the frames under "observation" (uint8 or float), a dict's uint8 entries
            key
            for key, leaf in found.items()
            if len(leaf.shape) - batch_dims == 3
            and (key == keys.OBSERVATION or leaf.dtype == torch.uint8)
        ]
        if not images:
            has = ", ".join(
                f"{key!r}: {leaf.dtype} {tuple(leaf.shape[batch_dims:])}"
                for key, leaf in found.items()
            )
            raise ValueError(
                f"--augment {self.augment} shifts images: it needs [C, H, W] frames (under "
                f"'observation' or a dict entry), the env has {has or 'none'}"
            )
        nested = [(keys.NEXT, *((key,) if isinstance(key, str) else key)) for key in images]
        shift = RandomShift(self.shift_pad, [*images, *nested])
        return shift if then is None else _Chain(shift, then)


class _Chain:
    """Two sample transforms, one after the other (picklable, unlike a lambda)."""

    def __init__(self, first: Any, second: Any) -> None:
        self.first, self.second = first, second

    def __call__(self, batch: Any) -> Any:
        return self.second(self.first(batch))


@configclass
class GoalConfig:
    """Dict observations and goal-conditioned envs: the entries the networks read, and hindsight
    replay (Andrychowicz et al. 2017, arXiv 1707.01495) from a goal env's compute_reward."""

    observation_keys: tuple[str, ...] = ()
    """dict observations: the entries the networks read, concatenated in this order (empty:
    every entry, as SB3's MultiInputPolicy; goal envs: observation desired_goal is enough)."""
    her: Literal["off", "future", "final", "episode"] = "off"
    """hindsight replay: relabel sampled goals with goals reached later in the episode (future),
    at its end (final) or anywhere in it (episode)."""
    her_goals: int = 4
    """her: hindsight goals per real one, k (k / (k + 1) of the samples are relabelled)."""

    def inputs(self, observation_spec: Composite, *, images: bool = False) -> NetworkInputs:
        """What the networks read (:func:`tdrl.modules.network_inputs`): the spec the builders
        take, the entry, the wrapper that acts on the env's observation, the buffer's transform
        and, with ``images`` (a recipe whose networks take :meth:`NetworkInputs.attach`), the
        CNN encoder of image entries."""
        from tdrl.modules import network_inputs

        return network_inputs(observation_spec, self.observation_keys, images=images)

    def refuse_rewritten_rewards(self, **flags: Any) -> None:
        """Hindsight replay recomputes stored rewards with the env's ``compute_reward``: an
        error naming the flags (``clip_rewards=True``, ``intrinsic_coeff=1.0``) that would
        rewrite them first."""
        on = sorted(f"--{name.replace('_', '-')}" for name, value in flags.items() if value)
        if self.her != "off" and on:
            raise ValueError(
                f"--her recomputes rewards with the env's compute_reward: it is not combined "
                f"with {' or '.join(on)}, which rewrite them"
            )

    def replay_kwargs(self, env_id: str) -> dict[str, Any]:
        """What :func:`tdrl.data.make_replay_buffer` takes for hindsight replay on ``env_id``
        (its ``compute_reward`` and ``compute_terminated``); nothing while ``her`` is off."""
        if self.her == "off":
            return {}
        from tdrl.envs import goal_functions

        reward, terminated = goal_functions(env_id)
        return dict(her=self.her, her_goals=self.her_goals, compute_reward=reward,
                    compute_terminated=terminated)  # fmt: skip


@configclass
class ActorCriticConfig:
    """An off-policy actor and critics with Polyak-averaged targets (SAC, TD3, DDPG, REDQ)."""

    hidden_sizes: tuple[int, ...] = (256, 256)
    """hidden layer widths of the networks."""
    actor_lr: float = 1e-3
    """actor learning rate."""
    critic_lr: float = 1e-3
    """critic learning rate."""
    tau: float = 0.005
    """Polyak coefficient of the target critics."""
    gamma: float = 0.99
    """discount."""


@configclass
class EntropyConfig:
    """The entropy coefficient alpha and its tuning (SAC, REDQ, discrete SAC, CQL)."""

    alpha_lr: float = 3e-4
    """entropy-coefficient learning rate."""
    alpha_init: float = 1.0
    """initial entropy coefficient."""
    target_entropy: str = "auto"
    """entropy target of the alpha tuning: "auto" (the loss's default: -action_dim for Gaussian
    policies, 0.98 log(actions) for categorical ones) or a number."""

    def entropy_target(self) -> str | float:
        """``target_entropy`` as the losses take it: "auto" or a float (checked)."""
        from tdrl.objectives.offpolicy import checked_target_entropy  # torch: not at --help

        return checked_target_entropy(self.target_entropy)


@configclass
class TD3Config:
    """TD3's delayed actor updates and smoothed target policy (Fujimoto et al. 2018, arXiv
    1802.09477): TD3, and TD3+BC offline."""

    policy_delay: int = 2
    """critic steps per actor step and target update."""
    policy_noise: float = 0.2
    """target policy smoothing noise (half-range units)."""
    noise_clip: float = 0.5
    """clip of the smoothing noise (half-range units)."""


@configclass
class QLearningConfig:
    """An epsilon-greedy Q network with a hard-copied target (DQN and its variants, DRQN)."""

    frames_per_batch: int = 256
    """env steps per collected batch (SB3's train_freq)."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """hidden layer widths of the Q network."""
    lr: float = 1e-3
    """Adam learning rate."""
    gamma: float = 0.99
    """discount."""
    eps_init: float = 1.0
    """initial exploration epsilon."""
    eps_end: float = 0.05
    """final exploration epsilon."""
    eps_frames: int = 10_000
    """env steps over which epsilon decays."""
    target_update_interval: int = 200
    """gradient steps between hard target copies."""
    max_grad_norm: float = 10.0
    """gradient norm clip."""


# The Q-learning recipes' (DQN, Rainbow) replay and Q settings: rl-baselines3-zoo's tuned
# CartPole-v1 DQN (hyperparams/dqn.yml; the target copy every 128 gradient steps is the zoo's
# every 10 env steps, as SB3 trains in bursts).
Q_LEARNING_REPLAY = ReplayConfig(
    buffer_size=100_000, batch_size=64, init_random_frames=1_000, utd_ratio=0.5
)
Q_LEARNING_Q = QLearningConfig(
    lr=2.3e-3, eps_end=0.04, eps_frames=8_000, target_update_interval=128
)


@configclass
class OnPolicyConfig:
    """What every on-policy recipe has: rollout size, learning rate and its decay, discount."""

    frames_per_batch: int = 2048
    """env steps per rollout (a multiple of num_envs)."""
    lr: float = 3e-4
    """learning rate."""
    lr_decay: bool = True
    """decay the learning rate linearly to 0 over total_frames (or lr_decay_frames)."""
    lr_decay_frames: int = 0
    """--lr-decay: the learning rate reaches 0 after this many env steps or total_frames,
    whichever is more. Tianshou's MuJoCo benchmarks decay over their 3M-step schedule while
    their tables read the first 1M."""
    gamma: float = 0.99
    """discount."""
    normalize_advantage: bool = True
    """normalize advantages (REINFORCE: the returns) to zero mean and unit std over each
    minibatch, or over the batch where an update takes it whole."""
    scale_rewards: bool = False
    """divide rewards by the running std of the discounted return before the estimator, so the
    critic learns scaled returns (SB3's VecNormalize reward part, CleanRL's NormalizeReward)."""

    def lr_schedule(
        self, optimizer: torch.optim.Optimizer, total_frames: int
    ) -> torch.optim.lr_scheduler.LambdaLR:
        """The learning-rate schedule, stepped once per batch: linear to 0 over the batches of
        ``max(lr_decay_frames, total_frames)`` env steps, with ``lr_decay``; else constant."""
        from tdrl.trainers.optim import linear_decay

        frames = max(self.lr_decay_frames, total_frames)
        batches = math.ceil(frames / self.frames_per_batch)
        return linear_decay(optimizer, batches, decay=self.lr_decay)

    def reward_scaler(self, device: torch.device | str = "cpu") -> RewardScaling | None:
        """``scale_rewards``: a :class:`~tdrl.modules.RewardScaling` at this discount, to run
        on each batch before the estimator (and to checkpoint); else None."""
        from tdrl.modules import RewardScaling

        return RewardScaling(self.gamma).to(device) if self.scale_rewards else None


@configclass
class PPGConfig:
    """PPG's phases (Cobbe et al. 2020; CleanRL's ``ppg_procgen.py`` settings)."""

    policy_iterations: int = 32
    """N_pi: rollouts of the policy phase (PPO) between two auxiliary phases."""
    aux_epochs: int = 6
    """E_aux: passes over the stored states in an auxiliary phase."""
    aux_minibatch_size: int = 256
    """states per auxiliary gradient step."""
    beta_clone: float = 1.0
    """weight of the behavioural-cloning KL(pi_old || pi) in the auxiliary phase."""


class Networks(NamedTuple):
    """An on-policy recipe's networks (:meth:`NetworkConfig.build`)."""

    actor: TensorDictModuleBase
    critic: TensorDictModuleBase
    obs_norm: RunningObservationNorm | None
    acting: TensorDictModuleBase
    policy: TensorDictModuleBase
    """the actor acting on the env's own observation (evaluation): on a dict observation, the
    entries' concatenation first (the collector's ``acting`` writes it into the rollout, where
    the actor and the normalizer read it; the critic computes it itself, under ``"next"``
    too)."""

    def state(self, **objects: Any) -> dict[str, Any]:
        """What a checkpoint holds: the actor, the critic and ``objects`` (optimizer, schedule,
        scalers; None left out), by name."""
        named = {"actor": self.actor, "critic": self.critic, **objects}
        return {name: obj for name, obj in named.items() if obj is not None}

    def update_obs_norm(self, batch: TensorDictBase) -> None:
        """Fold ``batch``'s observations into the running statistics (after the update, which
        saw the statistics the batch was collected with); nothing without normalization."""
        if self.obs_norm is not None:
            self.obs_norm.update(batch.get(self.obs_norm.in_keys[0]))


@configclass
class NetworkConfig:
    """An on-policy actor and critic (:func:`tdrl.modules.actor_critic`'s options)."""

    hidden_sizes: tuple[int, ...] = (64, 64)
    """hidden layer widths of the actor and the critic."""
    init_log_std: float = -0.5
    """initial log standard deviation of the Gaussian policy."""
    normalize_observations: bool = True
    """running mean/std observation normalization."""
    activation: Literal["tanh", "relu"] = "tanh"
    """activation of the actor's and critic's hidden layers (tanh: Tianshou's and SB3's MuJoCo
    default; relu: e.g. rl-baselines3-zoo's recurrent PPO)."""
    ortho_init: bool = True
    """orthogonal init of the networks' linear layers (gains sqrt 2, policy head 0.01, value head
    1); off: PyTorch's default init (SB3's ortho_init False)."""
    rescale_actions: bool = True
    """a Gaussian policy acts in [-1, 1] rescaled to the env's bounds; off: in the env's units,
    clipped by the env (SB3's PPO)."""
    recurrent: Literal["none", "lstm", "gru"] = "none"
    """a recurrent actor (LSTM or GRU on the observation, then the MLP head) for partially
    observed tasks, e.g. CartPoleNoVel-v1 (A2C, PPO, GAIL, IMPALA)."""
    recurrent_size: int = 64
    """width of the recurrent layer."""
    seq_len: int = 16
    """recurrent actor: steps per training sequence (must divide frames_per_batch / num_envs);
    minibatches hold whole sequences."""
    recurrent_critic: bool = False
    """with --recurrent: the critic gets its own recurrent layer too (sb3-contrib's
    enable_critic_lstm; the collector runs it beside the actor to store its state)."""
    sde_sample_freq: int = 0
    """gSDE for continuous actions (SB3's use_sde): exploration noise linear in the policy's last
    hidden features, new noise weights every this many steps; 0: a state-independent log-std."""

    @property
    def sequence_length(self) -> int | None:
        """``seq_len`` for a recurrent actor, else None (minibatches of single steps)."""
        return None if self.recurrent == "none" else self.seq_len

    def refuse_memory(self, recipe: str = "") -> None:
        """Raise, naming the flag, if a recurrent or gSDE policy is asked of a recipe that has
        none (call it before the envs are made)."""
        if self.recurrent != "none" or self.sde_sample_freq:
            flag = "--recurrent" if self.recurrent != "none" else "--sde-sample-freq"
            raise ValueError(f"{recipe or 'this recipe'} has no {flag} policies")

    def refuse_captured_sequences(self, recipe: str, *, cudagraphs: bool) -> None:
        """Raise, naming the flags, if ``cudagraphs`` (--cudagraphs) is asked with a --recurrent
        network: in sequence mode it cuts the sequences where an episode starts, which it reads
        on the host (a host sync, which capture forbids). --compile alone takes it."""
        if cudagraphs and self.recurrent != "none":
            raise ValueError(
                f"--cudagraphs: {recipe}'s --recurrent {self.recurrent} networks cut their "
                "sequences where an episode starts, read on the host, which a CUDA graph cannot "
                "capture; use --compile without --cudagraphs"
            )

    def build(
        self,
        observation_spec: Composite,
        action_spec: TensorSpec,
        *,
        recipe: str = "",
        memory: bool = True,
        shared_encoder: bool = True,
        network: Literal["auto", "mlp", "cnn", "impala"] = "auto",
    ) -> Networks:
        """The actor, the critic, the observation normalizer (or None) for these specs, and
        what the collector acts with: the actor, and the critic after it when the critic is
        recurrent (so its state is stored in the rollout for the estimator and the loss).
        ``memory=False``: a recipe without recurrent or gSDE policies refuses those flags;
        ``network``: the body on frames (:func:`tdrl.modules.networks.pixel_network`: auto, mlp,
        cnn or impala). ``shared_encoder=False``: on frames, the actor and the critic get a CNN
        each (and on a dict observation's image entries an encoder each). Image entries of a
        dict go through a CNN inside the networks (:meth:`~tdrl.modules.NetworkInputs.attach`);
        observation normalization is then off (it would normalize learned features)."""
        from tensordict.nn import TensorDictSequential
        from torch import nn

        from tdrl.modules import actor_critic, network_inputs

        if not memory:
            self.refuse_memory(recipe)
        # a dict observation: every entry, concatenated; image entries through a CNN each
        inputs = network_inputs(observation_spec, images=True)
        encoded = inputs.encoder is not None
        if encoded and (self.recurrent != "none" or self.sde_sample_freq):
            flag = "--recurrent" if self.recurrent != "none" else "--sde-sample-freq"
            raise ValueError(f"{flag} is not supported on image entries of a dict observation")
        actor, critic, obs_norm = actor_critic(
            inputs.spec, action_spec, hidden_sizes=self.hidden_sizes,
            init_log_std=self.init_log_std,
            normalize_observations=self.normalize_observations and not encoded,
            activation=nn.ReLU if self.activation == "relu" else nn.Tanh,
            recurrent=None if self.recurrent == "none" else self.recurrent,
            recurrent_size=self.recurrent_size, recurrent_critic=self.recurrent_critic,
            sde_sample_freq=self.sde_sample_freq, ortho_init=self.ortho_init,
            rescale_actions=self.rescale_actions, shared_encoder=shared_encoder,
            observation_key=inputs.key, network=network,
        )  # fmt: skip
        # image entries: the CNN encoder inside both (one shared, or one each), initialised as
        # the CNN on plain frames is
        actor = inputs.attach(actor)
        critic = inputs.attach(inputs.policy(critic), own=not shared_encoder)
        if encoded and self.ortho_init:
            from tdrl.modules.networks import orthogonal_encoders_

            orthogonal_encoders_([actor.encoder, critic.encoder])
        # the estimator runs the critic under "next" as well: the concatenation in front
        recurrent_critic = self.recurrent != "none" and self.recurrent_critic
        acting = TensorDictSequential(actor, critic) if recurrent_critic else actor
        return Networks(actor, critic, obs_norm, inputs.policy(acting), inputs.policy(actor))


class IntrinsicParts(NamedTuple):
    """An exploration bonus's parts for an on-policy recipe (:meth:`IntrinsicConfig.build`)."""

    module: Any  # tdrl.objectives.RNDLoss or ICMLoss: the intrinsic reward and its models' loss
    critic_loss: Any  # tdrl.objectives.IntrinsicValueLoss
    estimator: Any  # GAE on the intrinsic keys: the non-episodic intrinsic advantage
    extrinsic_coeff: float = 1.0
    intrinsic_coeff: float = 1.0

    def attach(self, loss: Any, estimator: Any) -> tuple[Any, Any]:
        """The policy's loss and estimator with the bonus's beside them: the loss plus the
        bonus's model losses and ``loss_intrinsic_value`` (:class:`~tdrl.objectives.WithBonus`),
        and the advantage with the intrinsic one mixed in (``extrinsic_coeff * A +
        intrinsic_coeff * A_int``, :class:`~tdrl.objectives.MixedAdvantage`)."""
        from tdrl.objectives import MixedAdvantage, WithBonus

        mixed = MixedAdvantage(estimator, self.estimator, self.extrinsic_coeff,
                               self.intrinsic_coeff)  # fmt: skip
        return WithBonus(loss, self.module, self.critic_loss), mixed

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the bonus: its models (and first-visit sets), its critic."""
        return {"bonus": self.module, "intrinsic_critic": self.critic_loss}


@configclass
class IntrinsicConfig:
    """An exploration bonus: RND (Burda et al. 2018, arXiv 1810.12894) or ICM (Pathak et al.
    2017, arXiv 1705.05363); an intrinsic reward, its own critic and non-episodic advantage,
    mixed into the policy's. Off while --intrinsic-coeff is 0."""

    intrinsic: Literal["rnd", "icm"] = "rnd"
    """the bonus: rnd (random network distillation) or icm (the intrinsic curiosity module)."""
    intrinsic_coeff: float = 0.0
    """weight of the intrinsic advantage (0: no bonus; CleanRL's RND: 1)."""
    extrinsic_coeff: float = 1.0
    """weight of the env's advantage when a bonus is on (CleanRL's RND: 2)."""
    intrinsic_gamma: float = 0.99
    """discount of the intrinsic return (RND's paper: 0.99)."""
    rnd_update_proportion: float = 1.0
    """rnd: fraction of each minibatch the predictor learns from (CleanRL: 0.25, 128 envs)."""
    rnd_first_visit: bool = False
    """rnd: reward only an episode's first visit of each observation (NovelD's episodic
    restriction: a lifelong bonus alone leaves agents circling in procedurally generated
    MiniGrid)."""
    icm_beta: float = 0.2
    """icm: the forward model's share of its loss (the inverse model's: 1 - beta)."""
    icm_first_visit: bool = False
    """icm: reward only an episode's first visit of each observation (as --rnd-first-visit)."""
    bonus_hidden_sizes: tuple[int, ...] = (256, 256)
    """widths of the bonus's ReLU MLPs (RND's target and predictor, ICM's features: their
    output is the last width)."""

    def __post_init__(self) -> None:
        if not self.bonus_hidden_sizes:
            raise ValueError("--bonus-hidden-sizes needs at least one width (the output's)")
        if not 0.0 < self.rnd_update_proportion <= 1.0:
            raise ValueError(
                f"--rnd-update-proportion must be in (0, 1], got {self.rnd_update_proportion}"
            )
        if not 0.0 <= self.icm_beta <= 1.0:
            raise ValueError(f"--icm-beta must lie in [0, 1], got {self.icm_beta}")
        if self.rnd_first_visit and self.intrinsic != "rnd":
            raise ValueError(f"--rnd-first-visit is for --intrinsic rnd, not {self.intrinsic}")
        if self.icm_first_visit and self.intrinsic != "icm":
            raise ValueError(f"--icm-first-visit is for --intrinsic icm, not {self.intrinsic}")

    def model(
        self, observation_spec: Composite, action_spec: TensorSpec, device: Any = "cpu"
    ) -> Any:
        """The bonus's networks and loss (:class:`~tdrl.objectives.RNDLoss` or
        :class:`~tdrl.objectives.ICMLoss`: the intrinsic reward and its models' loss), or None
        while ``intrinsic_coeff`` is 0."""
        if self.intrinsic_coeff == 0:
            return None
        import torch
        from torch import nn

        from tdrl import keys
        from tdrl.modules import FlatFrames, mlp
        from tdrl.modules.networks import is_frames
        from tdrl.objectives import ICMLoss, RNDLoss

        entries = [k for k in observation_spec.keys(True, True) if k != keys.ACTION_MASK]
        if entries != [keys.OBSERVATION]:
            raise ValueError(
                "--intrinsic-coeff: the exploration bonuses read one 'observation' entry (a "
                f"vector or frames); the env's observation has {entries}"
            )
        leaf = observation_spec[keys.OBSERVATION]
        shape = tuple(leaf.shape[len(observation_spec.shape) :])
        frames = is_frames(observation_spec)
        if len(shape) != 1 and not frames:
            raise ValueError(
                f"--intrinsic-coeff: the bonus takes flat observations or uint8 frames, got {shape}"
            )
        *hidden, features = self.bonus_hidden_sizes
        width = math.prod(shape)  # frames: their MLPs read them flattened (small views)

        def net(n_in: int, n_out: int, widths: Any = hidden) -> nn.Module:
            return mlp(n_in, n_out, widths, activation=nn.ReLU, output_gain=1.0)

        def observation_net() -> nn.Module:  # RND's: on observations normalized by RNDLoss
            body = net(width, features)
            return nn.Sequential(nn.Flatten(-3), body) if frames else body

        if self.intrinsic == "rnd":
            module: Any = RNDLoss(observation_net(), observation_net(), shape,
                                  gamma=self.intrinsic_gamma,
                                  update_proportion=self.rnd_update_proportion,
                                  first_visit=self.rnd_first_visit)  # fmt: skip
        else:
            from torchrl.data import Categorical as CategoricalSpec

            discrete = isinstance(action_spec, CategoricalSpec)
            if not discrete and action_spec.dtype not in (torch.float32, torch.float64):
                kind = type(action_spec).__name__
                raise ValueError(f"--intrinsic icm takes Discrete or Box actions, got {kind}")
            actions = int(action_spec.space.n) if discrete else int(action_spec.shape[-1])
            scale = 1.0 / max(float(leaf.space.high.max()), 1.0)
            feature_net = net(width, features)
            if frames:  # ICM's features read raw observations: the frames scaled, flattened
                feature_net = nn.Sequential(FlatFrames(scale), feature_net)
            module = ICMLoss(feature_net, net(features + actions, features),
                             net(2 * features, actions), num_actions=actions, discrete=discrete,
                             beta=self.icm_beta, gamma=self.intrinsic_gamma,
                             first_visit=self.icm_first_visit)  # fmt: skip
        return module.to(device)

    def add_reward(self, module: Any, batch: TensorDictBase) -> TensorDictBase:
        """A value-based recipe's bonus: the intrinsic reward of a whole ``[num_envs, T]``
        ``batch`` mixed into its reward, ``extrinsic_coeff * r + intrinsic_coeff * r_int``, before
        it is stored (the collector has logged the env's own returns); returns ``batch``."""
        from tdrl import keys

        module.intrinsic_reward(batch)
        reward = batch.get(keys.NEXT_REWARD)
        intrinsic = batch.get(keys.NEXT_INTRINSIC_REWARD).reshape(reward.shape)
        mixed = self.extrinsic_coeff * reward + self.intrinsic_coeff * intrinsic.to(reward.dtype)
        batch.set(keys.NEXT_REWARD, mixed)
        return batch

    def build(
        self,
        observation_spec: Composite,
        action_spec: TensorSpec,
        nets: Networks,
        *,
        lmbda: float,
        critic_coeff: float,
        device: Any = "cpu",
    ) -> IntrinsicParts | None:
        """The bonus (:meth:`model`), the intrinsic critic (a copy of the extrinsic critic as
        built, sharing its observation normalizer) and estimator, or None while
        ``intrinsic_coeff`` is 0. Call it before any update."""
        module = self.model(observation_spec, action_spec)
        if module is None:
            return None
        import copy

        from tdrl import keys
        from tdrl.estimators import GAE
        from tdrl.modules import NormalizedInput, ValueCritic
        from tdrl.objectives import IntrinsicValueLoss

        if not isinstance(nets.critic, ValueCritic):
            raise ValueError("--intrinsic-coeff: the bonus takes a feed-forward critic")
        # the extrinsic critic as built (before any update): its architecture and init, with
        # the observation normalizer shared, not copied
        critic_net = copy.deepcopy(nets.critic.net)
        for sub in critic_net.modules():
            if isinstance(sub, NormalizedInput) and nets.obs_norm is not None:
                sub.obs_norm = nets.obs_norm
        critic = ValueCritic(critic_net, out_key=keys.INTRINSIC_VALUE)
        estimator = GAE(gamma=self.intrinsic_gamma, lmbda=lmbda, value_network=critic).set_keys(
            reward=keys.INTRINSIC_REWARD, value=keys.INTRINSIC_VALUE, done=keys.INTRINSIC_DONE,
            terminated=keys.INTRINSIC_TERMINATED, truncated=keys.INTRINSIC_TRUNCATED,
            advantage=keys.INTRINSIC_ADVANTAGE, value_target=keys.INTRINSIC_VALUE_TARGET,
        )  # fmt: skip
        critic_loss = IntrinsicValueLoss(critic, coeff=critic_coeff)
        return IntrinsicParts(module.to(device), critic_loss.to(device), estimator.to(device),
                              self.extrinsic_coeff, self.intrinsic_coeff)  # fmt: skip


@configclass
class AdvantageConfig:
    """A critic-baselined policy gradient's estimator and loss weights (A2C, PPO, IMPALA)."""

    lmbda: float = 0.95
    """GAE lambda."""
    critic_coeff: float = 0.5
    """weight of the value loss."""
    entropy_coeff: float = 0.0
    """weight of the entropy bonus."""
    max_grad_norm: float = 0.5
    """global gradient-norm clip."""


@configclass
class PPOConfig:
    """PPO's clipped minibatch epochs (PPO, GAIL's generator), at Tianshou's MuJoCo settings."""

    epochs: int = 10
    """passes over each rollout."""
    minibatch_size: int = 64
    """samples per gradient step."""
    clip_epsilon: float = 0.2
    """ratio clip range."""
    clip_decay: bool = False
    """decay the clip range linearly to 0 over the run (rl-baselines3-zoo's Atari PPO:
    lin_0.1)."""
    recompute_advantage: bool = False
    """re-run the estimator with the current critic before every epoch (Tianshou's
    ``recompute_advantage``, on in its MuJoCo PPO); off: once per rollout (SB3, CleanRL)."""

    def clip_range(self, frames_before: int, total_frames: int) -> float:
        """The clip range of a batch collected after ``frames_before`` env steps: ``clip_epsilon``,
        with ``clip_decay`` times ``1 - frames_before / total_frames`` (as the learning rate's
        schedule decays)."""
        if not self.clip_decay:
            return self.clip_epsilon
        return self.clip_epsilon * max(1.0 - frames_before / total_frames, 0.0)

    def check_compiled(
        self, frames_per_batch: int, seq_len: int | None, *, cudagraphs: bool
    ) -> None:
        """A compiled minibatch step keeps one clip range (a new one would recompile it every
        batch); a captured one (``cudagraphs``) also replays one minibatch shape and takes no
        sequences (``seq_len``: a recurrent network reads where episodes start on the host). A
        ``ValueError`` names the setting that breaks that."""
        flag = "--cudagraphs" if cudagraphs else "--compile"
        if self.clip_decay:
            raise ValueError(
                f"{flag}: --clip-decay changes the clip range between batches, which the "
                "compiled or captured step holds fixed"
            )
        if not cudagraphs:
            return
        if seq_len is not None:  # sequence mode reads where episodes start on the host
            raise ValueError(
                "--cudagraphs: --recurrent networks cut their sequences where an episode starts, "
                "read on the host, which a CUDA graph cannot capture; use --compile without "
                "--cudagraphs"
            )
        if frames_per_batch % self.minibatch_size:
            raise ValueError(
                f"--cudagraphs: --minibatch-size {self.minibatch_size} must divide "
                f"--frames-per-batch {frames_per_batch} (a captured step replays one shape)"
            )
