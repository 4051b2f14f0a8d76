"""tdrl.envs: gymnasium vector envs (MuJoCo included) that read and write TensorDicts."""

from tdrl.envs.vec_env import StepArrays, VecEnv, make_vec_env

__all__ = ["StepArrays", "VecEnv", "make_vec_env"]
