"""tdrl.modules: networks, actors and critics as TensorDict modules."""

from tdrl.modules.actors import CategoricalActor, GaussianActor, TanhGaussianActor
from tdrl.modules.critics import ValueCritic
from tdrl.modules.distributions import Categorical, IndependentNormal, TanhNormal
from tdrl.modules.mlp import HIDDEN_GAIN, POLICY_GAIN, VALUE_GAIN, mlp, orthogonal_init_
from tdrl.modules.normalization import RunningObservationNorm

__all__ = [
    "HIDDEN_GAIN",
    "POLICY_GAIN",
    "VALUE_GAIN",
    "Categorical",
    "CategoricalActor",
    "GaussianActor",
    "IndependentNormal",
    "RunningObservationNorm",
    "TanhGaussianActor",
    "TanhNormal",
    "ValueCritic",
    "mlp",
    "orthogonal_init_",
]

# --- off-policy modules (issue 6) ---
from tdrl.modules.deterministic import DeterministicActor  # noqa: E402
from tdrl.modules.ensemble import EnsembleCritic, EnsembleLinear, EnsembleMLP  # noqa: E402
from tdrl.modules.exploration import (  # noqa: E402
    AdditiveGaussianNoise,
    EpsilonGreedy,
    OrnsteinUhlenbeckNoise,
    linear_schedule,
)
from tdrl.modules.qvalue import Dueling, QValueActor, StateActionCritic, q_mlp  # noqa: E402

__all__ += [
    "AdditiveGaussianNoise",
    "DeterministicActor",
    "Dueling",
    "EnsembleCritic",
    "EnsembleLinear",
    "EnsembleMLP",
    "EpsilonGreedy",
    "OrnsteinUhlenbeckNoise",
    "QValueActor",
    "StateActionCritic",
    "linear_schedule",
    "q_mlp",
]
