"""Collection on worker processes: the ``Collector`` interface over Ray actors, on one machine or a
cluster (:class:`RayCollector`, the ``ray`` extra), or over local subprocesses
(:class:`ProcessCollector`).

Each worker is a Ray actor that owns a tdrl ``VecEnv`` and a copy of the policy, and runs a
local :class:`~tdrl.collectors.Collector` over them; the learner's weights go out versioned, one
``ray.put`` per update shared by every worker (not one copy per worker), and each worker loads
them before its next rollout. Batches come back in tdrl's layout with two more entries:
``("collector", "policy_version")`` (the version of the weights that acted) and
``("collector", "worker")``; ``("collector", "traj_ids")`` are made unique across workers (worker
``w`` of ``W`` keeps the ids ``≡ w (mod W)``, and a restarted worker continues above its old ones).

- ``sync=True``: every batch is one rollout of every worker with the same weights, concatenated
  along the env dim: with ``env`` an id and ``seed`` given, worker ``w`` steps the envs
  ``w * num_envs ... (w + 1) * num_envs - 1`` of ``make_vec_env(env, W * num_envs, seed=seed)``,
  so a deterministic policy gives the batches of a local collector over that env (traj ids aside).
- ``sync=False``: whichever worker finishes first is yielded (stragglers do not hold the learner
  back) and at once sent its next rollout with the newest weights. A batch whose weights are more
  than ``max_policy_lag`` updates old when it arrives is not yielded: it is counted in
  ``dropped_batches`` (its frames are not counted) and a warning says so the first time. The
  episodes that ended in it did happen: they are in the next yielded batch's ``episodes``.

A worker that dies (its process killed, its node lost) is restarted with a fresh env (new
episodes, from seeds no worker used before) and its rollout asked again, up to
``max_restarts`` times in all; with ``on_worker_failure="raise"`` the collector raises an
error naming the worker instead. A rollout that raises inside a live worker (a bad action, a
broken env) is raised here with the worker's index: that is a bug to see, not a failure to
retry. No batch is counted twice: frames count
only batches that reached the caller.

Ray starts a local instance on first use (``ray.init()``, nothing to set up) unless one is
running; ``address="host:port"`` (or ``"auto"``) joins a running cluster (``ray start --head``).
:class:`ProcessCollector` is the same collector on local subprocesses without Ray (the same
sync and straggler-tolerant async modes, restarts and tags; weights go to each worker through
its pipe).
"""

from __future__ import annotations

import copy
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Literal

import torch
from tensordict import TensorDict

from tdrl import keys
from tdrl.collectors.collector import Collector
from tdrl.envs import VecEnv, make_vec_env
from tdrl.keyed import check_counts
from tdrl.modules.noise import noise_buffers

__all__ = ["ProcessCollector", "RayCollector", "WorkerCollector"]

EnvSource = str | Callable[[int], VecEnv]


class _Worker:
    """One Ray actor: a VecEnv, a policy copy and a local Collector over them."""

    def __init__(
        self,
        index: int,
        env: EnvSource,
        num_envs: int,
        seed: int | None,
        env_kwargs: dict[str, Any],
        policy: Any,
        frames_per_batch: int,
        deterministic: bool,
    ) -> None:
        torch.set_num_threads(1)  # one core per worker: the worker count sets the parallelism
        first = None if seed is None else seed + index * num_envs
        self.policy = policy
        # An error here (an unknown env id, a bad factory) is kept and raised by the first
        # rollout: a bug to report, where a failed actor start would look like a dead worker.
        self.error: Exception | None = None
        try:
            vec = (
                make_vec_env(env, num_envs, seed=first, **env_kwargs)
                if isinstance(env, str)
                else env(index)
            )
            self.collector = Collector(
                vec, policy, frames_per_batch, deterministic=deterministic, seed=first
            )
        except Exception as err:
            self.error = err

    def rollout(
        self, weights: dict[str, torch.Tensor] | None, version: int, random: bool
    ) -> tuple[Any, ...]:
        """One batch, of random actions when ``random`` (the learner decides: it counts the
        frames of every worker, across restarts and resumes)."""
        if self.error is not None:
            raise self.error
        if weights is not None and self.policy is not None:
            # the weights come without noise states (an OU process, gSDE's matrix): those
            # stay the worker's; anything else missing or unexpected is an error
            missing, unexpected = self.policy.load_state_dict(weights, strict=False)
            wrong = sorted(set(missing) - _noise_state_names(self.policy)) + list(unexpected)
            if wrong:
                raise RuntimeError(f"weights do not fit the worker's policy: {wrong}")
        collector = self.collector
        collector.init_random_frames = collector.frames + 1 if random else 0
        batch = collector.rollout()
        return batch, self.collector.episodes, version


def _noise_state_names(module: torch.nn.Module) -> set[str]:
    """``state_dict`` names of the buffers submodules list in ``noise_buffers``: exploration
    state of the env-stepping copy (an OU process's per-env state, gSDE's noise matrix), not
    weights to send."""
    return {
        f"{prefix}.{name}" if prefix else name
        for prefix, sub in module.named_modules()
        for name in noise_buffers(sub)
    }


DEFAULT_TIMEOUT = 120.0  # seconds for one rollout: as the async envs' step_timeout
# seconds a new worker has for its first rollout: it imports torch and makes its envs first, and
# a Ray actor waits for its process; on a loaded 2-core machine that alone took over 120 s, so
# this bounds a hung start, not a slow one
START_TIMEOUT = 600.0


class _WorkerDied(Exception):
    """A worker process is gone (killed, crashed, its node lost) or silent past the timeout."""


class _WorkerSilent(_WorkerDied):
    """A worker did not answer within the collector's timeout (stopped, hung, unreachable)."""


class _RayPool:
    """Workers as Ray actors; a rollout is an ObjectRef."""

    name = "Ray worker"

    def __init__(self, address: str | None, num_workers: int, num_cpus: float) -> None:
        need = num_workers * num_cpus
        self.ray = _start_ray(address, need)
        total = float(self.ray.cluster_resources().get("CPU", 0.0))
        if total < need:  # the actors would wait for CPUs forever, and rollout() with them
            raise ValueError(
                f"RayCollector: {num_workers} workers x num_cpus_per_worker={num_cpus} need "
                f"{need:g} CPUs, and the Ray cluster has {total:g}; use fewer workers, a "
                "smaller num_cpus_per_worker, or a Ray instance with more CPUs"
            )
        self.actor = self.ray.remote(num_cpus=num_cpus)(_Worker)

    def share(self, value: Any, what: str) -> Any:
        try:
            return self.ray.put(value)
        except Exception as err:  # pickling errors come as TypeError, PicklingError, ...
            raise TypeError(
                f"the {what} cannot be sent to Ray workers ({type(err).__name__}: {err}); it "
                "must pickle (a module defined at import level of an installed package)"
            ) from err

    def start(self, index: int, args: tuple[Any, ...]) -> Any:
        return self.actor.remote(index, *args)

    def submit(self, worker: Any, weights: Any, version: int, random: bool) -> Any:
        return worker.rollout.remote(weights, version, random)

    def first_done(self, handles: list[Any], timeout: float | None) -> Any:
        ready, _ = self.ray.wait(handles, num_returns=1, timeout=timeout)
        return ready[0] if ready else None

    def get(self, worker: Any, handle: Any, timeout: float | None) -> tuple[Any, ...]:
        from ray.exceptions import (
            ActorDiedError,
            ActorUnavailableError,
            GetTimeoutError,
            RayActorError,
        )

        try:
            return tuple(self.ray.get(handle, timeout=timeout))
        except (RayActorError, ActorDiedError, ActorUnavailableError) as err:
            raise _WorkerDied(type(err).__name__) from err
        except GetTimeoutError as err:
            raise _WorkerSilent() from err
        except Exception as err:
            cause = getattr(err, "cause", None) or err  # RayTaskError: the worker's error
            raise RuntimeError(f"{type(cause).__name__}: {cause}") from err

    def kill(self, worker: Any) -> None:
        try:
            self.ray.kill(worker)
        except Exception:  # already gone
            pass


class _Process:
    """A local worker process and the parent's end of its pipe."""

    def __init__(self, process: Any, conn: Any) -> None:
        self.process, self.conn = process, conn


def _on_cpu(policy: Any) -> Any:
    """The policy as the workers get it: a CPU copy when it lives on another device (workers
    act on the CPU; weight updates are sent as CPU tensors too)."""
    if not isinstance(policy, torch.nn.Module):
        return policy
    tensors = [*policy.parameters(), *policy.buffers()]
    if all(t.device.type == "cpu" for t in tensors):
        return policy
    return copy.deepcopy(policy).to("cpu")


def _process_main(conn: Any, index: int, args: tuple[Any, ...]) -> None:
    """A worker process: rollouts on request until told to stop (None) or the pipe closes."""
    worker = _Worker(index, *args)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        try:
            conn.send(("ok", worker.rollout(*request)))
        except Exception as err:
            conn.send(("error", f"{type(err).__name__}: {err}"))


class _ProcessPool:
    """Workers as local subprocesses; a rollout's handle is its worker's pipe."""

    name = "worker process"

    def __init__(self, context: str) -> None:
        import multiprocessing

        self.context: Any = multiprocessing.get_context(context)

    def share(self, value: Any, what: str) -> Any:
        import pickle

        try:
            pickle.dumps(value)
        except Exception as err:
            raise TypeError(
                f"the {what} cannot be sent to worker processes ({type(err).__name__}: {err}); "
                "it must pickle"
            ) from err
        return value

    def start(self, index: int, args: tuple[Any, ...]) -> _Process:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=_process_main, args=(child, index, args), daemon=True)
        process.start()
        child.close()
        return _Process(process, parent)

    def submit(self, worker: _Process, weights: Any, version: int, random: bool) -> Any:
        try:
            worker.conn.send((weights, version, random))
        except (BrokenPipeError, OSError):
            pass  # a dead worker: get() reports it
        return worker.conn

    def first_done(self, handles: list[Any], timeout: float | None) -> Any:
        from multiprocessing.connection import wait

        ready = wait(handles, timeout=timeout)
        return ready[0] if ready else None

    def get(self, worker: _Process, handle: Any, timeout: float | None) -> tuple[Any, ...]:
        try:
            if not worker.conn.poll(timeout):
                raise _WorkerSilent()
            status, payload = self._receive(worker, timeout)
        except (EOFError, OSError) as err:
            raise _WorkerDied(f"exit code {worker.process.exitcode}") from err
        if status == "error":
            raise RuntimeError(payload)
        return tuple(payload)

    @staticmethod
    def _receive(worker: _Process, timeout: float | None) -> Any:
        """``conn.recv()``, within ``timeout`` also when the reply has begun to arrive: a worker
        stopped half-way through sending would block ``recv`` for good. The read runs in a
        thread; past the timeout the worker counts as silent, and the kill that follows
        closes the pipe, which ends the read."""
        if timeout is None:
            return worker.conn.recv()
        box: list[Any] = []

        def read() -> None:
            try:
                box.append(("reply", worker.conn.recv()))
            except BaseException as err:  # EOFError, OSError: handed to the caller
                box.append(("raised", err))

        reader = threading.Thread(target=read, daemon=True, name="tdrl-worker-reply")
        reader.start()
        reader.join(timeout)
        if not box:
            raise _WorkerSilent()
        kind, value = box[0]
        if kind == "raised":
            raise value
        return value

    def kill(self, worker: _Process) -> None:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(timeout=5)
        worker.conn.close()


class WorkerCollector:
    """Iterates over rollouts collected by ``num_workers`` workers (see the module docstring):
    use :class:`RayCollector` (Ray actors) or :class:`ProcessCollector` (local processes).

    Args:
        env: an env id (worker ``w`` makes ``make_vec_env(env, num_envs, seed=seed + w *
            num_envs, **env_kwargs)``) or a function ``worker_index -> VecEnv`` run in the worker.
        policy: a TensorDictModule (sent to each worker once), or None for random actions. The
            collector keeps a reference: :meth:`update_policy_weights_` sends its current weights.
        frames_per_batch: frames per yielded batch. Sync: split evenly over the workers (a
            multiple of ``num_workers * num_envs``); async: one worker's rollout (a multiple of
            ``num_envs``).
        total_frames: stop after this many frames (whole batches); -1: never.
        num_workers: Ray actors, each with ``num_envs`` envs.
        sync: see the module docstring. ``max_policy_lag``: async only, in policy updates.
        init_random_frames: random actions until this many frames have come back (counted by
            the learner, so a restarted worker or a resumed run does not start them again; in
            async mode the batches in flight when it is reached are random too).
        on_worker_failure: ``"restart"`` (at most ``max_restarts`` restarts in all) or ``"raise"``.
        timeout: seconds to wait for a worker's rollout before the worker counts as dead
            (stopped, hung, its node unreachable): it is then killed and restarted or the error
            raised, as ``on_worker_failure`` says; None waits forever.
        start_timeout: a new worker's first rollout, which includes its start, may take the
            larger of this and ``timeout`` (default ``START_TIMEOUT``, 600 s: a loaded machine
            starts a Ray actor slowly).
        storing_device: where batches are returned (the workers act on the CPU); default: the
            device of the policy's parameters (a learner on CUDA gets CUDA batches), else the CPU.
        pool: the transport (given by the subclasses).

    Shapes:
        batch ``[num_workers * num_envs, T]`` (sync) or ``[num_envs, T]`` (async).
    """

    DEFAULT_WORKERS = 2

    def __init__(
        self,
        env: EnvSource,
        policy: Any,
        frames_per_batch: int,
        total_frames: int = -1,
        *,
        num_workers: int = DEFAULT_WORKERS,
        num_envs: int = 1,
        seed: int | None = None,
        sync: bool = True,
        max_policy_lag: int = 1,
        init_random_frames: int = 0,
        deterministic: bool = False,
        env_kwargs: dict[str, Any] | None = None,
        on_worker_failure: Literal["restart", "raise"] = "restart",
        max_restarts: int = 3,
        timeout: float | None = DEFAULT_TIMEOUT,
        start_timeout: float = START_TIMEOUT,
        storing_device: torch.device | str | None = None,
        pool: Any,
    ) -> None:
        def seconds(value: object) -> bool:  # NaN fails too
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            return number and value > 0  # type: ignore[operator]

        if timeout is not None and not seconds(timeout):
            raise ValueError(f"timeout must be a number of seconds > 0 or None, got {timeout!r}")
        if not seconds(start_timeout):
            raise ValueError(
                f"start_timeout must be a number of seconds > 0, got {start_timeout!r}"
            )
        self.timeout, self.start_timeout = timeout, start_timeout
        check_counts(type(self).__name__, num_workers=num_workers, num_envs=num_envs)
        per = num_workers * num_envs if sync else num_envs
        if frames_per_batch <= 0 or frames_per_batch % per:
            raise ValueError(
                f"frames_per_batch={frames_per_batch} must be a positive multiple of {per} "
                + ("(num_workers * num_envs)" if sync else "(num_envs)")
            )
        if max_policy_lag < 0:
            raise ValueError(f"max_policy_lag must be >= 0, got {max_policy_lag}")
        if on_worker_failure not in ("restart", "raise"):
            raise ValueError(
                f"on_worker_failure must be 'restart' or 'raise', got {on_worker_failure!r}"
            )
        self.pool = pool
        self.policy = policy
        if storing_device is None:
            module = isinstance(policy, torch.nn.Module)
            first = next(iter(policy.parameters()), None) if module else None
            storing_device = "cpu" if first is None else first.device
        self.storing_device = torch.device(storing_device)
        self.num_workers, self.num_envs, self.sync = num_workers, num_envs, sync
        self.frames_per_batch, self.total_frames = frames_per_batch, total_frames
        self.max_policy_lag, self.max_restarts = max_policy_lag, max_restarts
        self.on_worker_failure = on_worker_failure
        self.frames = 0
        self.version = 0
        self.restarts = 0
        self.dropped_batches = 0
        # the episodes that ended in dropped batches: they are reported with the next batch
        self._late_episodes: list[TensorDict] = []
        self.episodes = TensorDict({}, batch_size=[0])
        policy_ref = pool.share(_on_cpu(policy), "policy")
        worker_frames = frames_per_batch // num_workers if sync else frames_per_batch
        self.init_random_frames = init_random_frames
        self._worker_args = (
            env, num_envs, seed, dict(env_kwargs or {}), policy_ref, worker_frames, deterministic,
        )  # fmt: skip
        self.workers = [pool.start(w, self._worker_args) for w in range(num_workers)]
        self._starting = [True] * num_workers  # no reply yet: the start counts in the wait
        self._asked = [0.0] * num_workers  # when each worker's request was sent
        self._generation = [0] * num_workers  # restarts of each worker (its seeds move on)
        # traj id offset per worker (a multiple of W, raised past the old ids on a restart)
        self._offsets = [0] * num_workers
        self._max_id = [-1] * num_workers
        self._weights_ref: Any = None  # the newest weights (None: the workers' initial copy)
        self._sent = [0] * num_workers  # version each worker holds
        self._pending: dict[Any, int] = {}  # async: in-flight rollout -> worker
        # each worker's request whose reply is not read yet (a reader interrupted, e.g. by
        # Ctrl-C, leaves it): read and dropped before the worker's next request, so no reply
        # is ever taken for a later request's
        self._unread: list[Any] = [None] * num_workers
        self._warned_drop = False

    # --- weights ---------------------------------------------------------------------------
    def update_policy_weights_(self, weights: dict[str, torch.Tensor] | None = None) -> None:
        """Send new weights (default: the policy's current ``state_dict`` without the noise
        states its modules list in ``noise_buffers``, which stay each worker's), loaded by each
        worker before its next rollout (Ray: one ``ray.put`` shared by all). Increments
        ``version``."""
        if weights is None:
            if self.policy is None:
                raise ValueError("update_policy_weights_() without weights needs a policy")
            noise = _noise_state_names(self.policy)  # the workers' own (see _Worker.rollout)
            weights = {k: v for k, v in self.policy.state_dict().items() if k not in noise}
        weights = {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}
        self.version += 1
        self._weights_ref = self.pool.share(weights, "weights")

    # --- iteration -------------------------------------------------------------------------
    def __iter__(self) -> Iterator[TensorDict]:
        while self.total_frames < 0 or self.frames < self.total_frames:
            yield self.rollout()

    def rollout(self) -> TensorDict:
        """One batch: every worker's rollout (sync) or the first one done (async)."""
        if self.sync:
            refs = [self._submit(w) for w in range(self.num_workers)]
            parts = []
            try:
                for w, ref in enumerate(refs):
                    parts.append(self._result(w, ref))
            except Exception:
                for w in range(len(parts) + 1, len(refs)):  # the failed one's reply was read
                    self._drain(w)
                raise
            batch = torch.cat([p[0] for p in parts], dim=0)
            self.episodes = torch.cat([p[1] for p in parts], dim=0)
        else:
            batch, self.episodes = self._next_async()
        self.frames += batch.numel()
        if self.storing_device.type != "cpu":
            batch = batch.to(self.storing_device, non_blocking=True)
        return batch

    def _next_async(self) -> tuple[TensorDict, TensorDict]:
        for w in range(self.num_workers):
            if w not in self._pending.values():
                self._pending[self._submit(w)] = w
        while True:
            # a worker silent past its allowance counts as dead even while others answer
            overdue = [ref for ref, w in self._pending.items() if self._overdue(w)]
            ready = (
                overdue[0] if overdue else self.pool.first_done(list(self._pending), self.timeout)
            )
            silent = ready is None or bool(overdue)
            ready = next(iter(self._pending)) if ready is None else ready  # the longest waiting
            w = self._pending.pop(ready)
            try:
                batch, episodes, version = self._result(w, ready, timeout=0 if silent else None)
            finally:
                self._pending[self._submit(w)] = w  # keep every worker busy
            if self.version - version <= self.max_policy_lag:
                if self._late_episodes:  # those of the dropped batches come first
                    episodes = torch.cat([*self._late_episodes, episodes])
                    self._late_episodes.clear()
                return batch, episodes
            self.dropped_batches += 1
            self._late_episodes.append(episodes)
            if not self._warned_drop:
                self._warned_drop = True
                warnings.warn(
                    f"{type(self).__name__} dropped a batch of worker {w} acted by policy version "
                    f"{version}, {self.version - version} updates old (max_policy_lag="
                    f"{self.max_policy_lag}); dropped batches are counted in dropped_batches",
                    RuntimeWarning,
                    stacklevel=3,
                )

    def _drain(self, w: int) -> None:
        """Read and drop worker ``w``'s unread reply, if any (waiting for it)."""
        ref = self._unread[w]
        if ref is None:
            return
        try:
            self.pool.get(self.workers[w], ref, self.timeout)
        except Exception:  # a dead, silent or failed worker shows on the next rollout
            pass
        self._unread[w] = None

    def _overdue(self, w: int) -> bool:
        """Worker ``w`` has not answered its request within its allowance (the timeout, or
        ``start_timeout`` while it starts)."""
        if self.timeout is None:
            return False
        allowance = max(self.timeout, self.start_timeout) if self._starting[w] else self.timeout
        return time.monotonic() - self._asked[w] > allowance

    def _submit(self, w: int) -> Any:
        self._drain(w)
        self._asked[w] = time.monotonic()
        fresh = self._weights_ref is not None and self._sent[w] != self.version
        self._sent[w] = self.version
        weights = self._weights_ref if fresh else None
        random = self.policy is None or self.frames < self.init_random_frames
        ref = self.pool.submit(self.workers[w], weights, self.version, random)
        self._unread[w] = ref
        return ref

    def _result(
        self, w: int, ref: Any, timeout: float | None = None
    ) -> tuple[TensorDict, TensorDict, int]:
        """The rollout ``ref`` of worker ``w``, asked again of a restarted worker if it died or
        stayed silent for the timeout (``timeout``: this wait's, default the collector's)."""
        name = self.pool.name
        while True:
            try:
                wait = self.timeout if timeout is None else timeout
                if wait is not None and self._starting[w]:
                    wait = max(wait, self.start_timeout)
                timeout = None  # a restarted worker gets the whole timeout
                batch, episodes, version = self.pool.get(self.workers[w], ref, wait)
                self._starting[w] = False
                self._unread[w] = None
                break
            except _WorkerDied as err:
                if isinstance(err, _WorkerSilent):  # it is killed before a restart
                    err = _WorkerDied(
                        f"no reply within timeout={self.timeout} s: stopped, hung or unreachable"
                    )
                if self.on_worker_failure == "raise" or self.restarts >= self.max_restarts:
                    raise RuntimeError(
                        f"{name} {w} of {self.num_workers} died ({err}); {self.restarts} "
                        f"restart(s) so far (on_worker_failure={self.on_worker_failure!r}, "
                        f"max_restarts={self.max_restarts})"
                    ) from err
                self._restart(w, err)
                ref = self._submit(w)
            except RuntimeError as err:
                self._unread[w] = None  # the reply was the worker's error
                raise RuntimeError(f"rollout failed in {name} {w}: {err}") from err
        return self._tag(w, batch, version), self._tag_episodes(w, episodes), version

    def _restart(self, w: int, err: Exception) -> None:
        warnings.warn(
            f"{self.pool.name} {w} died ({err}); restarting it with fresh envs",
            RuntimeWarning,
            stacklevel=4,
        )
        self.restarts += 1
        self.pool.kill(self.workers[w])
        self._unread[w] = None  # its reply died with it
        self._generation[w] += 1
        env, num_envs, seed, *rest = self._worker_args
        if seed is not None:  # new seeds, apart from every worker's earlier ones
            seed += self._generation[w] * self.num_workers * num_envs
        self.workers[w] = self.pool.start(w, (env, num_envs, seed, *rest))
        self._starting[w] = True
        self._sent[w] = -1  # the new worker holds the initial weights: send the newest again
        W = self.num_workers
        self._offsets[w] = (self._max_id[w] // W + 1) * W  # above every id it gave out

    def _global_ids(self, w: int, ids: torch.Tensor) -> torch.Tensor:
        out = ids * self.num_workers + w + self._offsets[w]
        if out.numel():
            self._max_id[w] = max(self._max_id[w], int(out.max()))
        return out

    def _tag(self, w: int, batch: TensorDict, version: int) -> TensorDict:
        batch.set(keys.COLLECTOR_TRAJ_IDS, self._global_ids(w, batch.get(keys.COLLECTOR_TRAJ_IDS)))
        batch.set(keys.COLLECTOR_POLICY_VERSION, torch.full(batch.shape, version))
        batch.set(keys.COLLECTOR_WORKER, torch.full(batch.shape, w))
        return batch

    def _tag_episodes(self, w: int, episodes: TensorDict) -> TensorDict:
        if keys.TRAJ_IDS in episodes.keys():
            episodes.set(keys.TRAJ_IDS, self._global_ids(w, episodes.get(keys.TRAJ_IDS)))
        return episodes

    # --- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Counters (frames, policy version, restarts, dropped batches) and the traj-id state,
        for a checkpoint. The workers' envs are not saved (they are elsewhere)."""
        return {
            "frames": self.frames,
            "version": self.version,
            "restarts": self.restarts,
            "dropped_batches": self.dropped_batches,
            "max_id": list(self._max_id),
        }

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Restore :meth:`state_dict`; returns False: the workers go on with fresh episodes
        (new traj ids above the saved ones), so a resumed run is not identical."""
        self.frames, self.version = int(state["frames"]), int(state["version"])
        self.restarts, self.dropped_batches = int(state["restarts"]), int(state["dropped_batches"])
        W = self.num_workers
        saved = [int(i) for i in state["max_id"]]
        if len(saved) == W:  # each worker above the ids it gave out
            self._max_id = saved
        else:  # saved with another num_workers: every worker above all the saved ids
            self._max_id = [max(saved, default=-1)] * W
        self._offsets = [(i // W + 1) * W for i in self._max_id]
        if self.policy is not None:
            self.update_policy_weights_()  # the loaded weights reach the workers
            self.version = int(state["version"])
            self._sent = [-1] * W  # every worker is sent them with its next rollout
        return False

    # --- lifetime --------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop the workers (their envs are closed)."""
        for worker in self.workers:
            self.pool.kill(worker)
        self.workers = []
        self._pending = {}

    def __enter__(self) -> WorkerCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class RayCollector(WorkerCollector):
    """:class:`WorkerCollector` on Ray actors (the ``ray`` extra).

    Args: :class:`WorkerCollector`'s, and
        address: a running Ray cluster to join; default: the running instance, or a local one.
        num_cpus_per_worker: Ray's CPU reservation per actor (a local instance gets enough CPUs
            for all workers).
    """

    def __init__(
        self,
        *args: Any,
        address: str | None = None,
        num_cpus_per_worker: float = 1.0,
        **kwargs: Any,
    ) -> None:
        workers = kwargs.get("num_workers", WorkerCollector.DEFAULT_WORKERS)
        check_counts("RayCollector", num_workers=workers)  # before Ray starts
        pool = _RayPool(address, workers, num_cpus_per_worker)
        super().__init__(*args, pool=pool, **kwargs)
        self.ray = pool.ray


class ProcessCollector(WorkerCollector):
    """:class:`WorkerCollector` on local subprocesses, without Ray.

    Args: :class:`WorkerCollector`'s, and
        context: multiprocessing start method; ``"spawn"`` (default) starts clean interpreters
            (safe with torch's threads), so ``env`` must be an id or a picklable function, and a
            script needs the ``if __name__ == "__main__":`` guard.
    """

    def __init__(self, *args: Any, context: str = "spawn", **kwargs: Any) -> None:
        if (kwargs.get("env_kwargs") or {}).get("mode") == "async":
            # a worker is a daemonic process, which may not start the async envs' processes
            raise ValueError(
                "ProcessCollector: env_kwargs mode='async' is not possible (each worker is "
                "already a process of its own; its envs step in it): use mode='sync', more "
                "workers, or RayCollector"
            )
        super().__init__(*args, pool=_ProcessPool(context), **kwargs)

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids."""
        return [int(w.process.pid) for w in self.workers]


def _start_ray(address: str | None, cpus: float) -> Any:
    """The ``ray`` module, initialised: joined to ``address``, or a local instance."""
    try:
        import ray
    except ImportError as err:
        raise ImportError(
            "RayCollector needs Ray: pip install -c constraints.txt -e '.[ray]'"
        ) from err
    if address is not None and address not in ("auto", "local"):
        _check_reachable(address)
    if ray.is_initialized():
        return ray
    if address is None or address == "local":
        import os

        ray.init(
            num_cpus=max(os.cpu_count() or 1, int(cpus + 0.999)),
            include_dashboard=False,
            log_to_driver=False,
        )
    else:
        ray.init(address=address, log_to_driver=False)
    return ray


def _check_reachable(address: str, timeout: float = 3.0) -> None:
    """A clear error within seconds when nothing listens at ``address`` (``ray.init`` itself
    would retry for a long time)."""
    host_port = address.removeprefix("ray://")
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(
            f"Ray address {address!r}: expected 'host:port', 'ray://host:port' or 'auto'"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise ConnectionError(
            f"Ray address {address!r}: nothing answers at {host}:{port} within {timeout:.0f} s "
            f"({err}); start a cluster there with `ray start --head` or leave address unset "
            "for a local Ray"
        ) from err
