"""tdrl.envs: gymnasium vector envs (MuJoCo included) that read and write TensorDicts."""

from tdrl.envs.interop import from_torchrl, to_torchrl
from tdrl.envs.mujoco_warnings import MuJoCoWarning, route_mujoco_warnings
from tdrl.envs.state import env_state, load_env_state
from tdrl.envs.vec_env import DEFAULT_STEP_TIMEOUT, EnvWorkerError, StepArrays, VecEnv, make_vec_env

route_mujoco_warnings()

__all__ = [
    "DEFAULT_STEP_TIMEOUT",
    "EnvWorkerError",
    "MuJoCoWarning",
    "StepArrays",
    "VecEnv",
    "env_state",
    "load_env_state",
    "from_torchrl",
    "make_vec_env",
    "to_torchrl",
]
