"""Offline datasets in the Minari format (the ``offline`` extra), to and from replay buffers.

Minari (the Farama Foundation's successor of D4RL's format) stores episodes: ``T + 1``
observations (the last one the real final observation), ``T`` actions, rewards, terminations and
truncations. :func:`save_minari` cuts tdrl rollouts or a replay buffer into such episodes at every
``("next", "done")``; a stretch of steps that the data cuts before its episode ends becomes an
episode marked truncated (its bootstrap stays right). :func:`load_minari` puts a dataset into a
one-stream :class:`~tdrl.data.ReplayBuffer` in tdrl's layout (``("next", ...)`` from the
observation after each step, terminated and truncated kept apart, ``("collector", "traj_ids")``
the episode ids), so n-step and slice sampling never cross an episode end.

A dataset is written to a temporary folder and renamed into place: an interrupted write leaves
nothing under the dataset's id.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl import keys
from tdrl.data.replay_buffer import ReplayBuffer

__all__ = ["datasets_path", "load_minari", "save_minari", "split_episodes"]

NAMESPACE_METADATA = "namespace_metadata.json"  # Minari's file in a namespace folder


def _minari() -> Any:
    try:
        import minari
    except ImportError as err:
        raise ImportError(
            "Minari datasets need the offline extra: pip install -c constraints.txt -e '.[offline]'"
        ) from err
    return minari


def split_episodes(rollout: TensorDictBase) -> list[dict[str, np.ndarray]]:
    """Episodes of a ``[N, T]`` rollout (or a ``[T]`` single stream), in row order: each a dict
    of ``observations`` ``[t + 1, *obs]`` (the last the real final one), ``actions``,
    ``rewards``, ``terminations``, ``truncations`` ``[t]``. A row's last stretch that does not
    end with ``done`` is closed as truncated."""
    if rollout.batch_dims == 1:
        rollout = rollout.unsqueeze(0)
    if rollout.batch_dims != 2:
        raise ValueError(f"expected a [N, T] rollout, got batch size {tuple(rollout.batch_size)}")
    for key in (keys.OBSERVATION, keys.ACTION, keys.NEXT_OBSERVATION, keys.NEXT_REWARD,
                keys.NEXT_TERMINATED, keys.NEXT_TRUNCATED):  # fmt: skip
        if key not in rollout.keys(include_nested=True):
            raise KeyError(f"the rollout has no {key!r} entry, needed for a Minari episode")
    observation = rollout.get(keys.OBSERVATION).numpy()
    next_observation = rollout.get(keys.NEXT_OBSERVATION).numpy()
    action = rollout.get(keys.ACTION).numpy()
    reward = rollout.get(keys.NEXT_REWARD).reshape(*rollout.batch_size).numpy()
    terminated = rollout.get(keys.NEXT_TERMINATED).reshape(*rollout.batch_size).numpy()
    truncated = rollout.get(keys.NEXT_TRUNCATED).reshape(*rollout.batch_size).numpy()
    episodes = []
    for row in range(rollout.batch_size[0]):
        ends = np.flatnonzero(terminated[row] | truncated[row])
        T = rollout.batch_size[1]
        if not len(ends) or ends[-1] != T - 1:
            ends = np.append(ends, T - 1)  # the data stops mid-episode: a cut
        start = 0
        for end in ends:
            steps = slice(start, end + 1)
            cut = np.zeros(end + 1 - start, dtype=bool)
            cut[-1] = not terminated[row, end]
            episodes.append(
                {
                    "observations": np.concatenate(
                        [observation[row, steps], next_observation[row, end : end + 1]]
                    ),
                    "actions": action[row, steps],
                    "rewards": reward[row, steps].astype(np.float64),
                    "terminations": terminated[row, steps].copy(),
                    "truncations": truncated[row, steps] | cut,
                }
            )
            start = int(end) + 1
    return episodes


def _chronological(buffer: ReplayBuffer) -> TensorDict:
    """The buffer's stored steps as a ``[S, L]`` rollout, oldest first in every stream."""
    storage = buffer.stream_storage
    if storage is None or storage.size == 0:
        raise ValueError("the replay buffer is empty: nothing to save")
    data = buffer.storage  # [L, S] views
    order = (torch.arange(storage.size) + storage.oldest()) % storage.length
    return data[order].transpose(0, 1)


@contextmanager
def _datasets_root(path: Path) -> Any:
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(path)
    try:
        yield
    finally:
        if previous is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = previous


def _check_spaces(episodes: list[dict[str, np.ndarray]], env: gym.Env, dataset_id: str) -> None:
    """Observations and actions must fit the env's spaces: a dataset is replayed in that env."""
    for name, space in (("observations", env.observation_space), ("actions", env.action_space)):
        shape = getattr(space, "shape", None)
        for e in episodes:
            if shape is not None and e[name].shape[1:] != shape:
                raise ValueError(
                    f"dataset {dataset_id!r}: {name} of shape {e[name].shape[1:]} per step do not "
                    f"fit the env's {space}"
                )


def save_minari(
    source: ReplayBuffer | TensorDictBase,
    dataset_id: str,
    env: str | gym.Env,
    *,
    ref_min_score: float | None = None,
    ref_max_score: float | None = None,
    algorithm_name: str | None = None,
    description: str | None = None,
) -> Any:
    """Write ``source`` (a replay buffer, or a ``[N, T]`` rollout) as the Minari dataset
    ``dataset_id`` (``"namespace/name-v0"``) of ``env``, under ``MINARI_DATASETS_PATH`` (default
    ``~/.minari/datasets``). ``ref_min_score`` / ``ref_max_score``: the returns that normalize
    scores the D4RL way (0 = random, 100 = expert). Returns the loaded ``MinariDataset``."""
    minari = _minari()
    from minari.data_collector import EpisodeBuffer

    rollout = _chronological(source) if isinstance(source, ReplayBuffer) else source
    episodes = split_episodes(rollout)
    root = Path(minari.storage.get_dataset_path())
    final = root / dataset_id
    if final.exists():
        raise FileExistsError(f"Minari dataset {dataset_id!r} exists already at {final}")
    made = gym.make(env) if isinstance(env, str) else env
    try:
        _check_spaces(episodes, made, dataset_id)
    except BaseException:
        if isinstance(env, str):
            made.close()
        raise
    buffers = [
        EpisodeBuffer(id=i, observations=list(e["observations"]), actions=list(e["actions"]),
                      rewards=list(e["rewards"]), terminations=list(e["terminations"]),
                      truncations=list(e["truncations"]))
        for i, e in enumerate(episodes)
    ]  # fmt: skip
    scores = {}
    if ref_min_score is not None and ref_max_score is not None:
        scores = {"ref_min_score": ref_min_score, "ref_max_score": ref_max_score}
    staging = Path(tempfile.mkdtemp(prefix=".tdrl-", dir=root))
    try:
        with _datasets_root(staging):
            minari.create_dataset_from_buffers(
                dataset_id, buffers, env=made.spec if made.spec is not None else made,
                eval_env=made.spec if made.spec is not None else made,
                algorithm_name=algorithm_name, description=description,
                observation_space=made.observation_space, action_space=made.action_space,
                **scores,
            )  # fmt: skip
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / dataset_id, final)  # complete, or not there at all
        # a new namespace's metadata, which Minari wrote beside the dataset (its namespace
        # functions and uploads read it)
        namespace = Path(dataset_id).parent
        while namespace != Path("."):
            written = staging / namespace / NAMESPACE_METADATA
            if written.exists() and not (root / namespace / NAMESPACE_METADATA).exists():
                os.replace(written, root / namespace / NAMESPACE_METADATA)
            namespace = namespace.parent
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(env, str):
            made.close()
    return minari.load_dataset(dataset_id)


def datasets_path() -> str:
    """Where Minari reads and writes datasets: ``MINARI_DATASETS_PATH``, else
    ``~/.minari/datasets``."""
    import os

    root = os.environ.get("MINARI_DATASETS_PATH")
    return root if root else os.path.join(os.path.expanduser("~"), ".minari", "datasets")


def load_minari(
    dataset: str | Any,
    *,
    capacity: int | None = None,
    device: torch.device | str = "cpu",
    generator: np.random.Generator | int | None = None,
) -> ReplayBuffer:
    """A one-stream :class:`ReplayBuffer` of every step of ``dataset`` (an id or a
    ``MinariDataset``), episode after episode (``capacity`` default: the dataset's step count).
    An episode whose last step is neither terminated nor truncated is closed as truncated, as
    :func:`split_episodes` does."""
    minari = _minari()
    if isinstance(dataset, str):
        local = set(minari.list_local_datasets())
        if dataset not in local:
            raise FileNotFoundError(
                f"no Minari dataset {dataset!r} under {datasets_path()} (MINARI_DATASETS_PATH, "
                "default ~/.minari/datasets): tdrl makes its datasets here, with "
                "`python recipes/make_dataset.py` (--help lists how), nothing is downloaded"
            )
    data = minari.load_dataset(dataset) if isinstance(dataset, str) else dataset
    space = data.observation_space
    if not isinstance(space, gym.spaces.Box):
        raise TypeError(f"dataset {data.id!r}: only Box observations load yet, got {space}")
    parts = []
    for episode in data.iterate_episodes():
        T = len(episode.rewards)
        # floating observations as the envs give them (float32); integer ones (pixels) as stored
        obs = np.asarray(episode.observations)
        obs = obs.astype(np.float32) if np.issubdtype(obs.dtype, np.floating) else obs
        if obs.shape != (T + 1, *space.shape):
            raise ValueError(
                f"dataset {data.id!r}, episode {episode.id}: observations of shape {obs.shape}, "
                f"expected (steps + 1, *{space.shape}) = {(T + 1, *space.shape)}"
            )
        action = torch.as_tensor(np.asarray(episode.actions))
        action = action.long() if not action.is_floating_point() else action.float()
        terminated = torch.as_tensor(np.asarray(episode.terminations, dtype=bool)).view(T, 1)
        truncated = torch.as_tensor(np.asarray(episode.truncations, dtype=bool)).view(T, 1)
        if T and not (terminated[-1] | truncated[-1]).item():
            # an episode whose last step carries neither flag (Minari's buffers allow it) was
            # cut there: truncated, so it bootstraps from its real final observation and no
            # n-step return or slice runs on into the next episode
            truncated[-1] = True
        false = torch.zeros(T, 1, dtype=torch.bool)
        parts.append(
            TensorDict(
                {
                    keys.OBSERVATION: torch.from_numpy(obs[:-1]),
                    keys.ACTION: action,
                    keys.DONE: false,
                    keys.TERMINATED: false.clone(),
                    keys.TRUNCATED: false.clone(),
                    keys.NEXT: {
                        keys.OBSERVATION: torch.from_numpy(obs[1:]),
                        keys.REWARD: torch.as_tensor(
                            np.asarray(episode.rewards), dtype=torch.float32
                        ).view(T, 1),
                        keys.TERMINATED: terminated,
                        keys.TRUNCATED: truncated,
                        keys.DONE: terminated | truncated,
                    },
                    keys.COLLECTOR: {keys.TRAJ_IDS: torch.full((T,), int(episode.id))},
                },
                batch_size=[T],
            )  # fmt: skip
        )
    if not parts:
        raise ValueError(f"dataset {data.id!r} holds no episodes")
    steps = torch.cat(parts)
    rb = ReplayBuffer(capacity or len(steps), num_streams=1, device=device, generator=generator)
    rb.extend(steps)
    return rb
