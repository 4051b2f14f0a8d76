"""GAIL (Ho & Ermon 2016, arXiv 1606.03476): PPO on a discriminator's reward, from expert
demonstrations in a Minari dataset (recipes/make_dataset.py makes them from a trained agent).

python recipes/ppo.py --env-id Hopper-v5 --total-frames 1000000 --stop-at-return 3300 \
    --log-dir runs/expert-hopper                                      # the expert
python recipes/make_dataset.py --kind policy --algo ppo --run runs/expert-hopper --deterministic \
    --steps 20000 --num-envs 4 --dataset-id tdrl/hopper-expert-v0     # its demonstrations
python recipes/gail.py --dataset tdrl/hopper-expert-v0 --expert-episodes 10 --total-frames 1000000

Each batch: the discriminator takes ``disc_steps`` Adam steps on expert pairs (10 episodes by
default) against the batch's own pairs (GAILLoss: expert 1, policy 0), the batch's rewards are
replaced by ``-log(1 - D(s, a))`` (gail_reward), then PPO's update runs on them as in
recipes/ppo.py (whose defaults, Tianshou's MuJoCo PPO, the generator keeps). The logged and
evaluated returns are the env's own. The discriminator: two 100-unit tanh layers, Adam 3e-4,
on pairs standardized with the demonstrations' mean and std, 10 steps of 512 pairs a side per
batch of 2048. These three settings were tuned on Hopper-v5 seed 100 only (10 deterministic
episodes of a PPO expert, 1M steps; docs/benchmarks/gail_Hopper-v5.txt): one step of 2048 raw
pairs per batch (the first defaults) left the discriminator near chance (D about 0.55 expert,
0.45 policy), and the policy settled on ~250-step episodes that fall, still rated 0.43 (best
eval 2107, 863 at 640k); 10 steps of 512 with a gradient penalty (lambda 10, then on the raw
pairs) kept it weak (best 1374); without the penalty the run matched the expert from 320k steps
on. The reward ``-log(1 - D)`` is positive, so it also pays for surviving (GAIL's known bias at
terminal states; Kostrikov et al. 2018 treat them as absorbing instead): fine for Hopper-like
tasks, where staying up is what the expert does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from tdrl import keys, trainers
from tdrl.data import load_minari
from tdrl.estimators import GAE
from tdrl.modules import (
    RunningObservationNorm,
    StateActionCritic,
    action_bounds,
    flat_dims,
    mlp,
)
from tdrl.objectives import ClipPPOLoss, GAILLoss, gail_reward


@dataclass(frozen=True)
class Config(trainers.PPOConfig):
    """Fields beyond tdrl.trainers.PPOConfig's (--help lists all, with defaults)."""

    dataset: str = "tdrl/hopper-policy-v0"
    """Minari dataset id of the expert's demonstrations (under MINARI_DATASETS_PATH)."""
    expert_episodes: int = 10
    """expert episodes used (the dataset's first ones)."""
    disc_hidden_sizes: tuple[int, ...] = (100, 100)
    """hidden layer widths of the discriminator (tanh)."""
    disc_lr: float = 3e-4
    """discriminator learning rate (Adam)."""
    disc_steps: int = 10
    """discriminator steps per batch."""
    disc_batch_size: int = 512
    """pairs of each kind per discriminator step (at most the batch's own)."""
    disc_normalize: bool = True
    """standardize the discriminator's input with the expert pairs' mean and std (fixed)."""
    use_grad_penalty: bool = False
    """gradient penalty on the discriminator (WGAN-GP's, on mixed pairs)."""
    gp_lambda: float = 10.0
    """weight of the gradient penalty."""


def expert_pairs(dataset: str, episodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The observations and actions ``[n, *]`` of the dataset's first ``episodes`` episodes."""
    if episodes < 1:
        raise ValueError(f"expert_episodes must be >= 1, got {episodes}")
    data = load_minari(dataset).storage[:, 0]  # one stream, episode after episode
    ids = data[keys.COLLECTOR_TRAJ_IDS]
    first = torch.unique_consecutive(ids)[:episodes]
    if len(first) < episodes:
        raise ValueError(f"dataset {dataset!r} holds {len(first)} episodes, {episodes} asked for")
    keep = torch.isin(ids, first)
    return data[keys.OBSERVATION][keep], data[keys.ACTION][keep]


def main(cfg: Config) -> dict[str, float]:
    """Train GAIL as configured; returns the last evaluation and the last update's metrics."""
    # 1-2. envs, the PPO generator's networks, the expert's pairs and the discriminator
    parts = trainers.on_policy_setup(cfg)
    # The discriminator sees the actions the env executed: the policy's samples clipped to the
    # box (the batch keeps them unclipped), as the expert's are; else "out of bounds" alone
    # would tell the policy apart. Box actions only.
    low, high = (x.to(cfg.torch_device) for x in action_bounds(parts.env.action_spec))
    expert_obs, expert_action = expert_pairs(cfg.dataset, cfg.expert_episodes)
    obs_dim, action_dim = flat_dims(parts.env.observation_spec, parts.env.action_spec)
    if expert_obs.shape[1:] != (obs_dim,) or expert_action.shape[1:] != (action_dim,):
        raise ValueError(
            f"dataset {cfg.dataset!r}: pairs of shape {tuple(expert_obs.shape[1:])} and "
            f"{tuple(expert_action.shape[1:])} do not fit {cfg.env_id}'s ({obs_dim},) and "
            f"({action_dim},)"
        )
    # A dataset may hold a policy's unclipped samples (or means): the executed actions count.
    expert_action = torch.maximum(torch.minimum(expert_action, high.cpu()), low.cpu())
    disc_norm = RunningObservationNorm(obs_dim + action_dim)
    if cfg.disc_normalize:
        # The demonstrations' statistics, folded in once and then fixed (a checkpoint holds
        # them): raw Hopper observations mix angles ~0.1 with velocities ~10, and a running
        # norm over the policy's pairs would move the discriminator's inputs as the policy moves.
        # The pairs are standardized before the discriminator, so that the gradient penalty
        # bounds its slope in standardized units, not in the raw ones.
        disc_norm.update(torch.cat([expert_obs, expert_action], dim=-1))

    def disc_input(obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not cfg.disc_normalize:
            return obs, action
        pair = disc_norm.normalize(torch.cat([obs, action], dim=-1))
        return pair[..., :obs_dim], pair[..., obs_dim:]

    net = mlp(obs_dim + action_dim, 1, cfg.disc_hidden_sizes, activation=nn.Tanh)
    discriminator = StateActionCritic(net, out_key=keys.D_LOGITS)
    # 3. losses (PPO's and the discriminator's), estimator, optimizers
    loss = ClipPPOLoss(parts.actor, parts.critic, clip_epsilon=cfg.clip_epsilon, **cfg.loss_terms)
    disc_loss = GAILLoss(
        discriminator, use_grad_penalty=cfg.use_grad_penalty, gp_lambda=cfg.gp_lambda
    )
    estimator = GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=parts.critic)
    trainers.to_device(cfg, loss, estimator, disc_loss, disc_norm)
    expert_obs, expert_action = disc_input(
        expert_obs.to(cfg.torch_device), expert_action.to(cfg.torch_device)
    )
    optimizer = torch.optim.Adam(loss.parameters(), lr=cfg.lr, fused=True)
    disc_optimizer = torch.optim.Adam(discriminator.parameters(), lr=cfg.disc_lr)

    def update(batch: TensorDictBase) -> dict[str, float]:
        executed = torch.maximum(torch.minimum(batch.get(keys.ACTION), high), low)
        batch_obs, batch_action = disc_input(batch.get(keys.OBSERVATION), executed)
        obs, action = batch_obs.reshape(-1, obs_dim), batch_action.reshape(-1, action_dim)
        # torch's global generator draws the pairs: checkpoints hold its state (exact resume)
        n = min(cfg.disc_batch_size, obs.shape[0])
        for _ in range(cfg.disc_steps):
            e = torch.randint(expert_obs.shape[0], (n,)).to(expert_obs.device)
            p = torch.randperm(obs.shape[0])[:n].to(obs.device)
            pairs = TensorDict(
                {keys.OBSERVATION: expert_obs[e], keys.ACTION: expert_action[e],
                 keys.COLLECTOR_OBSERVATION: obs[p], keys.COLLECTOR_ACTION: action[p]},
                batch_size=[],
            )  # fmt: skip
            disc_out = disc_loss(pairs)
            trainers.optimizer_step(disc_out[keys.LOSS], disc_optimizer)
        # the policy learns from the discriminator's reward, not the env's
        reward = gail_reward(discriminator, batch_obs, batch_action)
        batch.set((keys.NEXT, keys.REWARD), reward)
        metrics = trainers.on_policy_update(
            batch, loss, estimator, optimizer, epochs=cfg.epochs,
            minibatch_size=cfg.minibatch_size, max_grad_norm=cfg.max_grad_norm,
            recompute_advantage=cfg.recompute_advantage,
            seq_len=cfg.sequence_length,  # --recurrent: minibatches of whole sequences
        )  # fmt: skip
        return {
            **metrics,
            "disc_loss": disc_out[keys.LOSS].item(),
            "disc_expert": float(disc_out[keys.DISCRIMINATOR_EXPERT]),
            "disc_policy": float(disc_out[keys.DISCRIMINATOR_POLICY]),
            "gail_reward": float(reward.mean()),
        }

    # 4. loop: collect a rollout -> discriminator step -> relabel -> PPO update -> log, evaluate
    #    (the env's returns), checkpoint; 5. report (trainers.run_on_policy)
    extra_state = {
        "discriminator": discriminator,
        "disc_optimizer": disc_optimizer,
        "disc_norm": disc_norm,
    }
    return trainers.run_on_policy(
        cfg, "GAIL", parts, optimizer, update, extra_state=extra_state, reward_scaling=False
    )


if __name__ == "__main__":
    main(trainers.parse(Config))
