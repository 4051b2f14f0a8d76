"""tdrl.trainers: what recipes share (configs, run bookkeeping, logs, checkpoints, plots) and
the loop steps of both families."""

from tdrl.trainers.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from tdrl.trainers.config import (
    ActorCriticConfig,
    AdvantageConfig,
    EntropyConfig,
    OffPolicyConfig,
    OnPolicyConfig,
    RunConfig,
    parse,
)
from tdrl.trainers.logger import Logger, format_metrics, read_csv
from tdrl.trainers.offpolicy import (
    crossed,
    make_replay_buffer,
    store,
    transitions,
    truncate_streams,
    updates_due,
)
from tdrl.trainers.onpolicy import (
    linear_decay,
    natural_gradient_update,
    on_policy_update,
    ppo_update,
    train_on_policy,
)
from tdrl.trainers.optim import adam, clip_grad_norm_, optimizer_step
from tdrl.trainers.plotting import plot_learning_curve
from tdrl.trainers.run import (
    CHECKPOINT,
    Run,
    drop_rows_after,
    episode_metrics,
    evaluate_and_log,
    finish_run,
    progress_bar,
    resume_run,
    run_dir,
    save_run,
    seed_everything,
    setup,
)

__all__ = [
    "ActorCriticConfig",
    "AdvantageConfig",
    "EntropyConfig",
    "CHECKPOINT",
    "Logger",
    "OffPolicyConfig",
    "OnPolicyConfig",
    "Run",
    "RunConfig",
    "adam",
    "clip_grad_norm_",
    "crossed",
    "drop_rows_after",
    "episode_metrics",
    "evaluate_and_log",
    "finish_run",
    "format_metrics",
    "linear_decay",
    "load_checkpoint",
    "make_replay_buffer",
    "natural_gradient_update",
    "on_policy_update",
    "optimizer_step",
    "parse",
    "plot_learning_curve",
    "ppo_update",
    "progress_bar",
    "read_csv",
    "resume_run",
    "rng_state",
    "run_dir",
    "save_checkpoint",
    "save_run",
    "seed_everything",
    "set_rng_state",
    "setup",
    "store",
    "train_on_policy",
    "transitions",
    "truncate_streams",
    "updates_due",
]
