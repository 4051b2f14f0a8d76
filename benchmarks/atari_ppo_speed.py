"""PPO on Atari through envpool: tdrl's loop (``recipes/ppo.py``'s parts) against CleanRL's loop
logic, on the same envs and the same network, in one run.

Both sides train CleanRL's ``ppo_atari_envpool.py`` setup on envpool's Breakout-v5 (8 envs, 4
stacked 84x84 frames, a lost life ends a training episode, rewards clipped to [-1, 1] for the
learner): rollouts of 128 steps (1024 frames), GAE (gamma 0.99, lambda 0.95), 4 epochs of 4
minibatches of 256, clip 0.1, entropy 0.01, value 0.5, Adam 2.5e-4 (eps 1e-5), gradient norm
0.5, advantages normalized per minibatch; the network is ``tdrl.modules.actor_critic`` on frames
(the Nature CNN shared under a policy and a value head). The CleanRL side runs the CNN once per
forward and both heads on its output, as CleanRL's ``Agent`` does; tdrl's on-policy losses get
the same one pass from ``tdrl.modules.one_pass_per_input``.

- ``tdrl``: ``make_vec_env("tdrl/Breakout-v5", backend="envpool")``, ``Collector``,
  ``RewardClipping``, ``GAE``, ``minibatches`` and ``ClipPPOLoss``: what the recipe runs.
- ``cleanrl logic``: written here from CleanRL's algorithm (its code is not copied): envpool
  stepped by hand with numpy actions into preallocated tensors, envpool's own next-step reset
  (CleanRL's), GAE as a reverse Python loop over the 128 steps, the PPO loss written out.

The figure is env steps per second of whole iterations (collection and update), the best of
``--rounds`` interleaved rounds after one warm-up iteration each; one torch thread. Ratios are
within this one run; absolute figures depend on the machine and its load.

    python benchmarks/atari_ppo_speed.py               # 3 iterations a round, 2 rounds
    python benchmarks/atari_ppo_speed.py --quick       # 1 iteration, 1 round
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from tdrl.envs.envpool_backend import envpool_task

NUM_ENVS, STEPS, EPOCHS, MINIBATCH = 8, 128, 4, 256
GAMMA, LMBDA, CLIP, ENT, VF, LR, MAX_NORM = 0.99, 0.95, 0.1, 0.01, 0.5, 2.5e-4, 0.5
OPTIONS = {"frame_stack": 4, "terminal_on_life_loss": True}


def networks(seed: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """tdrl's actor and critic for Breakout's frames (the same for both sides)."""
    from tdrl.envs import make_vec_env
    from tdrl.modules import actor_critic

    torch.manual_seed(seed)
    with make_vec_env("tdrl/Breakout-v5", 1, seed=seed, **OPTIONS) as env:  # the specs only
        actor, critic, _ = actor_critic(env.observation_spec, env.action_spec)
    return actor, critic


def tdrl_run(iterations: int, seed: int = 0) -> float:
    """Env steps per second of ``iterations`` iterations after a warm-up one, tdrl's parts."""
    from tdrl.collectors import Collector
    from tdrl.data import minibatches
    from tdrl.envs import RewardClipping, make_vec_env
    from tdrl.estimators import GAE
    from tdrl.objectives import ClipPPOLoss, total_loss
    from tdrl.trainers import optimizer_step

    actor, critic = networks(seed)
    env = make_vec_env("tdrl/Breakout-v5", NUM_ENVS, seed=seed, backend="envpool", **OPTIONS)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=CLIP, entropy_coeff=ENT, critic_coeff=VF,
                       normalize_advantage=True)  # fmt: skip
    estimator = GAE(gamma=GAMMA, lmbda=LMBDA, value_network=critic)
    optimizer = torch.optim.Adam(loss.parameters(), lr=LR, eps=1e-5)
    frames = NUM_ENVS * STEPS
    collector = Collector(env, actor, frames, frames * (iterations + 1))
    clip = RewardClipping(-1.0, 1.0)
    start = 0.0
    for i, batch in enumerate(collector):
        batch = clip(batch)
        with torch.no_grad():
            estimator(batch)
        for minibatch in minibatches(batch, MINIBATCH, epochs=EPOCHS, in_keys=loss.in_keys):
            optimizer_step(total_loss(loss(minibatch)), optimizer, max_grad_norm=MAX_NORM)
        if i == 0:
            start = time.perf_counter()  # after the warm-up iteration
    elapsed = time.perf_counter() - start
    env.close()
    return frames * iterations / elapsed


def cleanrl_run(iterations: int, seed: int = 0) -> float:
    """The same work in CleanRL's loop logic: raw envpool, tensors, a Python GAE loop."""
    import envpool

    actor, critic = networks(seed)
    # CleanRL's Agent: one pass of the shared CNN, then the policy and value heads on it
    trunk, policy_head, value_head = actor.net[0], actor.net[1], critic.net[1]
    assert critic.net[0] is trunk
    task, options = envpool_task("tdrl/Breakout-v5", **OPTIONS)
    envs = envpool.make(task, env_type="gymnasium", num_envs=NUM_ENVS, seed=seed, **options)
    params = list(dict.fromkeys([*actor.parameters(), *critic.parameters()]))
    optimizer = torch.optim.Adam(params, lr=LR, eps=1e-5)
    obs_shape = envs.observation_space.shape
    obs = torch.zeros((STEPS, NUM_ENVS, *obs_shape), dtype=torch.uint8)
    actions = torch.zeros((STEPS, NUM_ENVS), dtype=torch.int64)
    logprobs, rewards, dones, values = (torch.zeros((STEPS, NUM_ENVS)) for _ in range(4))
    next_obs = torch.as_tensor(envs.reset()[0])
    next_done = torch.zeros(NUM_ENVS)
    start = 0.0
    for i in range(iterations + 1):
        for step in range(STEPS):
            obs[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                hidden = trunk(next_obs)
                dist = torch.distributions.Categorical(logits=policy_head(hidden))
                action = dist.sample()
                values[step] = value_head(hidden).squeeze(-1)
            actions[step], logprobs[step] = action, dist.log_prob(action)
            frame, reward, terminated, truncated, _ = envs.step(action.numpy())
            rewards[step] = torch.as_tensor(np.clip(reward, -1.0, 1.0), dtype=torch.float32)
            next_obs = torch.as_tensor(frame)
            next_done = torch.as_tensor(terminated | truncated, dtype=torch.float32)
        with torch.no_grad():
            next_value = value_head(trunk(next_obs)).squeeze(-1)
            advantages = torch.zeros_like(rewards)
            last = torch.zeros(NUM_ENVS)
            for t in reversed(range(STEPS)):
                nonterminal = 1.0 - (next_done if t == STEPS - 1 else dones[t + 1])
                following = next_value if t == STEPS - 1 else values[t + 1]
                delta = rewards[t] + GAMMA * following * nonterminal - values[t]
                last = delta + GAMMA * LMBDA * nonterminal * last
                advantages[t] = last
            returns = advantages + values
        flat = [x.reshape(STEPS * NUM_ENVS, *x.shape[2:]) for x in (obs, actions, logprobs)]
        b_obs, b_actions, b_logprobs = flat
        b_adv, b_returns = advantages.reshape(-1), returns.reshape(-1)
        for _ in range(EPOCHS):
            order = torch.randperm(STEPS * NUM_ENVS)
            for begin in range(0, STEPS * NUM_ENVS, MINIBATCH):
                idx = order[begin : begin + MINIBATCH]
                hidden = trunk(b_obs[idx])
                dist = torch.distributions.Categorical(logits=policy_head(hidden))
                ratio = (dist.log_prob(b_actions[idx]) - b_logprobs[idx]).exp()
                adv = b_adv[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - CLIP, 1 + CLIP)).mean()
                error = value_head(hidden).squeeze(-1) - b_returns[idx]
                value_loss = 0.5 * error.pow(2).mean()
                total = policy_loss - ENT * dist.entropy().mean() + VF * value_loss
                optimizer.zero_grad()
                total.backward()
                torch.nn.utils.clip_grad_norm_(params, MAX_NORM)
                optimizer.step()
        if i == 0:
            start = time.perf_counter()
    elapsed = time.perf_counter() - start
    envs.close()
    return NUM_ENVS * STEPS * iterations / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="1 iteration, 1 round")
    args = parser.parse_args()
    iterations, rounds = (1, 1) if args.quick else (args.iterations, args.rounds)
    torch.set_num_threads(1)
    best = {"tdrl": 0.0, "cleanrl logic": 0.0}
    for r in range(rounds):
        for name, run in (("tdrl", tdrl_run), ("cleanrl logic", cleanrl_run)):
            rate = run(iterations)
            best[name] = max(best[name], rate)
            print(f"round {r}: {name:14s} {rate:8.1f} env steps/s", flush=True)
    print(
        f"\nPPO on envpool Breakout-v5, {NUM_ENVS} envs x {STEPS} steps, {EPOCHS} epochs of "
        f"{MINIBATCH}; best of {rounds} round(s) of {iterations} iteration(s), 1 thread"
    )
    print("| loop | env steps/s | ratio to CleanRL's logic |\n|---|---|---|")
    for name, rate in best.items():
        print(f"| {name} | {rate:.1f} | {rate / best['cleanrl logic']:.2f} |")


if __name__ == "__main__":
    main()
