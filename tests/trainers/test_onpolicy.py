"""On-policy loop parts: the minibatches of a rollout (:func:`tdrl.data.minibatches`), the
learning-rate schedule (:func:`tdrl.trainers.linear_decay`), the pieces of a recipe's update
(estimator on the whole rollout, minibatch steps, the natural-gradient step), the actor-critic
builder, and the collector/env state that makes a resumed run identical to an uninterrupted one.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

import tdrl.estimators
from tdrl.collectors import Collector
from tdrl.data import minibatches
from tdrl.envs import make_vec_env
from tdrl.estimators import GAE
from tdrl.modules import CategoricalActor, GaussianActor, actor_critic
from tdrl.objectives import A2CLoss, TRPOLoss, total_loss
from tdrl.trainers import configure, latest_checkpoint, linear_decay, optimizer_step, read_csv
from tdrl.trainers.logger import Logger
from tdrl.trainers.run import drop_rows_after, resume_run, save_run


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


def _grid(envs: int, steps: int) -> TensorDict:
    """A ``[envs, steps]`` rollout whose ``"where"`` entry is each sample's (env, step)."""
    where = torch.stack(torch.meshgrid(torch.arange(envs), torch.arange(steps), indexing="ij"), -1)
    return TensorDict({"where": where, "advantage": torch.randn(envs, steps, 1)}, [envs, steps])


@pytest.mark.parametrize("minibatch_size", [None, 7, 8, 40, 1000])
def test_minibatches_show_every_sample_once_an_epoch(minibatch_size) -> None:
    batch = _grid(4, 10)
    got = list(minibatches(batch, minibatch_size, epochs=3))
    size = 40 if minibatch_size is None else minibatch_size
    per_epoch = math.ceil(40 / size)
    assert len(got) == 3 * per_epoch
    for epoch in range(3):
        parts = got[epoch * per_epoch : (epoch + 1) * per_epoch]
        # contiguous slices of one shuffle: all full but the last
        assert [p.batch_size[0] for p in parts[:-1]] == [min(size, 40)] * (per_epoch - 1)
        assert sum(p.batch_size[0] for p in parts) == 40
        seen = torch.cat([p["where"] for p in parts])
        assert sorted(map(tuple, seen.tolist())) == sorted(
            map(tuple, batch["where"].reshape(-1, 2).tolist())
        )
        # each sample keeps its own entries (shuffled together)
        for part in parts:
            env, step = part["where"].unbind(-1)
            assert torch.equal(part["advantage"], batch["advantage"][env, step])
    # a new permutation every epoch, from the global generator (or the one given)
    assert not torch.equal(got[0]["where"], got[per_epoch]["where"]) or minibatch_size == 1000
    first = [p["where"] for p in minibatches(batch, 8, generator=torch.Generator().manual_seed(1))]
    again = [p["where"] for p in minibatches(batch, 8, generator=torch.Generator().manual_seed(1))]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert list(minibatches(batch, 8, epochs=0)) == []


def test_minibatches_keep_only_the_loss_keys_and_name_a_missing_one() -> None:
    batch = _grid(2, 6)
    (only,) = minibatches(batch, None, in_keys=["advantage"])
    assert set(only.keys()) == {"advantage"} and only.batch_size == (12,)
    with pytest.raises(KeyError, match=r"no \['value_target'\] entries \(the loss reads them\)"):
        next(minibatches(batch, 4, in_keys=["advantage", "value_target"]))


@pytest.mark.parametrize("key", ["advantage", "value_target", "action_log_prob"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_minibatches_name_a_nan_or_inf_before_the_first_minibatch(key, bad) -> None:
    # one NaN advantage, standardized over a minibatch, turns every weight to NaN
    batch = _grid(4, 8)
    batch[key] = torch.zeros(4, 8, 1)
    batch[key][1, 3] = bad
    with pytest.raises(ValueError, match=rf"'{key}' contains NaN or inf \(1 of 32 entries\)"):
        next(minibatches(batch, 8))


@pytest.mark.parametrize("minibatch_size", [8, 6, None])
def test_minibatches_with_seq_len_hold_whole_chunks_of_each_env_row_in_order(
    minibatch_size,
) -> None:
    envs, steps, seq_len = 3, 12, 4
    batch = _grid(envs, steps)
    got = list(minibatches(batch, minibatch_size, epochs=2, seq_len=seq_len))
    # 9 chunks of 4 steps; 8 // 4 = 2 chunks a minibatch: 5 steps an epoch; 6 // 4 = 1 chunk:
    # 9 steps (not ceil(36 / 6) = 6); None: all 9 chunks in one step
    chunks_per_step = {8: 2, 6: 1, None: 9}[minibatch_size]
    per_epoch = math.ceil(9 / chunks_per_step)
    assert len(got) == 2 * per_epoch
    for epoch in range(2):
        chunks = set()
        for part in got[epoch * per_epoch : (epoch + 1) * per_epoch]:
            assert part.batch_size[1] == seq_len and 1 <= part.batch_size[0] <= chunks_per_step
            for chunk in part["where"]:  # one env, consecutive steps from a multiple of seq_len
                env, step = chunk[:, 0], chunk[:, 1]
                assert (env == env[0]).all() and torch.equal(step, step[0] + torch.arange(seq_len))
                assert step[0] % seq_len == 0
                chunks.add((int(env[0]), int(step[0])))
        assert len(chunks) == envs * steps // seq_len  # every chunk seen, once
    with pytest.raises(ValueError, match="seq_len=5 does not divide the rollout's 12 steps"):
        next(minibatches(batch, 8, seq_len=5))
    with pytest.raises(ValueError, match=r"seq_len needs a \[num_envs, T\] rollout"):
        next(minibatches(batch.reshape(-1), 8, seq_len=4))


def test_linear_decay_goes_to_zero_over_its_steps_and_stays_there() -> None:
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(()))], lr=3e-4)
    scheduler = linear_decay(optimizer, 4)
    lrs = []
    for _ in range(6):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx([3e-4, 2.25e-4, 1.5e-4, 0.75e-4, 0.0, 0.0])
    assert optimizer.param_groups[0]["lr"] == 0.0
    constant = torch.optim.Adam([torch.nn.Parameter(torch.zeros(()))], lr=1e-3)
    scheduler = linear_decay(constant, 4, decay=False)
    for _ in range(6):
        constant.step()
        scheduler.step()
    assert scheduler.get_last_lr() == [1e-3]


def test_the_learning_rate_can_decay_over_a_longer_horizon_than_the_run() -> None:
    """--lr-decay-frames 3M at a 1M budget (Tianshou's MuJoCo schedule): after the run's
    batches the learning rate is still 2/3 of its start; a run longer than the horizon, and the
    default 0, decay over the run's own frames."""
    from tdrl.trainers.config import OnPolicyConfig

    def lr_after(cfg: OnPolicyConfig, total_frames: int, batches: int) -> float:
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(()))], lr=3e-4)
        scheduler = cfg.lr_schedule(optimizer, total_frames)
        for _ in range(batches):
            optimizer.step()
            scheduler.step()
        return scheduler.get_last_lr()[0]

    long = OnPolicyConfig(frames_per_batch=2048, lr=3e-4, lr_decay_frames=3_000_000)
    run_batches = math.ceil(1_000_000 / 2048)  # 489
    assert lr_after(long, 1_000_000, run_batches) == pytest.approx(3e-4 * (1 - 489 / 1465))
    own = OnPolicyConfig(frames_per_batch=2048, lr=3e-4)
    assert lr_after(own, 1_000_000, run_batches) == 0.0
    assert lr_after(long, 4_096_000, 2000) == 0.0  # a longer run decays over its own frames
    with pytest.raises(ValueError, match="--lr-decay-frames must be >= 0, got -1"):
        OnPolicyConfig(lr_decay_frames=-1)


def _update(batch, loss, estimator, optimizer, *, epochs=1, minibatch_size=None, seq_len=None):
    """A recipe's on-policy update: the estimator on the whole rollout, then minibatch steps;
    returns the mean loss outputs and the number of gradient steps."""
    with torch.no_grad():
        estimator(batch)
    outs = []
    for minibatch in minibatches(
        batch, minibatch_size, epochs=epochs, in_keys=loss.in_keys, seq_len=seq_len
    ):
        out = loss(minibatch)
        optimizer_step(total_loss(out), optimizer)
        outs.append(out.detach())
    return torch.stack(outs).mean(), len(outs)


def test_the_estimator_runs_on_the_whole_rollout_before_the_minibatches() -> None:
    torch.manual_seed(0)
    with make_vec_env("CartPole-v1", 4, seed=0) as env:
        actor, _, loss, estimator, optimizer = _parts(env, A2CLoss, 1e-3)
        batch = next(iter(Collector(env, actor, 64)))
        assert "advantage" not in batch.keys()
        before = [p.detach().clone() for p in loss.parameters()]
        metrics, steps = _update(batch, loss, estimator, optimizer)
        assert batch["advantage"].shape == (4, 16, 1)  # written on the [num_envs, T] rollout
        assert steps == 1  # minibatch_size None: one full-batch step
        assert {"loss_objective", "loss_critic", "entropy"} <= set(metrics.keys())
        assert all(not torch.equal(a, b) for a, b in zip(before, loss.parameters(), strict=True))
        _, steps = _update(batch, loss, estimator, optimizer, epochs=3, minibatch_size=16)
        assert steps == 3 * 64 / 16


def test_natural_gradient_step_keeps_kl_and_owns_parameter_storage() -> None:
    torch.manual_seed(0)
    with make_vec_env("Pendulum-v1", 4, seed=0) as env:
        actor, _, loss, estimator, optimizer = _parts(env, TRPOLoss, 1e-3, max_kl=0.01)
        collector = Collector(env, actor, 256)
        for i, batch in enumerate([next(iter(collector)), collector.rollout()]):
            with torch.no_grad():
                estimator(batch)
            flat = batch.reshape(-1)
            step = loss.actor_step(flat)
            assert step["kl"] <= 0.01
            if i == 0:
                assert 0 < step["kl"] and step["step_size"] > 0
            critic = [p.detach().clone() for p in loss.critic_network.parameters()]
            for minibatch in minibatches(flat, None, epochs=2, in_keys=loss.in_keys):
                optimizer_step(total_loss(loss(minibatch)), optimizer)
            moved = zip(critic, loss.critic_network.parameters(), strict=True)
            assert all(not torch.equal(a, b) for a, b in moved)
        for param in actor.parameters():  # not views into the step's flat vector
            assert param.untyped_storage().nbytes() == param.numel() * param.element_size()


def _tiny_ppo(tmp_path: Path, **overrides):
    from recipes import ppo

    values = dict(
        env_id="Hopper-v5", total_frames=256, num_envs=4, frames_per_batch=64, epochs=3,
        minibatch_size=16, eval_every=0, eval_episodes=1, eval_envs=1, hidden_sizes=(16, 16),
        log_dir=str(tmp_path), progress=False, tensorboard=False, curve=False,
    )  # fmt: skip
    return ppo, configure(ppo.Config, **{**values, **overrides})


@pytest.mark.parametrize("epochs", [3, 1])
def test_recompute_advantage_estimates_before_every_epoch_with_the_trained_critic(
    epochs, tmp_path, monkeypatch
) -> None:
    """recipes/ppo.py --recompute-advantage: the estimator runs before every epoch, each time
    after the previous epoch's steps (its advantages then differ), the steps are all counted;
    with one epoch it runs once a batch either way."""
    ppo, cfg = _tiny_ppo(tmp_path, lr=1e-2, epochs=epochs, recompute_advantage=True)
    seen: list[torch.Tensor] = []

    class Recording(GAE):
        def forward(self, tensordict, **kwargs):
            out = super().forward(tensordict, **kwargs)
            seen.append(out["advantage"].clone())
            return out

    monkeypatch.setattr(tdrl.estimators, "GAE", Recording)
    result = ppo.main(cfg)
    assert len(seen) == 4 * epochs  # 4 batches
    assert result["updates"] == 4 * epochs * 64 / 16
    if epochs > 1:
        for i in range(4):
            one = seen[i * epochs : (i + 1) * epochs]
            assert all(not torch.allclose(a, b) for a, b in zip(one[:-1], one[1:], strict=True))


def test_the_schedule_steps_once_a_batch_and_the_norm_sees_every_observation(tmp_path) -> None:
    """recipes/ppo.py: the learning rate logged with each batch's update decays linearly to 0 over
    the run's batches; the observation norm folds in every collected observation."""
    ppo, cfg = _tiny_ppo(tmp_path, lr=3e-4, epochs=2, minibatch_size=32)
    ppo.main(cfg)
    rows = read_csv(tmp_path / "train.csv")
    assert [row["lr"] for row in rows] == pytest.approx([3e-4, 2.25e-4, 1.5e-4, 0.75e-4])
    assert "kl_approx" in rows[0] and any("episode_return" in row for row in rows)
    state = torch.load(latest_checkpoint(tmp_path) / "checkpoint.pt", weights_only=False)
    assert state["scheduler"]["last_epoch"] == 4
    assert state["optimizer"]["param_groups"][0]["lr"] == 0.0
    count = next(v for k, v in state["actor"].items() if k.endswith("obs_norm.count"))
    assert float(count) == pytest.approx(256)  # 256 observations folded in


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
