"""tdrl.envs: gymnasium vector envs (MuJoCo included) that read and write TensorDicts."""

from tdrl.envs.goals import BitFlipping, goal_functions, register_goal_tasks
from tdrl.envs.interop import from_torchrl, to_torchrl
from tdrl.envs.mujoco_warnings import MuJoCoWarning, route_mujoco_warnings
from tdrl.envs.multiagent import MultiAgentVecEnv, PettingZooVecEnv, VmasVecEnv
from tdrl.envs.pixels import (
    ChannelsFirst,
    EpisodicLife,
    FireReset,
    FrameStack,
    RewardClipping,
    make_atari,
    make_minatar,
    register_pixel_tasks,
)
from tdrl.envs.pomdp import NOVEL_TASKS, HideVelocity, register_novel_tasks
from tdrl.envs.state import env_state, load_env_state
from tdrl.envs.variants import register_variant_tasks
from tdrl.envs.vec_env import DEFAULT_STEP_TIMEOUT, EnvWorkerError, StepArrays, VecEnv, make_vec_env

route_mujoco_warnings()
register_novel_tasks()
register_pixel_tasks()
register_goal_tasks()
register_variant_tasks()

__all__ = [
    "NOVEL_TASKS",
    "BitFlipping",
    "ChannelsFirst",
    "EpisodicLife",
    "FireReset",
    "FrameStack",
    "RewardClipping",
    "DEFAULT_STEP_TIMEOUT",
    "EnvWorkerError",
    "HideVelocity",
    "MuJoCoWarning",
    "MultiAgentVecEnv",
    "PettingZooVecEnv",
    "VmasVecEnv",
    "StepArrays",
    "VecEnv",
    "env_state",
    "load_env_state",
    "from_torchrl",
    "goal_functions",
    "make_atari",
    "make_minatar",
    "make_vec_env",
    "to_torchrl",
]
