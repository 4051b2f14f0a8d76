"""Typed configs that are also the command line (tyro: a frozen dataclass becomes the CLI).

Every recipe's ``Config`` subclasses one of the dataclasses here and adds its algorithm's fields;
it redefines a shared field only to change its default (the one-line doc is inherited, and
``--help`` shows it). :class:`RunConfig` holds what every run has (task, envs, budget, seed,
evaluation, logs, checkpoints); :class:`OnPolicyConfig` and :class:`OffPolicyConfig` add the
fields that every recipe of one family has. All step counts are env steps (frames).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    import torch

T = TypeVar("T")

# Fields that must be >= 1, and those that must be >= 0, wherever they appear.
_POSITIVE = {
    "total_frames", "num_envs", "eval_episodes", "eval_envs", "threads", "frames_per_batch",
    "batch_size", "buffer_size", "epochs", "minibatch_size", "critic_steps", "n_steps",
    "cg_iters", "policy_delay", "actor_delay", "num_qvalue_nets", "sub_sample_len",
    "target_update_interval", "recurrent_size", "seq_len", "slice_len", "num_workers",
    "steps_per_batch", "expert_episodes", "disc_steps", "disc_batch_size", "critic_minibatch_size",
}  # fmt: skip
_NON_NEGATIVE = {
    "eval_every", "log_every", "checkpoint_every", "stop_after_frames", "init_random_frames",
    "eps_frames", "max_backtracks", "burn_in", "gp_lambda", "sde_sample_freq", "policy_noise",
    "noise_clip",
}  # fmt: skip
_UNIT = {"gamma", "lmbda", "tau", "eps_init", "eps_end", "per_beta"}


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
    if name.endswith("_coeff") and not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{flag} (a loss weight) must be finite and >= 0, got {value}")
    if name == "seed" and value < 0:
        raise ValueError(f"{flag} must be >= 0, got {value}")


def parse(config_cls: type[T], args: Sequence[str] | None = None) -> T:
    """Build ``config_cls`` from the command line (``--field value``; ``--help`` lists fields
    with the one-line docs written under them)."""
    import tyro

    return tyro.cli(config_cls, args=args)


@dataclass(frozen=True)
class RunConfig:
    """What every recipe run has: :func:`tdrl.trainers.setup` and ``Run.from_config`` read it.

    Every field is checked when the config is made (before anything runs), in every subclass:
    counts that must be positive, learning rates (``lr``, ``*_lr``) and ``alpha_init`` > 0
    and finite, ``max_grad_norm`` > 0 (inf: no clipping), loss weights (``*_coeff``) >= 0 and
    finite, ``seed`` >= 0, and ``gamma``, ``lmbda``, ``tau`` in [0, 1]; an error names the flag
    and the value.
    """

    def __post_init__(self) -> None:
        for f in fields(self):
            _check_field(f.name, getattr(self, f.name))
        if self.stop_after_frames and not self.checkpoint_every:
            raise ValueError(
                f"--stop-after-frames {self.stop_after_frames} pauses the run to be resumed, "
                "but --checkpoint-every 0 writes no checkpoint to resume from"
            )
        self.torch_device  # noqa: B018  # checks --device

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
    env_backend: Literal["gymnasium", "envpool", "torchrl"] = "gymnasium"
    """who runs the training envs: gymnasium vector envs, envpool's C++ threads (sync only), or
    TorchRL's GymEnv (a SerialEnv of num_envs) through tdrl.envs.from_torchrl."""
    collector: Literal["local", "ray", "process"] = "local"
    """local: tdrl's Collector in this process; ray: a RayCollector of num_workers Ray actors
    with num_envs envs each (the ray extra); process: the same on local subprocesses. Weights
    are sent after every update."""
    num_workers: int = 2
    """collector=ray|process: worker count."""
    ray_address: str = ""
    """collector=ray: a running Ray cluster to join ('auto', 'host:port'); empty: a local Ray."""
    eval_every: int = 20_000
    """env steps between deterministic evaluations (0: only at the end)."""
    eval_episodes: int = 10
    """episodes per evaluation."""
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
    """continue from log_dir's checkpoint if there is one."""
    seed: int = 0
    """seed of the envs, the networks and the sampling (evaluation: seed + 10000)."""
    log_dir: str = ""
    """run folder (default runs/<algo>/<env_id>/seed<seed>)."""
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
    """plot curve.png from eval.csv at the end (importing matplotlib costs about a second)."""
    threads: int = 1
    """torch CPU threads (one is fastest for small networks)."""
    device: str = "cpu"
    """where the networks, the losses and the replay buffer live: cpu, cuda, cuda:N, or auto
    (CUDA when present). The envs always step on the CPU."""
    step_timeout: float = 120.0
    """async envs: seconds a step may take before the stuck workers are named and stopped."""
    flush_denormal: bool = True
    """flush subnormal floats to zero on CPU while the run trains (``torch.set_flush_denormal``;
    the previous mode comes back at the end): Adam's moments of dead ReLU units decay into
    subnormals, which the CPU handles tens of times slower (DQN on CartPole: fused Adam 0.52 ->
    0.07 ms a step)."""


@dataclass(frozen=True)
class OnPolicyConfig(RunConfig):
    """:class:`RunConfig` plus what every on-policy recipe has (``actor_critic``'s options)."""

    frames_per_batch: int = 2048
    """env steps per rollout (a multiple of num_envs)."""
    lr: float = 3e-4
    """learning rate."""
    lr_decay: bool = True
    """decay the learning rate linearly to 0 over total_frames."""
    gamma: float = 0.99
    """discount."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """hidden layer widths of the actor and the critic."""
    init_log_std: float = -0.5
    """initial log standard deviation of the Gaussian policy."""
    normalize_observations: bool = True
    """running mean/std observation normalization."""
    normalize_advantage: bool = True
    """normalize advantages (REINFORCE: the returns) to zero mean and unit std over each
    minibatch, or over the batch where an update takes it whole."""
    activation: Literal["tanh", "relu"] = "tanh"
    """activation of the actor's and critic's hidden layers (tanh: Tianshou's and SB3's MuJoCo
    default; relu: e.g. rl-baselines3-zoo's recurrent PPO)."""
    ortho_init: bool = True
    """orthogonal init of the networks' linear layers (gains sqrt 2, policy head 0.01, value head
    1); off: PyTorch's default init (SB3's ortho_init False, e.g. the zoo's recurrent PPO)."""
    rescale_actions: bool = True
    """a Gaussian policy acts in [-1, 1] rescaled to the env's bounds; off: in the env's units,
    clipped by the env (SB3's PPO)."""
    scale_rewards: bool = False
    """divide rewards by the running std of the discounted return before the estimator, so the
    critic learns scaled returns (SB3's VecNormalize reward part, CleanRL's NormalizeReward)."""


@dataclass(frozen=True)
class OffPolicyConfig(RunConfig):
    """:class:`RunConfig` plus what every off-policy recipe has (replay and update ratio)."""

    num_envs: int = 1
    total_frames: int = 1_000_000
    eval_every: int = 10_000
    log_every: int = 1_000
    checkpoint_every: int = 100_000
    init_random_frames: int = 10_000
    """uniform random steps before the policy acts and learning starts."""
    utd_ratio: float = 1.0
    """gradient steps per env step (the update-to-data ratio)."""
    steps_per_batch: int = 1
    """env steps of each env per collected batch, stored before its gradient steps (1: SB3's
    and Tianshou's default; with collector=ray, e.g. 50: fewer round trips to the workers)."""
    batch_size: int = 256
    """transitions per gradient step."""
    buffer_size: int = 1_000_000
    """replay buffer capacity."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """hidden layer widths of the networks."""
    gamma: float = 0.99
    """discount."""


@dataclass(frozen=True)
class QLearningConfig(OffPolicyConfig):
    """:class:`OffPolicyConfig` plus an epsilon-greedy Q network with a hard-copied target
    (DQN and its distributional variants, DRQN)."""

    frames_per_batch: int = 256
    """env steps per collected batch (SB3's train_freq)."""
    lr: float = 1e-3
    """Adam learning rate."""
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


@dataclass(frozen=True)
class ActorCriticConfig(OffPolicyConfig):
    """:class:`OffPolicyConfig` plus an actor, critics and Polyak targets (DDPG, TD3, SAC, REDQ,
    discrete SAC)."""

    env_id: str = "HalfCheetah-v5"
    actor_lr: float = 1e-3
    """actor learning rate."""
    critic_lr: float = 1e-3
    """critic learning rate."""
    tau: float = 0.005
    """Polyak coefficient of the target critics."""


@dataclass(frozen=True)
class TD3Config(ActorCriticConfig):
    """:class:`ActorCriticConfig` plus TD3's delayed actor updates and smoothed target policy
    (Fujimoto et al. 2018, arXiv 1802.09477): TD3, and TD3+BC in the offline recipe."""

    policy_delay: int = 2
    """critic steps per actor step and target update."""
    policy_noise: float = 0.2
    """target policy smoothing noise (half-range units)."""
    noise_clip: float = 0.5
    """clip of the smoothing noise (half-range units)."""


@dataclass(frozen=True)
class EntropyConfig(ActorCriticConfig):
    """:class:`ActorCriticConfig` plus the entropy coefficient alpha and its tuning (SAC, REDQ,
    discrete SAC): the same flags and meaning in every recipe that has an entropy target."""

    alpha_lr: float = 3e-4
    """entropy-coefficient learning rate."""
    alpha_init: float = 1.0
    """initial entropy coefficient."""
    target_entropy: str = "auto"
    """entropy target of the alpha tuning: "auto" (the loss's default: -action_dim for Gaussian
    policies, 0.98 log(actions) for categorical ones) or a number."""

    def entropy_target(self) -> str | float:
        """``target_entropy`` as the losses take it: "auto" or a float (checked)."""
        if self.target_entropy == "auto":
            return "auto"
        try:
            value = float(self.target_entropy)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ValueError(
                f"target_entropy must be 'auto' or a finite number, got {self.target_entropy!r}"
            )
        return value


@dataclass(frozen=True)
class AdvantageConfig(OnPolicyConfig):
    """:class:`OnPolicyConfig` plus a GAE critic and its loss terms (A2C, PPO)."""

    lmbda: float = 0.95
    """GAE lambda."""
    critic_coeff: float = 0.5
    """weight of the value loss."""
    entropy_coeff: float = 0.0
    """weight of the entropy bonus."""
    max_grad_norm: float = 0.5
    """global gradient-norm clip."""
    recurrent: Literal["none", "lstm", "gru"] = "none"
    """a recurrent actor (LSTM or GRU on the observation, then the MLP head; the critic stays
    feed-forward) for partially observed tasks, e.g. CartPoleNoVel-v1."""
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
    def loss_terms(self) -> dict[str, Any]:
        """The loss weights every advantage loss takes (A2C, PPO, IMPALA's A2C on V-trace)."""
        return dict(
            entropy_coeff=self.entropy_coeff,
            critic_coeff=self.critic_coeff,
            normalize_advantage=self.normalize_advantage,
        )

    @property
    def sequence_length(self) -> int | None:
        """``seq_len`` for a recurrent actor, else None (minibatches of single steps)."""
        return None if self.recurrent == "none" else self.seq_len


@dataclass(frozen=True)
class PPOConfig(AdvantageConfig):
    """:class:`AdvantageConfig` plus PPO's clipped minibatch epochs (PPO, and GAIL's generator),
    at Tianshou's MuJoCo PPO settings."""

    critic_coeff: float = 0.25
    epochs: int = 10
    """passes over each rollout."""
    minibatch_size: int = 64
    """samples per gradient step."""
    clip_epsilon: float = 0.2
    """ratio clip range."""
    recompute_advantage: bool = False
    """re-run the estimator with the current critic before every epoch (Tianshou's
    ``recompute_advantage``, on in its MuJoCo PPO); off: once per rollout (SB3, CleanRL)."""
