"""RayCollector (a local Ray) and ProcessCollector (local subprocesses) with 2 workers: the same
batches as a local collector, versioned weights, the async lag bound, a killed worker, and clear
errors for bad input. The default run keeps one smoke per backend (the sync batches equal a
local collector's); the rest run with ``pytest -m workers``."""

from __future__ import annotations

import importlib.util
import os
import signal
import threading
import time
import warnings

import pytest
import torch
from torch import nn

from tdrl import keys
from tdrl.collectors import Collector, ProcessCollector, RayCollector, WorkerCollector
from tdrl.envs import make_vec_env
from tdrl.modules import CategoricalActor

HAS_RAY = importlib.util.find_spec("ray") is not None
# Ray's start-up alone takes minutes on a loaded 2-core machine (the default run beside other
# jobs): its tests get a longer limit than the suite's 300 s, which bounds hangs, not speed.
BACKENDS = [
    pytest.param(
        "ray",
        marks=[
            pytest.mark.ray,
            pytest.mark.skipif(not HAS_RAY, reason="no ray"),
            pytest.mark.timeout(900),
        ],
    ),  # fmt: skip
    "process",
]


pytestmark = pytest.mark.usefixtures("local_ray")  # tests/conftest.py


def collector(backend: str, *args, **kwargs) -> WorkerCollector:
    cls = RayCollector if backend == "ray" else ProcessCollector
    return cls(*args, **kwargs)


def kill(remote: WorkerCollector, w: int) -> None:
    """Kill worker ``w`` and wait until it is dead: both kills are asynchronous, and a loaded
    machine once let a Ray actor finish the next rollout before its kill arrived."""
    deadline = time.monotonic() + 60
    if isinstance(remote, RayCollector):
        actor = remote.workers[w]
        remote.ray.kill(actor)
        errors = remote.ray.exceptions
        while time.monotonic() < deadline:
            try:
                remote.ray.get(actor.__ray_ready__.remote(), timeout=5)
            except errors.RayActorError:
                return
            except errors.GetTimeoutError:
                continue
            time.sleep(0.05)
    else:
        assert isinstance(remote, ProcessCollector)
        pid = remote.pids[w]
        os.kill(pid, signal.SIGKILL)
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    if stat.read().split(")")[-1].split()[0] in ("Z", "X"):
                        return  # a zombie: dead, not yet reaped
            except FileNotFoundError:
                return
            time.sleep(0.05)
    raise AssertionError(f"worker {w} was still alive 60 s after its kill")


def policy(seed: int = 0) -> CategoricalActor:
    torch.manual_seed(seed)
    return CategoricalActor(nn.Linear(4, 2))


def same_but_ids(local, remote) -> bool:
    return all(
        torch.equal(local[k], remote[k])
        for k in local.keys(True, True)
        if k != keys.COLLECTOR_TRAJ_IDS
    )


def episode_ids(batch) -> list[list[int]]:
    """Per env row, the trajectory id at each step, renumbered 0, 1, ... by first appearance."""
    out = []
    for row in batch[keys.COLLECTOR_TRAJ_IDS].tolist():
        names: dict[int, int] = {}
        out.append([names.setdefault(i, len(names)) for i in row])
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_sync_batches_equal_the_local_collector_over_the_same_envs(backend):
    actor = policy()
    local = Collector(make_vec_env("CartPole-v1", 4, seed=3), actor, 120, deterministic=True)
    # the default run's one worker smoke: a reply may take minutes on a loaded 2-core machine
    # (Ray's start-up beside other jobs); the timeout bounds a hang, not the speed
    with collector(
        backend, "CartPole-v1", actor, 120, num_workers=2, num_envs=2, seed=3, deterministic=True,
        timeout=600,
    ) as remote:
        for step in range(4):
            if step == 2:  # new weights reach the workers, versioned
                with torch.no_grad():
                    actor.net.weight.mul_(-1.0)
                remote.update_policy_weights_()
            mine, theirs = local.rollout(), remote.rollout()
            assert theirs.shape == mine.shape == (4, 30)
            assert same_but_ids(mine, theirs)
            assert episode_ids(mine) == episode_ids(theirs)  # the same episode boundaries
            version = theirs[keys.COLLECTOR_POLICY_VERSION]
            assert (version == (1 if step >= 2 else 0)).all()
            assert theirs[keys.COLLECTOR_WORKER][:, 0].tolist() == [0, 0, 1, 1]
        ids = theirs[keys.COLLECTOR_TRAJ_IDS]
        assert (ids[:2] % 2 == 0).all() and (ids[2:] % 2 == 1).all()  # unique across workers
        assert remote.frames == local.frames == 480


@pytest.mark.workers
@pytest.mark.parametrize("backend", BACKENDS)
def test_async_batches_carry_their_version_within_the_lag_bound(backend):
    actor = policy()
    with collector(
        backend, "CartPole-v1", actor, 20, num_workers=2, num_envs=2, seed=0, sync=False,
        max_policy_lag=1,
    ) as remote:  # fmt: skip
        lags, workers, ended = [], set(), []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i, batch in enumerate(remote):
                ended += remote.episodes[keys.TRAJ_IDS].tolist()
                version = batch[keys.COLLECTOR_POLICY_VERSION].unique().tolist()
                assert len(version) == 1  # one policy acted the whole batch
                lags.append(remote.version - version[0])
                workers.add(int(batch[keys.COLLECTOR_WORKER][0, 0]))
                remote.update_policy_weights_()
                if i % 3 == 2:  # two updates: the batch in flight becomes 2 versions old
                    remote.update_policy_weights_()
                if i == 8:
                    break
        assert max(lags) <= 1 and workers <= {0, 1}  # which worker is first is up to timing
        assert remote.dropped_batches >= 1  # the too-old batches were not yielded, but counted
        assert any("dropped a batch" in str(w.message) for w in caught)
        assert remote.frames == 9 * 20  # only the yielded batches count
        # but every episode that ended is reported, those of the dropped batches too: of each
        # worker's ids (w, w + 2, ...) only its envs' running episodes (2) may be missing
        assert len(ended) == len(set(ended))
        for w in (0, 1):  # (a worker may have ended no episode: which is first is timing)
            mine = {(i - w) // 2 for i in ended if i % 2 == w}
            assert len(set(range(max(mine, default=-1) + 1)) - mine) <= 2, (w, sorted(mine))


@pytest.mark.workers
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_worker_is_restarted_and_its_ids_stay_unique(backend):
    with collector(
        backend, "CartPole-v1", policy(), 80, num_workers=2, num_envs=2, seed=1
    ) as remote:
        before = remote.rollout()
        kill(remote, 0)
        with pytest.warns(RuntimeWarning, match="0 died"):
            after = remote.rollout()
        assert remote.restarts == 1 and after.shape == before.shape
        old_ids = set(before[keys.COLLECTOR_TRAJ_IDS][:2].flatten().tolist())
        new_ids = set(after[keys.COLLECTOR_TRAJ_IDS][:2].flatten().tolist())
        assert min(new_ids) > max(old_ids) and all(i % 2 == 0 for i in new_ids)
        assert remote.frames == 160  # the lost rollout is not counted
        # the restarted worker's envs are seeded afresh: not the first worker's episodes again
        first_obs = before["observation"][:2, 0]
        assert not torch.equal(after["observation"][:2, 0], first_obs)


@pytest.mark.workers
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_worker_raises_when_asked_to(backend):
    with collector(
        backend, "CartPole-v1", policy(), 40, num_workers=2, num_envs=1,
        on_worker_failure="raise",
    ) as remote:  # fmt: skip
        remote.rollout()
        kill(remote, 1)
        with pytest.raises(RuntimeError, match="worker.* 1 of 2 died"):
            remote.rollout()


@pytest.mark.workers
@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_input_is_named_quickly(backend):
    with pytest.raises(ValueError, match="num_workers must be >= 1, got 0"):
        collector(backend, "CartPole-v1", policy(), 40, num_workers=0)
    with pytest.raises(ValueError, match=r"frames_per_batch=30 .* multiple of 4"):
        collector(backend, "CartPole-v1", policy(), 30, num_workers=2, num_envs=2)
    locked = policy()
    locked.lock = threading.Lock()  # cannot be pickled
    with pytest.raises(TypeError, match="cannot be sent to"):
        collector(backend, "CartPole-v1", locked, 40)
    with collector(backend, "NoSuchEnv-v0", policy(), 40, num_workers=1) as remote:
        with pytest.raises(RuntimeError, match="rollout failed in .* 0: .*NoSuchEnv"):
            remote.rollout()


@pytest.mark.ray
@pytest.mark.skipif(not HAS_RAY, reason="no ray")
def test_an_unreachable_ray_address_is_an_error_within_seconds():
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="nothing answers at 127.0.0.1:9"):
        RayCollector("CartPole-v1", policy(), 40, address="127.0.0.1:9")
    assert time.monotonic() - start < 10


@pytest.mark.workers
def test_batches_come_back_where_the_learner_s_policy_lives(device):
    # The workers act with a CPU copy; a learner on CUDA gets its batches on CUDA (as from
    # tdrl's Collector), unless storing_device says otherwise.
    actor = policy().to(device)
    with collector(
        "process", "CartPole-v1", actor, 20, num_workers=1, num_envs=2, seed=0
    ) as remote:
        batch = remote.rollout()
        assert remote.storing_device == next(actor.parameters()).device  # cuda:0, not "cuda"
        assert batch[keys.OBSERVATION].device.type == torch.device(device).type
        assert actor(batch[:, 0].clone())[keys.ACTION].shape == (2,)  # usable by the learner
    with collector(
        "process", "CartPole-v1", actor, 20, num_workers=1, num_envs=2, storing_device="cpu"
    ) as remote:
        assert remote.rollout()[keys.OBSERVATION].device.type == "cpu"


@pytest.mark.workers
def test_random_frames_are_counted_by_the_learner_across_restarts_and_resumes():
    # init_random_frames is the learner's count: a restarted worker does not act randomly
    # again (its random batch had no policy outputs), nor does a resumed collector's.
    def acted(batch) -> bool:
        return keys.ACTION_LOG_PROB in batch.keys()

    actor = policy()
    with collector(
        "process", "CartPole-v1", actor, 40, num_workers=2, num_envs=1, seed=0,
        init_random_frames=40,
    ) as remote:  # fmt: skip
        assert not acted(remote.rollout())  # 40 random frames, then the policy
        assert acted(remote.rollout())
        state = remote.state_dict()
        kill(remote, 0)
        with pytest.warns(RuntimeWarning, match="0 died"):
            assert acted(remote.rollout())
    with collector(
        "process", "CartPole-v1", actor, 40, num_workers=2, num_envs=1, seed=0,
        init_random_frames=40,
    ) as resumed:  # fmt: skip
        assert not resumed.load_state_dict(state)
        assert acted(resumed.rollout())


def test_weight_updates_leave_the_workers_exploration_noise_alone():
    # An OU process's per-env state is the acting copy's: the learner's copy never acts (its
    # state is empty), so sending it reset every worker's noise at every weight update.
    import copy

    from tensordict.nn import TensorDictSequential

    from tdrl.collectors.workers import _Worker
    from tdrl.modules import DeterministicActor, OrnsteinUhlenbeckNoise

    torch.manual_seed(0)
    actor = DeterministicActor(nn.Linear(3, 1), 1, action_low=-2.0, action_high=2.0)
    noise = OrnsteinUhlenbeckNoise(1, sigma=2.0, action_low=-2.0, action_high=2.0)
    learner = TensorDictSequential(actor, noise)
    with collector("process", "Pendulum-v1", learner, 10, num_workers=1, seed=0) as remote:
        remote.update_policy_weights_()
        sent = remote._weights_ref
    assert "module.1.state" not in sent and "module.0.net.weight" in sent
    # what a worker does with them: its OU state after acting survives the load
    worker = _Worker(0, "Pendulum-v1", 1, 0, {}, copy.deepcopy(learner), 10, False)
    worker.rollout(None, 0, False)
    acted = worker.policy[1].state.clone()
    assert acted.numel() == 1 and float(acted.abs()) > 0
    worker.collector.rollout = lambda: None  # the weight loading alone is under test
    worker.rollout(sent, 1, False)
    assert torch.equal(worker.policy[1].state, acted)
    with pytest.raises(RuntimeError, match="do not fit the worker's policy"):
        worker.rollout({k: v for k, v in sent.items() if k != "module.0.net.bias"}, 2, False)


def test_process_workers_refuse_async_envs_up_front():
    with pytest.raises(ValueError, match="mode='async' is not possible"):
        ProcessCollector("CartPole-v1", None, 20, num_workers=1, env_kwargs={"mode": "async"})


@pytest.mark.workers
def test_an_off_policy_run_cuts_the_replay_streams_at_a_worker_restart(tmp_path):
    """The restarted worker's envs start new episodes, so the newest stored step of its streams
    must end (truncated): otherwise n-step sums and slices read across the restart."""
    from tdrl.data import ReplayBuffer, transitions
    from tdrl.trainers import Run

    buffer = ReplayBuffer(1000)
    with (
        ProcessCollector("CartPole-v1", policy(), 8, num_workers=2, num_envs=1, seed=1) as remote,
        make_vec_env("CartPole-v1", 1, seed=5) as eval_env,
    ):
        run = Run(tmp_path, {"buffer": buffer}, eval_env=eval_env, policy=policy(), title="t",
                  total_frames=10**6, eval_every=0, tensorboard=False, progress=False,
                  curve=False)  # fmt: skip
        batches = run.resume(remote)  # the loop's iterator cuts the streams at a restart
        for _ in range(2):  # [2 workers, 4 steps] each: stored rows 0-7 of 2 streams
            buffer.extend(transitions(next(batches)))
        truncated = buffer.storage["next", "truncated"][..., 0]  # [length, streams]
        assert not truncated[:8].any()  # CartPole truncates at 500 steps only
        kill(remote, 0)
        with pytest.warns(RuntimeWarning, match="0 died"):
            batch = next(batches)
        buffer.extend(transitions(batch))
        assert truncated[7].all() and buffer.storage["next", "done"][7].all()
        assert not truncated[:7].any() and not truncated[8:12].any()
        buffer.extend(transitions(next(batches)))  # no restart since: nothing more is cut
        assert not truncated[8:16].any()
        run.close()


@pytest.mark.workers
def test_after_a_worker_error_the_next_sync_rollout_is_fresh():
    """An error in one worker must not leave the others' replies in their pipes: the next
    rollout would read them (stale batches, one rollout behind from then on)."""
    from tensordict.nn import TensorDictModule

    from tests.tiny_envs import tiny_worker_env

    torch.manual_seed(0)
    actor = TensorDictModule(nn.Sequential(nn.Linear(3, 1), nn.Tanh()), ["observation"], ["action"])
    with ProcessCollector(tiny_worker_env, actor, 8, num_workers=2, num_envs=1) as remote:
        with pytest.raises(RuntimeError, match="rollout failed in worker process 0: ValueError"):
            remote.rollout()
        for _ in range(2):
            remote.update_policy_weights_()
            batch = remote.rollout()
            assert (batch[keys.COLLECTOR_POLICY_VERSION] == remote.version).all()


@pytest.mark.workers
@pytest.mark.parametrize("sync", [True, False])
def test_after_an_interrupted_rollout_every_batch_is_fresh(sync):
    """A Ctrl-C (KeyboardInterrupt, not an Exception) while the learner waits for a reply
    leaves that reply, and the other workers', in their pipes: each is read and dropped before
    the worker's next request, so no later batch is a reply to an older request."""
    actor = policy()
    workers = 2 if sync else 1  # async, one worker: each batch was asked for one update ago
    with collector(
        "process", "CartPole-v1", actor, 40, num_workers=workers, num_envs=1, seed=0,
        sync=sync, max_policy_lag=5,
    ) as remote:  # fmt: skip
        remote.rollout()
        real_get = remote.pool.get

        def interrupted_get(*args):
            remote.pool.get = real_get  # once: as if Ctrl-C came while waiting
            raise KeyboardInterrupt

        remote.pool.get = interrupted_get
        with pytest.raises(KeyboardInterrupt):
            remote.rollout()
        for _ in range(3):
            remote.update_policy_weights_()
            version = remote.rollout()[keys.COLLECTOR_POLICY_VERSION]
            # sync: acted with the newest weights; async: asked for before this update
            assert (version == (remote.version if sync else remote.version - 1)).all()


@pytest.mark.workers
@pytest.mark.parametrize("saved_workers, resumed_workers", [(3, 2), (2, 3)])
def test_a_resume_with_another_worker_count_gives_new_ids(saved_workers, resumed_workers):
    def ids_of(remote, batches):
        return {
            int(i)
            for _ in range(batches)
            for i in remote.rollout()[keys.COLLECTOR_TRAJ_IDS].unique()
        }

    actor = policy()
    with collector(
        "process", "CartPole-v1", actor, 60 * saved_workers, num_workers=saved_workers,
        num_envs=1, seed=0,
    ) as remote:  # fmt: skip
        old = ids_of(remote, 3)
        state = remote.state_dict()
    with collector(
        "process", "CartPole-v1", actor, 60 * resumed_workers, num_workers=resumed_workers,
        num_envs=1, seed=1,
    ) as resumed:  # fmt: skip
        resumed.load_state_dict(state)
        new = ids_of(resumed, 3)
    assert len(new) > resumed_workers  # episodes ended, so ids were handed out
    assert min(new) > max(old), sorted(old & new)


@pytest.mark.ray
@pytest.mark.skipif(not HAS_RAY, reason="no ray")
def test_a_ray_instance_with_too_few_cpus_is_named_not_waited_on():
    import ray

    cpus = float(ray.cluster_resources().get("CPU", 0.0))
    with pytest.raises(
        ValueError, match=rf"need {int(cpus) + 1} CPUs, and the Ray cluster has {cpus:g}"
    ):
        RayCollector("CartPole-v1", policy(), 8, num_workers=int(cpus) + 1, num_envs=1)
