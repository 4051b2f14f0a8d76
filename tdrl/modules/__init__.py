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
