"""tdrl.envs: gymnasium vector envs (MuJoCo included) that read and write TensorDicts."""

from tdrl.envs.state import env_state, load_env_state
from tdrl.envs.vec_env import StepArrays, VecEnv, make_vec_env

__all__ = ["StepArrays", "VecEnv", "env_state", "load_env_state", "make_vec_env"]
