"""REINFORCE (Williams 1992) on a MuJoCo task, or any gymnasium task.

Defaults are Tianshou's MuJoCo REINFORCE benchmark (examples/mujoco/mujoco_reinforce.py): 2048
steps per batch, one full-batch Adam step (lr 1e-3, decayed linearly to 0), gamma 0.99, Monte
Carlo returns without a baseline, normalized over the batch (Tianshou normalizes the returns),
64x64 tanh MLP, initial log-std -0.5, observation normalization. Differences: 8 envs x 256
steps (Tianshou: 10 envs), actions clipped to the bounds (Tianshou: tanh; it reports clipping
works as well), a short default budget. Returns of episodes still running at the end of a batch
are cut there (value 0; with --baseline, V bootstraps them).

    python recipes/reinforce.py                             # Hopper-v5, short budget
    python recipes/reinforce.py --baseline                  # with a learned value baseline
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from tdrl import trainers
from tdrl.trainers import config

if TYPE_CHECKING:
    from tensordict import TensorDictBase
    from tensordict.nn import TensorDictModule


@trainers.configclass
class Config:
    compiled_steps: ClassVar[bool] = True  # --compile and --cudagraphs apply to its updates
    run: config.RunConfig = config.RunConfig()
    workers: config.WorkersConfig = config.WorkersConfig()
    onpolicy: config.OnPolicyConfig = config.OnPolicyConfig(lr=1e-3)
    net: config.NetworkConfig = config.NetworkConfig()
    baseline: bool = False
    """subtract a learned state value from the return (and train it)."""


def zero_value(observation_dims: int) -> TensorDictModule:
    """V = 0 everywhere (float, ``[*B, 1]`` for observations of ``observation_dims`` dims: 1 for
    vectors, 3 for frames): the estimator then returns plain discounted returns."""
    import torch
    from tensordict.nn import TensorDictModule

    from tdrl.keys import OBSERVATION, STATE_VALUE

    def zeros(observation: torch.Tensor) -> torch.Tensor:
        batch = observation.shape[: observation.dim() - observation_dims]
        return torch.zeros(*batch, 1, device=observation.device)

    return TensorDictModule(zeros, in_keys=[OBSERVATION], out_keys=[STATE_VALUE])


def main(cfg: Config) -> dict[str, float]:
    """Train REINFORCE as configured; returns the last evaluation and update's metrics."""
    # the library loads here, after the command line: --help answers without it
    import torch

    from tdrl.data import minibatches
    from tdrl.estimators import TD1Estimator
    from tdrl.keys import OBSERVATION
    from tdrl.objectives import ReinforceLoss, total_loss

    cfg.net.refuse_memory("reinforce.py")  # feed-forward, state-independent log-std policies only
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run)
    device = cfg.run.torch_device

    # 2. networks: actor and critic (the baseline, used with --baseline), observation norm
    nets = cfg.net.build(env.observation_spec, env.action_spec, recipe="reinforce.py", memory=False)

    # 3. loss, estimator (Monte Carlo returns on the whole rollout), optimizer, schedule
    baseline = nets.critic if cfg.baseline else None
    loss = ReinforceLoss(
        nets.actor, baseline, normalize_advantage=cfg.onpolicy.normalize_advantage
    ).to(device)
    spec = env.observation_spec
    obs_dims = len(spec[OBSERVATION].shape) - len(spec.shape)  # vectors 1, frames 3
    value = baseline or zero_value(obs_dims)
    estimator = TD1Estimator(gamma=cfg.onpolicy.gamma, value_network=value)
    estimator.to(device)
    optimizer = torch.optim.Adam(loss.parameters(), lr=cfg.onpolicy.lr, fused=True)
    scheduler = cfg.onpolicy.lr_schedule(optimizer, cfg.run.total_frames)
    scaler = cfg.onpolicy.reward_scaler(device)  # --scale-rewards: the baseline's returns too
    state = nets.state(optimizer=optimizer, scheduler=scheduler, reward_scaler=scaler)
    collector = trainers.make_collector(
        cfg.run, env, nets.acting, cfg.onpolicy.frames_per_batch, workers=cfg.workers
    )

    # 4. the full-batch step, compiled (--compile) and/or captured in a CUDA graph (--cudagraphs)
    def learn(minibatch: TensorDictBase) -> TensorDictBase:
        out = loss(minibatch)
        trainers.optimizer_step(total_loss(out), optimizer)
        return out.detach()

    update = trainers.compiled_step(learn, optimizer, **cfg.run.compile_options())

    # 5. the loop: collect a rollout, its returns, one full-batch step
    with trainers.Run.from_config(
        cfg, "REINFORCE", state, eval_env=eval_env, policy=nets.policy
    ) as run:
        for batch in run.resume(collector):
            if scaler is not None:
                scaler(batch)
            estimator(batch)  # no gradients: the estimator is not differentiable
            for minibatch in minibatches(batch, None, in_keys=loss.in_keys):
                run.record(update(minibatch))
                run.updates += 1
            scheduler.step()
            nets.update_obs_norm(batch)  # after the update, which saw the collection's stats
            run.step()  # push weights to workers, log, evaluate, checkpoint when due
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
