"""tdrl.objectives: losses that read a batch and return ``loss_*`` entries."""

from tdrl.objectives.a2c import A2CLoss
from tdrl.objectives.natural_gradient import conjugate_gradient, flat_grad
from tdrl.objectives.npg import NPGLoss
from tdrl.objectives.ppo import ClipPPOLoss, ppo_update
from tdrl.objectives.reinforce import ReinforceLoss
from tdrl.objectives.trpo import TRPOLoss

__all__ = [
    "A2CLoss",
    "ClipPPOLoss",
    "NPGLoss",
    "ReinforceLoss",
    "TRPOLoss",
    "conjugate_gradient",
    "flat_grad",
    "ppo_update",
]
