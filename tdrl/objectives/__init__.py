"""tdrl.objectives."""

# --- off-policy losses (issue 6) ---
from tdrl.objectives.critic_ensemble import ModuleEnsemble as ModuleEnsemble  # noqa: E402
from tdrl.objectives.critic_ensemble import as_ensemble as as_ensemble  # noqa: E402
from tdrl.objectives.ddpg import DDPGLoss as DDPGLoss  # noqa: E402
from tdrl.objectives.discrete_sac import DiscreteSACLoss as DiscreteSACLoss  # noqa: E402
from tdrl.objectives.dqn import DQNLoss as DQNLoss  # noqa: E402
from tdrl.objectives.redq import REDQLoss as REDQLoss  # noqa: E402
from tdrl.objectives.sac import SACLoss as SACLoss  # noqa: E402
from tdrl.objectives.target import HardUpdate as HardUpdate  # noqa: E402
from tdrl.objectives.target import SoftUpdate as SoftUpdate  # noqa: E402
from tdrl.objectives.target import hard_update_ as hard_update_  # noqa: E402
from tdrl.objectives.target import make_target as make_target  # noqa: E402
from tdrl.objectives.target import soft_update_ as soft_update_  # noqa: E402
from tdrl.objectives.target import update_priority as update_priority  # noqa: E402
from tdrl.objectives.td3 import TD3Loss as TD3Loss  # noqa: E402
