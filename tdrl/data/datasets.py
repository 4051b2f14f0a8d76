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
nothing under the dataset's id. Beside Minari's ``data`` folder, :func:`save_minari` records the
size and SHA-256 of each data file (``tdrl_files.json``); :func:`load_minari` checks them before
reading, so a changed or corrupted dataset is refused (datasets made without tdrl, or before it
wrote the record, load unchecked). Both refuse episodes that would train on wrong data: NaN or
infinite observations, actions or rewards (or leave them out, ``on_nonfinite="drop"``), flags
that are not bool, a termination before the last step, arrays of mismatched lengths.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from tdrl import keys
from tdrl.data.integrity import check_files, file_records
from tdrl.data.replay_buffer import ReplayBuffer

__all__ = ["datasets_path", "load_minari", "save_minari", "split_episodes"]

NAMESPACE_METADATA = "namespace_metadata.json"  # Minari's file in a namespace folder
FILES_RECORD = "tdrl_files.json"  # beside a dataset's data folder: size and SHA-256 of each file
_EPISODE = ("id", "observations", "actions", "rewards", "terminations", "truncations")


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
    if rollout.batch_size.numel() == 0:
        raise ValueError(
            f"the rollout is empty (batch size {tuple(rollout.batch_size)}): no episode to save"
        )
    for key in (keys.OBSERVATION, keys.ACTION, keys.NEXT_OBSERVATION, keys.NEXT_REWARD,
                keys.NEXT_TERMINATED, keys.NEXT_TRUNCATED):  # fmt: skip
        if key not in rollout.keys(include_nested=True):
            raise KeyError(f"the rollout has no {key!r} entry, needed for a Minari episode")
    for key in (keys.NEXT_TERMINATED, keys.NEXT_TRUNCATED):
        if rollout.get(key).dtype != torch.bool:
            raise TypeError(
                f"the rollout's {key!r} is {rollout.get(key).dtype}, flags must be bool"
            )
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
    return data[storage.time_order()].transpose(0, 1)


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


def _check_episode(episode: dict[str, Any], where: str) -> str | None:
    """Raise naming the key where an episode's arrays do not make one episode (flags not bool,
    lengths that differ, a termination before the last step); return its first NaN or infinite
    observation, action or reward, said in words (None: all finite)."""
    T = len(episode["rewards"])
    for name in ("terminations", "truncations"):
        dtype = np.asarray(episode[name]).dtype
        if dtype != np.bool_:
            raise TypeError(
                f"{where}: {name} are {dtype}, must be bool (any non-zero value would end the "
                "episode at that step)"
            )
    for name, want in (("observations", T + 1), ("actions", T), ("terminations", T),
                       ("truncations", T)):  # fmt: skip
        if len(episode[name]) != want:
            raise ValueError(
                f"{where}: {len(episode[name])} {name} for {T} rewards, expected {want}"
            )
    early = np.flatnonzero(np.asarray(episode["terminations"])[:-1])
    if len(early):
        raise ValueError(
            f"{where}: terminated at step {early[0]} of {T}, before its last step (a terminal "
            "state ends its episode)"
        )
    for name in ("observations", "actions", "rewards"):
        x = np.asarray(episode[name])
        if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
            step = int(np.flatnonzero(~np.isfinite(x.reshape(len(x), -1)).all(-1))[0])
            return f"{name} at step {step}: {x[step].ravel()[:6].tolist()}"
    return None


def _finite_only(
    episodes: Iterable[dict[str, Any]],
    dataset_id: str,
    on_nonfinite: Literal["raise", "drop"],
) -> Iterator[dict[str, Any]]:
    """The episodes that :func:`_check_episode` passes; one with a NaN or infinite value raises
    (``"raise"``) or is left out (``"drop"``, with a warning saying how many were)."""
    if on_nonfinite not in ("raise", "drop"):
        raise ValueError(f"on_nonfinite must be 'raise' or 'drop', got {on_nonfinite!r}")
    dropped, seen = [], 0
    for episode in episodes:
        seen += 1
        where = f"dataset {dataset_id!r}, episode {episode['id']}"
        bad = _check_episode(episode, where)
        if bad is None:
            yield episode
        elif on_nonfinite == "raise":
            raise ValueError(
                f"{where}: non-finite {bad} (on_nonfinite='drop' leaves such episodes out)"
            )
        else:
            dropped.append(episode["id"])
    if dropped:
        warnings.warn(
            f"dataset {dataset_id!r}: dropped {len(dropped)} of {seen} episodes with NaN or "
            f"infinite observations, actions or rewards (on_nonfinite='drop'): episodes "
            f"{dropped[:10]}{' ...' if len(dropped) > 10 else ''}",
            stacklevel=3,
        )


def _check_files_record(folder: Path, dataset_id: str) -> None:
    """Refuse a dataset whose data files differ from the record :func:`save_minari` wrote (bit
    rot, a truncated copy, an edit); a dataset without a record is not checked."""
    record = folder / FILES_RECORD
    if not record.exists():
        return
    try:
        files = json.loads(record.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"Minari dataset {dataset_id!r}: unreadable {FILES_RECORD}: {err}"
        ) from None
    check_files(folder / "data", files, f"Minari dataset {dataset_id!r} at {str(folder)!r}")


def save_minari(
    source: ReplayBuffer | TensorDictBase,
    dataset_id: str,
    env: str | gym.Env,
    *,
    ref_min_score: float | None = None,
    ref_max_score: float | None = None,
    algorithm_name: str | None = None,
    description: str | None = None,
    on_nonfinite: Literal["raise", "drop"] = "raise",
) -> Any:
    """Write ``source`` (a replay buffer, or a ``[N, T]`` rollout) as the Minari dataset
    ``dataset_id`` (``"namespace/name-v0"``) of ``env``, under ``MINARI_DATASETS_PATH`` (default
    ``~/.minari/datasets``), with the size and SHA-256 of its files (``tdrl_files.json``, which
    :func:`load_minari` checks). ``ref_min_score`` / ``ref_max_score``: the returns that
    normalize scores the D4RL way (0 = random, 100 = expert). An episode with a NaN or infinite
    observation, action or reward is an error naming it (``on_nonfinite="raise"``) or is left
    out, with a warning saying how many were (``"drop"``). Returns the loaded
    ``MinariDataset``."""
    minari = _minari()
    from minari.data_collector import EpisodeBuffer

    rollout = _chronological(source) if isinstance(source, ReplayBuffer) else source
    split = [{"id": i, **e} for i, e in enumerate(split_episodes(rollout))]
    episodes = list(_finite_only(split, dataset_id, on_nonfinite))
    if not episodes:
        raise ValueError(f"dataset {dataset_id!r}: every episode holds NaN or infinite values")
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
        written = staging / dataset_id
        records = {"files": file_records(written / "data")}
        (written / FILES_RECORD).write_text(json.dumps(records, indent=1))
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
    on_nonfinite: Literal["raise", "drop"] = "raise",
) -> ReplayBuffer:
    """A one-stream :class:`ReplayBuffer` of every step of ``dataset`` (an id or a
    ``MinariDataset``), episode after episode (``capacity`` default: the dataset's step count;
    a smaller one is an error). An episode whose last step is neither terminated nor truncated
    is closed as truncated, as :func:`split_episodes` does.

    Refused, each with an error naming the dataset and the episode, key or file: data files
    that differ from the record :func:`save_minari` wrote (datasets without one load
    unchecked), episodes the metadata counts but the data lack, flags that are not bool, a
    termination before an episode's last step, arrays of mismatched lengths, and NaN or
    infinite observations, actions or rewards (``on_nonfinite="drop"``: such episodes are left
    out, with a warning saying how many were).
    """
    minari = _minari()
    if isinstance(dataset, str):
        local = set(minari.list_local_datasets())
        if dataset not in local:
            raise FileNotFoundError(
                f"no Minari dataset {dataset!r} under {datasets_path()} (MINARI_DATASETS_PATH, "
                "default ~/.minari/datasets): tdrl makes its datasets here, with "
                "`python recipes/make_dataset.py` (--help lists how), nothing is downloaded"
            )
        name, space, episodes = _read_local(Path(minari.storage.get_dataset_path(dataset)), dataset)
    else:
        name, space = dataset.id, dataset.observation_space
        _check_files_record(Path(dataset.storage.data_path).parent, name)
        episodes = ({k: getattr(e, k) for k in _EPISODE} for e in dataset.iterate_episodes())
    if not isinstance(space, gym.spaces.Box):
        raise TypeError(f"dataset {name!r}: only Box observations load yet, got {space}")
    parts = []
    for episode in _finite_only(map(_as_arrays, episodes), name, on_nonfinite):
        T = len(episode["rewards"])
        obs = episode["observations"]
        if obs.shape != (T + 1, *space.shape):
            raise ValueError(
                f"dataset {name!r}, episode {episode['id']}: observations of shape {obs.shape}, "
                f"expected (steps + 1, *{space.shape}) = {(T + 1, *space.shape)}"
            )
        action = torch.as_tensor(episode["actions"])
        action = action.long() if not action.is_floating_point() else action
        terminated = torch.as_tensor(episode["terminations"]).view(T, 1)
        truncated = torch.as_tensor(episode["truncations"]).view(T, 1)
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
                        keys.REWARD: torch.from_numpy(episode["rewards"]).view(T, 1),
                        keys.TERMINATED: terminated,
                        keys.TRUNCATED: truncated,
                        keys.DONE: terminated | truncated,
                    },
                    keys.COLLECTOR: {keys.TRAJ_IDS: torch.full((T,), int(episode["id"]))},
                },
                batch_size=[T],
            )  # fmt: skip
        )
    if not parts:
        raise ValueError(f"dataset {name!r} holds no episodes")
    steps = torch.cat(parts)
    if not len(steps):
        raise ValueError(f"dataset {name!r} holds no steps (all its episodes are empty)")
    if capacity is not None and capacity < len(steps):
        raise ValueError(
            f"capacity={capacity} is below the {len(steps)} steps of dataset {name!r}: the "
            f"buffer would keep only the last {capacity}; pass capacity >= {len(steps)}, or "
            "None for the dataset's size"
        )
    rb = ReplayBuffer(capacity or len(steps), num_streams=1, device=device, generator=generator)
    rb.extend(steps)
    return rb


def _read_local(folder: Path, dataset_id: str) -> tuple[str, Any, Iterator[dict[str, Any]]]:
    """(id, observation space, episodes) of the dataset in ``folder``, its files checked
    first. Episodes are read lazily, one after the other, up to the count in its metadata:
    nothing is allocated from that count (Minari's own loader allocates an index array of it),
    and a count beyond the episodes the data hold is an error."""
    from minari import supported_dataset_versions
    from minari.dataset.minari_storage import MinariStorage

    _check_files_record(folder, dataset_id)
    meta = MinariStorage.read_raw_metadata(folder / "data")
    total = meta.get("total_episodes")
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise ValueError(f"dataset {dataset_id!r}: total_episodes={total!r} in its metadata")
    if meta.get("minari_version") not in supported_dataset_versions:
        raise ValueError(
            f"dataset {dataset_id!r} was written by Minari {meta.get('minari_version')}, which "
            f"the installed Minari does not read"
        )
    storage = MinariStorage.read(folder / "data")

    def episodes() -> Iterator[dict[str, Any]]:
        stored = iter(storage.get_episodes(range(total)))
        for read in range(total):
            try:
                yield next(stored)
            except (StopIteration, KeyError, OSError, ValueError) as err:
                raise ValueError(
                    f"dataset {dataset_id!r}: its metadata counts {total} episodes; reading "
                    f"episode {read} failed ({type(err).__name__}: {err})"
                ) from None

    return dataset_id, storage.observation_space, episodes()


def _as_arrays(episode: dict[str, Any]) -> dict[str, Any]:
    """An episode's arrays as tdrl stores them: floating observations and actions as the envs
    give them (float32; integer ones, pixels and discrete actions, as stored), rewards float32."""
    out = dict(episode, rewards=np.asarray(episode["rewards"], dtype=np.float32))
    for name in ("observations", "actions"):
        x = np.asarray(episode[name])
        out[name] = x.astype(np.float32) if np.issubdtype(x.dtype, np.floating) else x
    return out
