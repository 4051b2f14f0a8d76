"""tdrl.collectors: a policy and a vector env -> rollout TensorDicts; policy evaluation."""

from tdrl.collectors.collector import Collector
from tdrl.collectors.evaluate import evaluate
from tdrl.collectors.ray_collector import RayCollector

__all__ = ["Collector", "RayCollector", "evaluate"]
