"""tdrl.collectors: a policy and a vector env -> rollout TensorDicts; policy evaluation."""

from tdrl.collectors.collector import Collector
from tdrl.collectors.evaluate import evaluate

__all__ = ["Collector", "evaluate"]
