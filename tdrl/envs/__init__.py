"""tdrl.envs."""
