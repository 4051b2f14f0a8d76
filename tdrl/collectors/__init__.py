"""tdrl.collectors: a policy and a vector env -> rollout TensorDicts; policy evaluation."""

from tdrl.collectors._policy import recurrent_state_specs
from tdrl.collectors.collector import Collector
from tdrl.collectors.device import DeviceCollector
from tdrl.collectors.evaluate import evaluate
from tdrl.collectors.multiagent import MultiAgentCollector
from tdrl.collectors.workers import ProcessCollector, RayCollector, WorkerCollector

# What the trainers' loops take: a local collector or one over Ray workers.
AnyCollector = Collector | WorkerCollector

__all__ = [
    "AnyCollector",
    "Collector",
    "DeviceCollector",
    "MultiAgentCollector",
    "ProcessCollector",
    "RayCollector",
    "WorkerCollector",
    "evaluate",
    "recurrent_state_specs",
]
