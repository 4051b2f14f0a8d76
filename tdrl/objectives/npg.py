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
    without tuning. Their step ``sqrt(delta / g^T F^-1 g)`` puts the quadratic KL model at
    ``delta / 2``; this one (TRPO's, Schulman et al. 2015, appendix C) at ``max_kl``, so
    ``max_kl = delta / 2`` for a ``delta`` taken from their paper. ``actor_step`` reads
    ``"action"`` and ``"advantage"`` plus the actor's in-keys; ``forward`` reads
    ``"value_target"`` plus the critic's in-keys.

    Args and shapes: as :class:`~tdrl.objectives.TRPOLoss`; ``backtrack_ratio`` and
    ``max_backtracks`` (its line search) are unused.
    """

    line_search = False
