"""tdrl.modules: networks, actors, critics and exploration as TensorDict modules."""

from tdrl.modules.actors import (
    BernoulliActor,
    CategoricalActor,
    GaussianActor,
    MultiCategoricalActor,
    TanhGaussianActor,
)
from tdrl.modules.bcq import BCQVAE, BCQPerturbation, bcq_perturbation, bcq_vae
from tdrl.modules.cnn import (
    FlatFrames,
    ImpalaCNN,
    MinAtarCNN,
    NatureCNN,
    PixelInput,
    one_pass_per_input,
)
from tdrl.modules.critics import ValueCritic
from tdrl.modules.deterministic import DeterministicActor
from tdrl.modules.distributional import (
    CategoricalQValueActor,
    FQFQValueActor,
    IQNQValueActor,
    NoisyLinear,
    QuantileQValueActor,
    ResampleNoise,
    reset_noise,
    to_noisy,
)
from tdrl.modules.distributions import (
    Categorical,
    IndependentBernoulli,
    IndependentNormal,
    MultiCategorical,
    TanhNormal,
)
from tdrl.modules.ensembles import EnsembleCritic, EnsembleLinear, EnsembleMLP
from tdrl.modules.exploration import (
    AdditiveGaussianNoise,
    EpsilonGreedy,
    OrnsteinUhlenbeckNoise,
    apex_epsilons,
    linear_schedule,
)
from tdrl.modules.inputs import (
    CatKeys,
    DictEncoder,
    NetworkInputs,
    dict_inputs,
    network_inputs,
    with_encoder,
)
from tdrl.modules.mlp import HIDDEN_GAIN, POLICY_GAIN, VALUE_GAIN, mlp, orthogonal_init_
from tdrl.modules.multiagent import OnGroup
from tdrl.modules.networks import (
    NormalizedInput,
    action_bounds,
    actor_critic,
    aux_value_head,
    deterministic_actor,
    flat_dims,
    q_ensemble,
    tanh_gaussian_actor,
    torch_default_init_,
)
from tdrl.modules.normalization import (
    RewardScaling,
    RunningObservationNorm,
    ValueTargetScaling,
)
from tdrl.modules.qvalue import Dueling, QValueActor, StateActionCritic, q_mlp
from tdrl.modules.recurrent import GRUModule, LSTMModule, RecurrentActor
from tdrl.modules.renorm import BatchRenorm, batch_statistics
from tdrl.modules.residual import ResidualMLP
from tdrl.modules.sde import GSDEActor

__all__ = [
    "CatKeys",
    "NetworkInputs",
    "DictEncoder",
    "dict_inputs",
    "network_inputs",
    "with_encoder",
    "ResidualMLP",
    "BatchRenorm",
    "batch_statistics",
    "GRUModule",
    "LSTMModule",
    "RecurrentActor",
    "HIDDEN_GAIN",
    "POLICY_GAIN",
    "VALUE_GAIN",
    "AdditiveGaussianNoise",
    "BCQPerturbation",
    "BCQVAE",
    "BernoulliActor",
    "Categorical",
    "CategoricalActor",
    "DeterministicActor",
    "Dueling",
    "EnsembleCritic",
    "EnsembleLinear",
    "EnsembleMLP",
    "EpsilonGreedy",
    "FlatFrames",
    "GSDEActor",
    "GaussianActor",
    "IndependentBernoulli",
    "IndependentNormal",
    "ImpalaCNN",
    "MinAtarCNN",
    "MultiCategorical",
    "MultiCategoricalActor",
    "NatureCNN",
    "NormalizedInput",
    "OrnsteinUhlenbeckNoise",
    "PixelInput",
    "OnGroup",
    "QValueActor",
    "QuantileQValueActor",
    "CategoricalQValueActor",
    "FQFQValueActor",
    "IQNQValueActor",
    "NoisyLinear",
    "ResampleNoise",
    "RewardScaling",
    "RunningObservationNorm",
    "StateActionCritic",
    "TanhGaussianActor",
    "TanhNormal",
    "ValueCritic",
    "ValueTargetScaling",
    "action_bounds",
    "actor_critic",
    "apex_epsilons",
    "aux_value_head",
    "bcq_perturbation",
    "bcq_vae",
    "deterministic_actor",
    "flat_dims",
    "linear_schedule",
    "mlp",
    "orthogonal_init_",
    "q_ensemble",
    "q_mlp",
    "reset_noise",
    "to_noisy",
    "tanh_gaussian_actor",
    "torch_default_init_",
    "one_pass_per_input",
]
