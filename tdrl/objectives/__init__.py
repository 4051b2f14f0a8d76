"""tdrl.objectives: losses that read a batch and return ``loss_*`` entries."""

from tdrl.modules.ensembles import ModuleEnsemble, as_ensemble
from tdrl.objectives.a2c import A2CLoss
from tdrl.objectives.bc import BCLoss
from tdrl.objectives.bcq import (
    BCQActor,
    BCQLoss,
    DiscreteBCQActor,
    DiscreteBCQLoss,
    imitation_mask,
)
from tdrl.objectives.bonus import MixedAdvantage, WithBonus
from tdrl.objectives.common import total_loss
from tdrl.objectives.cql import CQLLoss, DiscreteCQLLoss, conservative_gap
from tdrl.objectives.crossq import CrossQLoss
from tdrl.objectives.crr import CRRLoss
from tdrl.objectives.ddpg import DDPGLoss
from tdrl.objectives.discrete_sac import DiscreteSACLoss
from tdrl.objectives.distributional import C51Loss, FQFLoss, IQNLoss, QRDQNLoss
from tdrl.objectives.dqn import DQNLoss
from tdrl.objectives.drqn import DRQNLoss
from tdrl.objectives.gail import GAILLoss, gail_reward
from tdrl.objectives.icm import ICMLoss
from tdrl.objectives.iql import IQLLoss
from tdrl.objectives.maddpg import MADDPGLoss
from tdrl.objectives.natural_gradient import conjugate_gradient, flat_grad
from tdrl.objectives.npg import NPGLoss
from tdrl.objectives.ppg import PPGAuxLoss
from tdrl.objectives.ppo import ClipPPOLoss
from tdrl.objectives.qmix import QMixLoss
from tdrl.objectives.redq import REDQLoss
from tdrl.objectives.reinforce import ReinforceLoss
from tdrl.objectives.rnd import IntrinsicValueLoss, RNDLoss
from tdrl.objectives.sac import SACLoss
from tdrl.objectives.target import (
    HardUpdate,
    SoftUpdate,
    hard_update_,
    make_target,
    soft_update_,
    update_priority,
)
from tdrl.objectives.td3 import TD3Loss
from tdrl.objectives.td3_bc import TD3BCLoss
from tdrl.objectives.tqc import TQCLoss
from tdrl.objectives.trpo import TRPOLoss

__all__ = [
    "A2CLoss",
    "BCLoss",
    "BCQActor",
    "BCQLoss",
    "C51Loss",
    "CQLLoss",
    "CrossQLoss",
    "CRRLoss",
    "ClipPPOLoss",
    "DDPGLoss",
    "DQNLoss",
    "DRQNLoss",
    "DiscreteBCQActor",
    "DiscreteBCQLoss",
    "DiscreteCQLLoss",
    "DiscreteSACLoss",
    "FQFLoss",
    "GAILLoss",
    "HardUpdate",
    "ICMLoss",
    "IQLLoss",
    "IntrinsicValueLoss",
    "IQNLoss",
    "MixedAdvantage",
    "ModuleEnsemble",
    "NPGLoss",
    "PPGAuxLoss",
    "MADDPGLoss",
    "QMixLoss",
    "QRDQNLoss",
    "REDQLoss",
    "RNDLoss",
    "ReinforceLoss",
    "SACLoss",
    "SoftUpdate",
    "TD3BCLoss",
    "TD3Loss",
    "TQCLoss",
    "TRPOLoss",
    "WithBonus",
    "as_ensemble",
    "conjugate_gradient",
    "conservative_gap",
    "flat_grad",
    "gail_reward",
    "hard_update_",
    "imitation_mask",
    "make_target",
    "soft_update_",
    "total_loss",
    "update_priority",
]
