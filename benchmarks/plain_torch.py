"""SAC, TD3 and PPO as single-file plain-PyTorch loops in LeanRL's manner (CleanRL's scripts with
the update step compiled by ``torch.compile`` and captured by tensordict's ``CudaGraphModule``),
written here as the peers of ``benchmarks/compiled_e2e.py``: the same task, budget and settings as
tdrl's recipes (``recipes/sac.py``, ``td3.py``, ``ppo.py`` defaults), without a library between
the loop and torch. Each run writes ``train.csv`` rows (``step``, ``time``) as a recipe does, so
the two are timed alike.

What is left out against the recipes (a speed peer, not a replacement): no evaluation, no
checkpoints, no observation normalization, reward scaling or learning-rate decay in PPO, and PPO
bootstraps neither truncated nor terminated ends (CleanRL's ``done`` for both).

    python benchmarks/plain_torch.py --algo sac --mode compiled --log-dir /tmp/plain_sac
    python benchmarks/plain_torch.py --algo ppo --mode compiled+graphs --device cuda --log-dir ...
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from tensordict.nn import CudaGraphModule
from torch import nn

MODES = ("eager", "compiled", "cudagraphs", "compiled+graphs")


def mlp(sizes: list[int], act: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


def optimizer(params: Any, lr: float, graphs: bool, device: torch.device) -> torch.optim.Adam:
    """Adam; captured steps need it capturable with its learning rate as a device tensor."""
    if graphs:
        return torch.optim.Adam(params, lr=torch.tensor(lr, device=device), capturable=True)
    return torch.optim.Adam(params, lr=lr)


def wrap(step: Callable[[TensorDict], TensorDict], mode: str) -> Callable[[TensorDict], Any]:
    """The update step as the mode runs it (LeanRL's pattern)."""
    if "compiled" in mode:
        step = torch.compile(step)
    if "graphs" in mode:
        step = CudaGraphModule(step, in_keys=[], out_keys=[], warmup=2)
    return step


class Log:
    """train.csv rows (step, time) every ``every`` env steps, like a recipe's."""

    def __init__(self, folder: Path, every: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.file = (folder / "train.csv").open("w", newline="")
        self.rows = csv.writer(self.file)
        self.rows.writerow(["step", "time"])
        self.every, self.next, self.start = every, every, time.perf_counter()

    def step(self, frames: int, device: torch.device) -> None:
        if frames >= self.next:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            self.rows.writerow([frames, time.perf_counter() - self.start])
            self.file.flush()
            self.next += self.every


# ------------------------------------------------------------------------------------- SAC, TD3
class Squashed(nn.Module):
    """SAC's actor: a tanh-squashed Gaussian scaled to the action bounds."""

    def __init__(self, obs: int, act: int, low: torch.Tensor, high: torch.Tensor) -> None:
        super().__init__()
        self.net = mlp([obs, 256, 256, 2 * act])
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("bias", (high + low) / 2)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net(obs).chunk(2, -1)
        std = log_std.clamp(-20, 2).exp()
        u = mean + std * torch.randn_like(mean)
        a = torch.tanh(u)
        logp = (-0.5 * ((u - mean) / std) ** 2 - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return a * self.scale + self.bias, logp - self.scale.log().sum()


def off_policy(args: argparse.Namespace, device: torch.device) -> None:
    env = gym.make(args.env_id)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    low = torch.as_tensor(env.action_space.low, device=device)
    high = torch.as_tensor(env.action_space.high, device=device)
    graphs = "graphs" in args.mode
    sac = args.algo == "sac"
    hidden = [256, 256]
    critics = nn.ModuleList(mlp([obs_dim + act_dim, *hidden, 1]) for _ in range(2)).to(device)
    targets = nn.ModuleList(mlp([obs_dim + act_dim, *hidden, 1]) for _ in range(2)).to(device)
    targets.load_state_dict(critics.state_dict())
    targets.requires_grad_(False)
    if sac:
        actor: nn.Module = Squashed(obs_dim, act_dim, low, high).to(device)
        log_alpha = torch.zeros(1, device=device, requires_grad=True)
        alpha_opt = optimizer([log_alpha], 3e-4, graphs, device)
    else:
        actor = nn.Sequential(mlp([obs_dim, *hidden, act_dim]), nn.Tanh()).to(device)
    actor_target = None if sac else nn.Sequential(mlp([obs_dim, *hidden, act_dim]), nn.Tanh())
    if actor_target is not None:
        actor_target.to(device).load_state_dict(actor.state_dict())
        actor_target.requires_grad_(False)
    lr = 1e-3 if sac else 3e-4
    q_opt = optimizer(critics.parameters(), lr, graphs, device)
    pi_opt = optimizer(actor.parameters(), lr, graphs, device)
    gamma, tau, target_entropy = 0.99, 0.005, -float(act_dim)
    scale, bias = (high - low) / 2, (high + low) / 2

    def q(nets: nn.ModuleList, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, act], -1)
        return torch.min(nets[0](x), nets[1](x)).squeeze(-1)

    def td3_target_action(obs: torch.Tensor) -> torch.Tensor:
        assert actor_target is not None
        a = actor_target(obs) * scale + bias
        noise = (torch.randn_like(a) * 0.2 * scale).clamp(-0.5 * scale, 0.5 * scale)
        return torch.max(torch.min(a + noise, high), low)

    def critic_step(data: TensorDict) -> TensorDict:
        obs, act, nobs = data["obs"], data["act"], data["next_obs"]
        with torch.no_grad():
            if sac:
                na, nlogp = actor(nobs)
                nq = q(targets, nobs, na) - log_alpha.exp() * nlogp
            else:
                nq = q(targets, nobs, td3_target_action(nobs))
            target = data["rew"] + gamma * (1 - data["term"]) * nq
        x = torch.cat([obs, act], -1)
        loss = sum(((c(x).squeeze(-1) - target) ** 2).mean() for c in critics)
        q_opt.zero_grad()
        loss.backward()
        q_opt.step()
        if sac:  # TD3 moves its critic targets with the actor's, every second step
            with torch.no_grad():
                torch._foreach_lerp_(list(targets.parameters()), list(critics.parameters()), tau)
        return TensorDict(critic_loss=loss.detach())

    def actor_step(data: TensorDict) -> TensorDict:
        obs = data["obs"]
        if sac:
            a, logp = actor(obs)
            loss = (log_alpha.exp().detach() * logp - q(critics, obs, a)).mean()
        else:
            loss = -q(critics, obs, actor(obs) * scale + bias).mean()
        pi_opt.zero_grad()
        loss.backward()
        pi_opt.step()
        out = TensorDict(actor_loss=loss.detach())
        if sac:
            alpha_loss = -(log_alpha * (logp.detach() + target_entropy)).mean()
            alpha_opt.zero_grad()
            alpha_loss.backward()
            alpha_opt.step()
            out["alpha"] = log_alpha.detach().exp()
        else:
            assert actor_target is not None
            with torch.no_grad():
                torch._foreach_lerp_(list(actor_target.parameters()), list(actor.parameters()), tau)
                torch._foreach_lerp_(list(targets.parameters()), list(critics.parameters()), tau)
        return out

    critic_update, actor_update = wrap(critic_step, args.mode), wrap(actor_step, args.mode)
    n = args.total_frames
    store = TensorDict(
        obs=torch.zeros(n, obs_dim), act=torch.zeros(n, act_dim), rew=torch.zeros(n),
        next_obs=torch.zeros(n, obs_dim), term=torch.zeros(n), batch_size=[n], device=device,
    )  # fmt: skip
    obs, _ = env.reset(seed=args.seed)
    env.action_space.seed(args.seed)
    log = Log(Path(args.log_dir), args.log_every)
    for t in range(n):
        if t < args.init_random_frames:
            action = env.action_space.sample()
        else:
            with torch.no_grad():
                x = torch.as_tensor(obs, dtype=torch.float32, device=device)
                if sac:
                    a = actor(x)[0]
                else:
                    a = actor(x) * scale + bias
                    a = a + 0.1 * scale * torch.randn_like(a)
                action = a.clamp(low, high).cpu().numpy()
        nobs, reward, term, trunc, _ = env.step(action)
        store[t] = TensorDict(obs=torch.as_tensor(obs), act=torch.as_tensor(action),
                              rew=torch.tensor(reward), next_obs=torch.as_tensor(nobs),
                              term=torch.tensor(float(term)))  # fmt: skip
        obs = env.reset()[0] if term or trunc else nobs
        if t + 1 >= args.init_random_frames:
            batch = store[torch.randint(t + 1, (256,), device=device)]
            critic_update(batch)
            if sac or t % 2 == 0:  # TD3: the actor and its target every second step
                actor_update(batch)
        log.step(t + 1, device)


# ------------------------------------------------------------------------------------------ PPO
def ppo(args: argparse.Namespace, device: torch.device) -> None:
    envs = gym.vector.SyncVectorEnv(  # same-step autoreset: no dummy step after an end
        [lambda: gym.make(args.env_id)] * args.num_envs,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    obs_dim = envs.single_observation_space.shape[0]
    act_dim = envs.single_action_space.shape[0]
    graphs = "graphs" in args.mode
    actor = mlp([obs_dim, 64, 64, act_dim], nn.Tanh).to(device)
    critic = mlp([obs_dim, 64, 64, 1], nn.Tanh).to(device)
    log_std = nn.Parameter(torch.full((act_dim,), -0.5, device=device))
    params = [*actor.parameters(), *critic.parameters(), log_std]
    opt = optimizer(params, 3e-4, graphs, device)
    steps = args.frames_per_batch // args.num_envs
    minibatch, gamma, lmbda, clip = 64, 0.99, 0.95, 0.2

    def log_prob(mean: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        z = (act - mean) / log_std.exp()
        return (-0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def update_step(mb: TensorDict) -> TensorDict:
        mean = actor(mb["obs"])
        ratio = (log_prob(mean, mb["act"]) - mb["logp"]).exp()
        adv = mb["adv"]
        pg = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv).mean()
        v = critic(mb["obs"]).squeeze(-1)
        loss = pg + 0.25 * ((v - mb["ret"]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
        return TensorDict(loss=loss.detach())

    update = wrap(update_step, args.mode)
    obs, _ = envs.reset(seed=args.seed)
    log = Log(Path(args.log_dir), args.frames_per_batch)
    frames = 0
    while frames < args.total_frames:
        shape = (steps, args.num_envs)
        buf = TensorDict(obs=torch.zeros(*shape, obs_dim), act=torch.zeros(*shape, act_dim),
                         logp=torch.zeros(shape), rew=torch.zeros(shape), done=torch.zeros(shape),
                         val=torch.zeros(shape), batch_size=shape, device=device)  # fmt: skip
        with torch.no_grad():
            for t in range(steps):
                x = torch.as_tensor(obs, dtype=torch.float32, device=device)
                mean = actor(x)
                act = mean + log_std.exp() * torch.randn_like(mean)
                buf[t] = TensorDict(obs=x, act=act, logp=log_prob(mean, act),
                                    val=critic(x).squeeze(-1))  # fmt: skip
                obs, reward, term, trunc, _ = envs.step(act.cpu().numpy())
                buf["rew"][t] = torch.as_tensor(reward, dtype=torch.float32)
                buf["done"][t] = torch.as_tensor(term | trunc, dtype=torch.float32)
            last = critic(torch.as_tensor(obs, dtype=torch.float32, device=device)).squeeze(-1)
            adv, gae = torch.zeros(shape, device=device), torch.zeros(args.num_envs, device=device)
            for t in reversed(range(steps)):  # GAE, CleanRL's loop
                nv = last if t == steps - 1 else buf["val"][t + 1]
                live = 1 - buf["done"][t]
                delta = buf["rew"][t] + gamma * nv * live - buf["val"][t]
                gae = delta + gamma * lmbda * live * gae
                adv[t] = gae
            buf["adv"], buf["ret"] = adv, adv + buf["val"]
        flat = buf.reshape(-1)
        for _ in range(args.epochs):
            for idx in torch.randperm(flat.shape[0], device=device).split(minibatch):
                update(flat[idx])
        frames += args.frames_per_batch
        log.step(frames, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=("sac", "td3", "ppo"), required=True)
    parser.add_argument("--mode", choices=MODES, default="eager")
    parser.add_argument("--env-id", default="HalfCheetah-v5")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total-frames", type=int, default=4000)
    parser.add_argument("--init-random-frames", type=int, default=1000)
    parser.add_argument("--log-every", type=int, default=250)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--frames-per-batch", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the recipes': 1)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if "graphs" in args.mode and device.type != "cuda":
        parser.error(f"--mode {args.mode} captures CUDA graphs: it needs --device cuda")
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.set_num_threads(args.threads)
    (ppo if args.algo == "ppo" else off_policy)(args, device)


if __name__ == "__main__":
    main()
