"""On-policy loop parts: update steps, the one-call loop, the actor-critic builder, and the
collector/env state that makes a resumed run identical to an uninterrupted one."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env
from tdrl.estimators import GAE
from tdrl.modules import CategoricalActor, GaussianActor, actor_critic
from tdrl.objectives import A2CLoss, ClipPPOLoss, TRPOLoss
from tdrl.trainers import (
    Logger,
    drop_rows_after,
    natural_gradient_update,
    on_policy_update,
    read_csv,
    train_on_policy,
)


def test_actor_critic_picks_the_policy_and_shares_obs_norm() -> None:
    with make_vec_env("Hopper-v5", 2, seed=0) as env:
        actor, critic, obs_norm = actor_critic(env.observation_spec, env.action_spec)
        assert isinstance(actor, GaussianActor)
        assert obs_norm is not None
        obs_norm.update(torch.randn(100, 11) * 5 + 3)
        batch = env.reset()
        actor(batch)
        critic(batch)
        # Both networks see the same normalized input: their first layer is the shared norm.
        assert actor.net[0].obs_norm is critic.net[0].obs_norm is obs_norm
        assert "net.0.obs_norm.mean" in actor.state_dict()
    with make_vec_env("CartPole-v1", 2, seed=0) as env:
        actor, _, obs_norm = actor_critic(
            env.observation_spec, env.action_spec, normalize_observations=False
        )
        assert isinstance(actor, CategoricalActor) and obs_norm is None
        assert actor(env.reset())["logits"].shape == (2, 2)


def _parts(env, loss_cls, lr, **loss_kwargs):
    """Networks for ``env``, ``loss_cls`` over them, GAE, and an Adam on what the loss trains."""
    actor, critic, obs_norm = actor_critic(env.observation_spec, env.action_spec)
    loss = loss_cls(actor, critic, **loss_kwargs)
    estimator = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    trained = critic if loss_cls is TRPOLoss else loss
    optimizer = torch.optim.Adam(trained.parameters(), lr=lr)
    return actor, obs_norm, loss, estimator, optimizer


def test_on_policy_update_estimates_on_the_whole_rollout_first() -> None:
    torch.manual_seed(0)
    with make_vec_env("CartPole-v1", 4, seed=0) as env:
        actor, _, loss, estimator, optimizer = _parts(env, A2CLoss, 1e-3)
        batch = next(iter(Collector(env, actor, 64)))
        assert "advantage" not in batch.keys()
        before = [p.detach().clone() for p in loss.parameters()]
        metrics = on_policy_update(batch, loss, estimator, optimizer)
        assert batch["advantage"].shape == (4, 16, 1)  # written on the [num_envs, T] rollout
        assert {"loss_objective", "loss_critic", "entropy"} <= set(metrics)
        assert all(isinstance(v, float) for v in metrics.values())
        assert all(not torch.equal(a, b) for a, b in zip(before, loss.parameters(), strict=True))


def test_recompute_advantage_estimates_before_every_epoch_with_the_trained_critic() -> None:
    """Three epochs: the estimator runs three times, each time after the previous epoch's steps
    (its advantages differ from the once-estimated ones), and the metrics count every step."""
    torch.manual_seed(0)
    with make_vec_env("Hopper-v5", 4, seed=0) as env:
        actor, _, loss, estimator, optimizer = _parts(env, ClipPPOLoss, 1e-2)
        batch = next(iter(Collector(env, actor, 64)))
        seen: list[torch.Tensor] = []
        estimator.register_forward_hook(lambda m, i, out: seen.append(out["advantage"].clone()))
        once = batch.clone()
        with torch.no_grad():
            estimator(once)
        seen.clear()
        metrics = on_policy_update(batch, loss, estimator, optimizer, epochs=3,
                                   minibatch_size=16, recompute_advantage=True)  # fmt: skip
        assert len(seen) == 3
        assert torch.equal(seen[0], once["advantage"])  # before any step: the same estimate
        assert not torch.allclose(seen[1], seen[0]) and not torch.allclose(seen[2], seen[1])
        assert torch.equal(batch["advantage"], seen[2])
        assert metrics["updates"] == 3 * 64 / 16
        # epochs=1: recompute changes nothing (one estimate either way)
        seen.clear()
        on_policy_update(once.clone(), loss, estimator, optimizer, epochs=1, minibatch_size=16,
                         recompute_advantage=True)  # fmt: skip
        assert len(seen) == 1


def test_natural_gradient_update_keeps_kl_and_owns_parameter_storage() -> None:
    torch.manual_seed(0)
    with make_vec_env("Pendulum-v1", 4, seed=0) as env:
        actor, _, loss, estimator, optimizer = _parts(env, TRPOLoss, 1e-3, max_kl=0.01)
        collector = Collector(env, actor, 256)
        first = natural_gradient_update(next(iter(collector)), loss, estimator, optimizer)
        assert 0 < first["kl"] <= 0.01 and first["step_size"] > 0
        later = natural_gradient_update(collector.rollout(), loss, estimator, optimizer)
        assert later["kl"] <= 0.01
        for param in actor.parameters():  # not views into the step's flat vector
            assert param.untyped_storage().nbytes() == param.numel() * param.element_size()


def test_train_on_policy_runs_the_loop_and_stops_on_callback() -> None:
    torch.manual_seed(0)
    with make_vec_env("CartPole-v1", 4, seed=0) as env:
        actor, obs_norm, loss, estimator, optimizer = _parts(env, ClipPPOLoss, 3e-4)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1 - i / 4)
        collector = Collector(env, actor, 128, total_frames=512)
        update = partial(
            on_policy_update, loss=loss, estimator=estimator, optimizer=optimizer, epochs=2,
            minibatch_size=32,
        )  # fmt: skip
        history = train_on_policy(collector, update, scheduler=scheduler, obs_norm=obs_norm)
        assert [row["frames"] for row in history] == [128, 256, 384, 512]
        assert "kl_approx" in history[0] and "episode_return" in history[-1]
        assert history[0]["lr"] == pytest.approx(3e-4) and history[1]["lr"] == pytest.approx(
            2.25e-4
        )
        assert optimizer.param_groups[0]["lr"] == 0.0
        assert obs_norm is not None and obs_norm.count > 500  # 512 observations folded in
        seen = []
        collector = Collector(env, actor, 128, total_frames=10_000)
        history = train_on_policy(
            collector, update, callback=lambda b, m: seen.append(m) or len(seen) >= 2
        )
        assert len(history) == len(seen) == 2


@pytest.mark.parametrize("env_id", ["Hopper-v5", "CartPole-v1", "Pendulum-v1"])
def test_collector_state_restores_the_env_stream(env_id: str) -> None:
    """Batch after a restore == the batch that followed the save (resets included)."""
    torch.manual_seed(0)
    with make_vec_env(env_id, 3, seed=1) as env:
        collector = Collector(env, None, 300)
        collector.rollout()
        state = collector.state_dict()
        after_save = collector.rollout()
        collector.rollout()  # move on, then go back
    with make_vec_env(env_id, 3, seed=99) as fresh_env:  # different seed: all from the state
        fresh = Collector(fresh_env, None, 300)
        assert fresh.load_state_dict(state)
        replayed = fresh.rollout()
    assert after_save["next", "done"].any()  # episodes ended: resets were reproduced too
    assert fresh.frames == 600
    for key in after_save.keys(True, True):
        assert torch.equal(after_save[key], replayed[key]), key


def test_async_env_resume_reseeds_instead() -> None:
    with make_vec_env("CartPole-v1", 2, mode="async", seed=0) as env:
        collector = Collector(env, None, 20)
        collector.rollout()
        state = collector.state_dict()
        assert state["env"] is None
        assert not collector.load_state_dict(state)
        batch = collector.rollout()  # fresh episodes from a derived seed
        assert batch["collector", "traj_ids"][:, 0].tolist() != [0, 1]


@pytest.mark.parametrize("frame_stack", [1, 4])
def test_an_env_with_state_out_of_reach_resumes_reseeded_not_half_restored(frame_stack) -> None:
    # MinAtar keeps its game in an object, a frame stack its queue: restoring the rest and
    # calling it exact paired the saved observation with an unrelated game state.
    pytest.importorskip("minatar")
    kwargs = {"frame_stack": frame_stack} if frame_stack > 1 else {}
    with make_vec_env("MinAtar/Breakout-v1", 2, seed=0, **kwargs) as env:
        collector = Collector(env, None, 20)
        before = collector.rollout()["collector", "traj_ids"][:, -1]
        state = collector.state_dict()
        assert state["env"] is None
        assert not collector.load_state_dict(state)  # so the caller cuts the episodes
        batch = collector.rollout()  # fresh episodes from a derived seed: new ids
        assert (batch["collector", "traj_ids"][:, 0] > before.max()).all()


def test_drop_rows_after(tmp_path: Path) -> None:
    with Logger(tmp_path, tensorboard=False) as logger:
        for step in (100, 200, 300):
            logger.log("train", step, {"loss": step / 100})
    drop_rows_after(tmp_path, 200)
    assert read_csv(tmp_path / "train.csv") == [
        {"step": 100.0, "loss": 1.0},
        {"step": 200.0, "loss": 2.0},
    ]


def test_resume_run_marks_the_buffer_seam_only_when_episodes_restart(tmp_path: Path) -> None:
    """Sync envs resume exactly (no seam); async envs restart their episodes, so the newest
    stored step of every stream is marked truncated."""
    from tdrl.data import ReplayBuffer
    from tdrl.trainers import resume_run, save_run

    for mode, exact in (("sync", True), ("async", False)):
        with make_vec_env("CartPole-v1", 2, mode=mode, seed=0) as env:
            collector = Collector(env, None, 10)
            buffer = ReplayBuffer(100)
            buffer.extend(collector.rollout())
            path = tmp_path / mode
            save_run(path, collector, {"frames": collector.frames}, buffer)
            fresh = ReplayBuffer(100)
            counters = resume_run(path, Collector(env, None, 10), fresh)
        assert counters == {"frames": 10}
        newest = fresh.storage["next", "truncated"][4]  # [streams, 1] of the 5th step
        assert bool(newest.all()) is not exact, mode
        assert not fresh.storage["next", "truncated"][:4].any()


def test_ppo_update_with_seq_len_trains_on_whole_chunks_in_sequence_mode() -> None:
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModuleBase
    from torchrl.modules import recurrent_mode

    from tdrl.trainers import ppo_update

    class Recorder(TensorDictModuleBase):
        """A loss that records what it is given: shapes, (env, step) ids and the mode."""

        in_keys, out_keys = ["where"], ["loss_x"]

        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))
            self.seen: list[tuple[torch.Size, torch.Tensor, bool]] = []

        def forward(self, td):
            self.seen.append((td.batch_size, td["where"].clone(), bool(recurrent_mode())))
            return TensorDict({"loss_x": self.w * 1.0}, [])

    envs, steps, seq_len = 3, 12, 4
    where = torch.stack(torch.meshgrid(torch.arange(envs), torch.arange(steps), indexing="ij"), -1)
    batch = TensorDict({"where": where}, [envs, steps])
    loss = Recorder()
    optimizer = torch.optim.SGD(loss.parameters(), lr=0.1)
    ppo_update(loss, optimizer, batch, epochs=2, minibatch_size=8, seq_len=seq_len)
    assert len(loss.seen) == 2 * 5  # 9 chunks of 4, 2 per minibatch (8 // 4): 5 steps an epoch
    chunks = set()
    for size, ids, sequence_mode in loss.seen:
        assert sequence_mode and size[1] == seq_len and size[0] in (1, 2)
        for chunk in ids:  # one env, consecutive steps starting at a multiple of seq_len
            env, step = chunk[:, 0], chunk[:, 1]
            assert (env == env[0]).all() and torch.equal(step, step[0] + torch.arange(seq_len))
            assert step[0] % seq_len == 0
            chunks.add((int(env[0]), int(step[0])))
    assert len(chunks) == envs * steps // seq_len  # every chunk seen
    # on_policy_update counts the steps ppo_update takes: 6 // 4 = one chunk a minibatch, so
    # 9 steps an epoch (not ceil(36 / 6) = 6)
    from tdrl.trainers import on_policy_update

    loss.seen.clear()
    metrics = on_policy_update(
        batch, loss, lambda td: td, optimizer, epochs=2, minibatch_size=6, seq_len=seq_len
    )
    assert metrics["updates"] == len(loss.seen) == 2 * 9
    with pytest.raises(ValueError, match="seq_len=5 does not divide the rollout's 12 steps"):
        ppo_update(loss, optimizer, batch, epochs=1, minibatch_size=8, seq_len=5)
