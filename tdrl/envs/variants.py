"""MuJoCo task variants that match the tasks older published results were measured on.

``tdrl/AntNoContact-v5`` is Ant-v5 without the contact forces in its observation
(``include_cfrc_ext_in_observation=False``: 27 entries, not 105) and without their cost in the
reward (``contact_cost_weight=0``). That is Ant-v3 as gym 0.17.3 ran it under MuJoCo 2.0, where
``cfrc_ext`` was never computed, so those 84 observation entries were always zero and the
contact cost with them (openai/gym#1541): the task of Tianshou's published MuJoCo table
(``examples/mujoco/README.md``, footnote 3: gym 0.17.3, mujoco-py 2.0.2.13).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "tdrl/AntNoContact-v5": (
        "Ant-v5",
        {"include_cfrc_ext_in_observation": False, "contact_cost_weight": 0.0},
    ),
}
"""variant id -> (the gymnasium task it changes, the keyword arguments it sets)."""


def register_variant_tasks() -> None:
    """Register every variant with gymnasium (idempotent), with its base task's entry point,
    episode limit and keyword arguments, then its own."""
    for env_id, (base_id, kwargs) in VARIANTS.items():
        if env_id in gym.registry:
            continue
        base = gym.spec(base_id)
        gym.register(
            env_id,
            entry_point=base.entry_point,
            max_episode_steps=base.max_episode_steps,
            kwargs={**base.kwargs, **kwargs},
        )
