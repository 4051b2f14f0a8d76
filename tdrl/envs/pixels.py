"""Pixel envs: MinAtar and Atari as uint8 channels-first frames, registered for ``make_vec_env``.

Importing ``tdrl.envs`` registers, when the ``pixels`` extra is installed:

- ``"MinAtar/<Game>-v0"`` / ``"-v1"`` (Asterix, Breakout, Freeway, Seaquest, SpaceInvaders):
  minatar's own gymnasium env (``minatar.gym.BaseEnv``; v1 has the game's minimal action set,
  v0 all 6 actions, sticky actions with p=0.1 as in Young & Tian 2019, arXiv 1903.03176), with
  frames ``[C, 10, 10]`` uint8 (0 or 1 per channel) instead of ``[10, 10, C]`` bool. minatar
  declares these ids as a gymnasium plugin, which gymnasium >= 1.0 no longer loads; tdrl
  registers them itself (replacing minatar's registration if it was loaded).
- ``"tdrl/<Game>-v5"`` for every ``"ALE/<Game>-v5"`` of ale-py: the ALE v5 game (sticky actions
  p=0.25, 108k frames at most: truncation) under the DQN preprocessing of Mnih et al. 2015 as
  Machado et al. 2018 (arXiv 1709.06009) describe it, through gymnasium's
  ``AtariPreprocessing``: up to 30 no-op actions at reset, 4 frames per step with the max over
  the last two, 84x84 grayscale; FIRE after each reset in games that wait for it. Frames
  ``[1, 84, 84]`` uint8.
- ``"tdrl/MiniGrid-<Task>"`` for every ``"MiniGrid-<Task>"`` of minigrid (Chevalier-Boisvert et al.
  2023, arXiv 2306.13831; the ``minigrid`` extra): the agent's 7x7 partial view as ``[3, 7, 7]``
  uint8 (object, colour and state indices, bounded by 10, 5 and 2), the mission text dropped
  (minigrid's ``ImgObsWrapper``): sparse-reward gridworlds for the exploration bonuses;
  ``layout_seed=s`` keeps one layout for every episode (:func:`make_minigrid`).

Options are make kwargs, e.g. ``make_vec_env("tdrl/Breakout-v5", 8, frame_stack=4,
terminal_on_life_loss=True)``:

- ``frame_stack=k``: the last k frames concatenated on the channel axis (``[k * C, H, W]``),
  restarted at every episode start (:class:`FrameStack`). Off-policy, a
  ``ReplayBuffer(capacity, frame_keys=["observation"], frame_stack=k)`` takes these stacks,
  stores each frame once and gives the same stacks back at sampling (``tdrl.data.frames``).
- ``terminal_on_life_loss=True`` (Atari, off by default as Machado et al. advise): a lost life
  is reported as ``terminated`` and ends the episode as tdrl sees it (returns per life, frame
  stack restarted), but the game goes on: the next episode starts from the state after the
  loss, not from a new game (:class:`EpisodicLife`). Evaluate with it off to get game scores.

Rewards come from the env unclipped, so the collector's episode returns are game scores; clip
them for learning with :class:`RewardClipping` on the collected batch.
"""

from __future__ import annotations

import importlib.util
import numbers
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdrl.keyed import require
from tdrl.keys import NEXT_REWARD, NEXT_REWARD_UNCLIPPED

__all__ = [
    "ATARI_NAMESPACE",
    "MINATAR_GAMES",
    "NEXT_REWARD_UNCLIPPED",
    "ChannelsFirst",
    "EpisodicLife",
    "FireReset",
    "FrameStack",
    "MAX_FRAME_STACK",
    "RewardClipping",
    "make_atari",
    "make_minatar",
    "register_pixel_tasks",
]

# minatar's module names -> the names in its gymnasium ids.
MINATAR_GAMES = {
    "asterix": "Asterix",
    "breakout": "Breakout",
    "freeway": "Freeway",
    "seaquest": "Seaquest",
    "space_invaders": "SpaceInvaders",
}
ATARI_NAMESPACE = "tdrl"
_INSTALL = 'pip install -c constraints.txt -e ".[pixels]"'
# The most frames one observation stacks (DQN stacks 4): a stack is built frame by frame at every
# reset, so a mistyped 10**6 would take minutes and gigabytes before the first step.
MAX_FRAME_STACK = 256


def _check_frame_stack(value: Any, name: str = "frame_stack") -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or not 1 <= int(value) <= MAX_FRAME_STACK
    ):
        raise ValueError(
            f"{name} must be >= 1 and <= {MAX_FRAME_STACK} (an int: frames per observation), "
            f"got {value!r}"
        )


class ChannelsFirst(gym.ObservationWrapper):
    """``[H, W, C]`` (or ``[H, W]``) frames of a bool or uint8 ``Box`` -> ``[C, H, W]`` uint8.

    PyTorch's convolutions read channels first; bool frames (MinAtar's) become 0 or 1.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) not in (2, 3):
            raise ValueError(f"ChannelsFirst needs [H, W] or [H, W, C] Box frames, got {space}")
        if space.dtype not in (np.bool_, np.uint8):
            raise ValueError(f"ChannelsFirst needs bool or uint8 frames, got {space.dtype}")
        low, high = (np.broadcast_to(b, space.shape) for b in (space.low, space.high))
        if len(space.shape) == 2:
            low, high = low[None], high[None]
        else:
            low, high = np.moveaxis(low, -1, 0), np.moveaxis(high, -1, 0)
        self.observation_space = gym.spaces.Box(
            low.astype(np.uint8), high.astype(np.uint8), low.shape, np.uint8
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        if observation.ndim == 2:
            return observation[None].astype(np.uint8, copy=False)
        return np.ascontiguousarray(np.moveaxis(observation, -1, 0), dtype=np.uint8)


class FrameStack(gym.ObservationWrapper):
    """The last ``num_frames`` ``[C, H, W]`` frames as one ``[num_frames * C, H, W]`` frame,
    oldest first.

    An episode's first frame fills the stack at its reset (gymnasium's
    ``FrameStackObservation(padding_type="reset")`` does the stacking), so a stack never holds
    frames of an earlier episode; the vector env's autoreset restarts it at every episode end.
    ``ReplayBuffer.sample_slices(..., frame_stack=k)`` builds the same stacks from stored frames.
    """

    def __init__(self, env: gym.Env, num_frames: int) -> None:
        _check_frame_stack(num_frames, "num_frames")
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
            raise ValueError(f"FrameStack needs [C, H, W] Box frames, got {space}")
        super().__init__(gym.wrappers.FrameStackObservation(env, num_frames, padding_type="reset"))
        self.num_frames = num_frames
        channels, height, width = space.shape
        shape = (num_frames * channels, height, width)
        low = np.broadcast_to(space.low, space.shape)
        high = np.broadcast_to(space.high, space.shape)
        self.observation_space = gym.spaces.Box(
            np.concatenate([low] * num_frames),
            np.concatenate([high] * num_frames),
            shape,
            space.dtype,
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation.reshape(self.observation_space.shape)  # [k, C, H, W] -> [k * C, H, W]


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode (``terminated``), but not the game (Mnih et al. 2015).

    The reset that follows a life loss does not restart the game: it takes one no-op step and
    starts the next episode there. After a real game over, a truncation or a seeded reset, the
    game restarts as usual. The last life's loss is the game's own termination.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.life_lost = False  # the last step ended an episode by a life loss only

    def step(self, action: Any) -> Any:
        observation, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()  # type: ignore[attr-defined]
        self.life_lost = 0 < lives < self.lives and not (terminated or truncated)
        self.lives = lives
        return observation, reward, terminated or self.life_lost, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if self.life_lost and seed is None:
            self.life_lost = False
            observation, _, terminated, truncated, info = self.env.step(0)  # NOOP
            if not (terminated or truncated):
                self.lives = self.env.unwrapped.ale.lives()  # type: ignore[attr-defined]
                return observation, info
        self.life_lost = False
        observation, info = self.env.reset(seed=seed, options=options)
        self.lives = self.env.unwrapped.ale.lives()  # type: ignore[attr-defined]
        return observation, info


class FireReset(gym.Wrapper):
    """Presses FIRE after every reset: games such as Breakout wait for it to start (or to serve
    again after a lost life, with :class:`EpisodicLife`)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
        if "FIRE" not in meanings:
            raise ValueError(f"FireReset needs a FIRE action; this game has {meanings}")
        self.fire = meanings.index("FIRE")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.env.reset(seed=seed, options=options)
        observation, _, terminated, truncated, info = self.env.step(self.fire)
        if terminated or truncated:
            return self.env.reset(seed=seed, options=options)
        return observation, info


def make_minatar(
    game: str, *, minimal_action_set: bool = True, frame_stack: int = 1, **kwargs: Any
) -> gym.Env:
    """A MinAtar game with ``[C, 10, 10]`` uint8 frames (``[frame_stack * C, 10, 10]``).

    Args:
        game: minatar's module name (``"breakout"``) or id name (``"Breakout"``).
        minimal_action_set: only the game's actions (the ``-v1`` ids) instead of all 6.
        frame_stack: frames per observation (:class:`FrameStack`).
        **kwargs: to ``minatar.gym.BaseEnv`` (``sticky_action_prob``, ``difficulty_ramping``,
            ``render_mode``).
    """
    _check_frame_stack(frame_stack)
    names = {v: k for k, v in MINATAR_GAMES.items()}
    module = names.get(game, game)
    if module not in MINATAR_GAMES:
        raise ValueError(f"unknown MinAtar game {game!r}; known: {sorted(names)}")
    try:
        from minatar.gym import BaseEnv
    except ImportError as err:
        raise ImportError(f"MinAtar envs need the minatar package: {_INSTALL}") from err
    env: gym.Env = ChannelsFirst(
        BaseEnv(module, use_minimal_action_set=minimal_action_set, **kwargs)
    )
    return FrameStack(env, frame_stack) if frame_stack > 1 else env


def make_atari(
    env_id: str = "ALE/Pong-v5",
    *,
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: int = 84,
    terminal_on_life_loss: bool = False,
    fire_reset: bool | None = None,
    frame_stack: int = 1,
    **ale_kwargs: Any,
) -> gym.Env:
    """An ale-py game with the DQN preprocessing; ``[1, 84, 84]`` uint8 frames.

    Args:
        env_id: the ale-py id (``"ALE/Breakout-v5"``); it is made with ``frameskip=1`` and the
            skipping happens here.
        noop_max, frame_skip, screen_size: gymnasium's ``AtariPreprocessing`` (no-op reset,
            frames per step with a max over the last two, square grayscale frames).
        terminal_on_life_loss: a lost life terminates the episode, not the game
            (:class:`EpisodicLife`).
        fire_reset: press FIRE after resets; default: when the game has a FIRE action.
        frame_stack: frames per observation (:class:`FrameStack`).
        **ale_kwargs: to ``gymnasium.make(env_id, ...)`` (``repeat_action_probability``,
            ``full_action_space``, ``max_num_frames_per_episode``, ``render_mode``).
    """
    _check_frame_stack(frame_stack)
    if importlib.util.find_spec("ale_py") is None:
        raise ImportError(f"Atari envs need the ale-py package: {_INSTALL}")
    import ale_py

    gym.register_envs(ale_py)
    env: gym.Env = gym.make(env_id, frameskip=1, **ale_kwargs)
    # AtariPreprocessing's own terminal_on_life_loss restarts the whole game at every lost life
    # (its reset is a real one); EpisodicLife keeps the game going instead.
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size
    )
    if terminal_on_life_loss:
        env = EpisodicLife(env)
    if fire_reset is None:
        fire_reset = "FIRE" in env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
    if fire_reset:
        env = FireReset(env)
    env = ChannelsFirst(env)
    return FrameStack(env, frame_stack) if frame_stack > 1 else env


class MiniGridView(gym.ObservationWrapper):
    """minigrid's ``[7, 7, 3]`` view of object, colour and state indices (declared 0..255) as
    ``[3, 7, 7]`` uint8 bounded by the largest index of each (10, 5, 2). The networks scale
    frames by one factor, 1 / the largest bound (:func:`tdrl.modules.pixel_network`): the object
    channel into [0, 1], colour into [0, 0.5], state into [0, 0.2]."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or space.shape[-1:] != (3,):
            raise ValueError(f"MiniGridView needs minigrid's [H, W, 3] image, got {space}")
        from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX

        bounds = [max(OBJECT_TO_IDX.values()), max(COLOR_TO_IDX.values()),
                  max(STATE_TO_IDX.values())]  # fmt: skip
        height, width = space.shape[:2]
        high = np.broadcast_to(np.array(bounds, np.uint8)[:, None, None], (3, height, width))
        self.observation_space = gym.spaces.Box(
            np.zeros_like(high), high.copy(), high.shape, np.uint8
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(observation, -1, 0), dtype=np.uint8)


class _OneLayout(gym.Wrapper):
    """Resets without the seed a caller passes (the collector's, an evaluation's): the wrapped
    ``ReseedWrapper`` fixes the layout and would warn at every seeded reset that it ignores it."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self.env.reset(options=options)


def make_minigrid(env_id: str, *, layout_seed: int | None = None, **kwargs: Any) -> gym.Env:
    """A minigrid task (``"MiniGrid-DoorKey-8x8-v0"``) with its 7x7 view as ``[3, 7, 7]``
    uint8 (:class:`MiniGridView`), the mission text dropped; ``kwargs`` to ``gymnasium.make``
    (``max_steps``, ``render_mode``).

    ``layout_seed``: every episode is generated from this seed (minigrid's ``ReseedWrapper``),
    so every episode of every env has the same layout: a singleton task, as Montezuma's Revenge
    is, where a novelty bonus has states to count. None: a new layout each episode (minigrid's
    procedural generation, from the env's seed)."""
    try:
        import minigrid  # noqa: F401  # registers the MiniGrid-* ids
        from minigrid.wrappers import ImgObsWrapper, ReseedWrapper
    except ImportError as err:
        raise ImportError(
            "minigrid envs need the minigrid package: python -m pip install -c constraints.txt "
            '-e ".[minigrid]"'
        ) from err
    env = gym.make(env_id, **kwargs)
    if layout_seed is not None:
        if isinstance(layout_seed, bool) or not isinstance(layout_seed, int) or layout_seed < 0:
            raise ValueError(f"layout_seed must be an int >= 0 or None, got {layout_seed!r}")
        env = _OneLayout(ReseedWrapper(env, seeds=(layout_seed,)))
    return MiniGridView(ImgObsWrapper(env))


def register_pixel_tasks() -> None:
    """Register the MinAtar ids, the ``tdrl/<Game>-v5`` Atari ids when ale-py is installed, and
    the ``tdrl/MiniGrid-*`` ids when minigrid is (idempotent)."""
    for module, name in MINATAR_GAMES.items():
        for version, minimal in (("v0", False), ("v1", True)):
            _register(
                f"MinAtar/{name}-{version}",
                make_minatar,
                {"game": module, "minimal_action_set": minimal},
            )
    if importlib.util.find_spec("minigrid") is not None:
        import minigrid  # noqa: F401  # registers the MiniGrid-* ids

        for env_id in [i for i in gym.registry if i.startswith("MiniGrid-")]:
            _register(f"{ATARI_NAMESPACE}/{env_id}", make_minigrid, {"env_id": env_id})
    if importlib.util.find_spec("ale_py") is None:
        return
    import ale_py

    gym.register_envs(ale_py)
    games = [i[len("ALE/") : -len("-v5")] for i in gym.registry if _is_ale_v5(i)]
    for game in games:
        _register(f"{ATARI_NAMESPACE}/{game}-v5", make_atari, {"env_id": f"ALE/{game}-v5"})


def _is_ale_v5(env_id: str) -> bool:
    return env_id.startswith("ALE/") and env_id.endswith("-v5")


def _register(env_id: str, entry_point: Any, kwargs: dict[str, Any]) -> None:
    spec = gym.registry.get(env_id)
    if spec is not None and spec.entry_point is entry_point:
        return
    if spec is not None:  # minatar's own registration (bool [10, 10, C] frames)
        del gym.registry[env_id]
    gym.register(env_id, entry_point=entry_point, kwargs=kwargs)


class RewardClipping(TensorDictModuleBase):
    """Clamps ``("next", "reward")`` of a batch to ``[clamp_min, clamp_max]`` in place, and keeps
    the env's reward in ``("next", "reward_unclipped")``.

    DQN clips Atari rewards to [-1, 1] for learning (Mnih et al. 2015); the collector sums the
    env's rewards before this runs, so logged episode returns stay game scores. Applied to a
    batch that already holds the unclipped reward, it clamps that one again (idempotent).
    TorchRL's ``RewardClipping`` transform has the same arguments.

    Shapes:
        reads and writes ``("next", "reward")`` ``[*B, 1]``; writes the unclipped copy.
    """

    def __init__(self, clamp_min: float = -1.0, clamp_max: float = 1.0) -> None:
        super().__init__()
        if not clamp_min < clamp_max:
            raise ValueError(f"need clamp_min < clamp_max, got {clamp_min}, {clamp_max}")
        self.clamp_min, self.clamp_max = float(clamp_min), float(clamp_max)
        self.in_keys = [NEXT_REWARD]
        self.out_keys = [NEXT_REWARD, NEXT_REWARD_UNCLIPPED]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        reward: torch.Tensor = tensordict.get(NEXT_REWARD_UNCLIPPED, None)
        if reward is None:
            reward = require(tensordict, NEXT_REWARD, "RewardClipping")
            tensordict.set(NEXT_REWARD_UNCLIPPED, reward)
        tensordict.set(NEXT_REWARD, reward.clamp(self.clamp_min, self.clamp_max))
        return tensordict
