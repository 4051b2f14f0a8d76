"""Natural policy gradient (Kakade 2001; the KL-normalized step of Rajeswaran et al. 2017)."""

from __future__ import annotations

from tdrl.objectives.natural_gradient import NaturalPolicyGradient


class NPGLoss(NaturalPolicyGradient):
    """NPG: the actor moves along ``F^-1 g`` by the step whose quadratic KL model is ``max_kl``.

    Use ``actor_step(batch)`` for the actor (conjugate gradient on Fisher-vector products, see
    ``tdrl.objectives.natural_gradient``: not a ``loss.backward()``) and ``forward(batch)``'s
    ``"loss_critic"`` with an optimizer for the critic (Tianshou runs 5 critic steps per batch).
    No line search: the measured KL matches ``max_kl`` up to the quadratic approximation, and
    damping makes it smaller. Tianshou's NPG takes a fixed step size (``trust_region_size`` 0.5)
    instead; the normalized step (Rajeswaran et al. 2017, arXiv 1703.02660) keeps the KL bounded
    without tuning. ``actor_step`` reads ``"action"`` and ``"advantage"`` plus the actor's
    in-keys; ``forward`` reads ``"value_target"`` plus the critic's in-keys.

    Args:
        actor_network: provides ``get_dist(td)``.
        critic_network: writes ``"state_value"``.
        max_kl: KL size of the step (Tianshou's TRPO default 0.01).
        damping: added to the Fisher matrix (Tianshou: 0.1).
        cg_iters: conjugate-gradient iterations (Tianshou: 10).
        backtrack_ratio: unused by NPG (TRPO's line search).
        max_backtracks: unused by NPG.
        critic_coeff: weight of the critic loss.
        loss_critic_type: ``"l2"``, ``"l1"`` or ``"smooth_l1"``.
        normalize_advantage: normalize advantages over the batch (Tianshou's default).

    Shapes:
        batch ``[*B]``; every output is a scalar.
    """

    line_search = False
