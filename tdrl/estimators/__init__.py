"""tdrl.estimators: value estimators as TensorDict modules (TorchRL 0.14 arguments and keys).

Assign one to a TorchRL loss with ``loss.value_estimator = GAE(...)``; TorchRL's
``make_value_estimator`` only accepts its own classes.
"""

from tdrl.estimators.base import EstimatorKeys, ValueEstimator
from tdrl.estimators.td import GAE, TD0Estimator, TD1Estimator, TDLambdaEstimator
from tdrl.estimators.vtrace import VTrace

__all__ = [
    "GAE",
    "EstimatorKeys",
    "TD0Estimator",
    "TD1Estimator",
    "TDLambdaEstimator",
    "VTrace",
    "ValueEstimator",
]
