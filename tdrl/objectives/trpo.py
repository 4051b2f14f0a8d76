"""Trust region policy optimization (Schulman et al. 2015, arXiv 1502.05477)."""

from __future__ import annotations

from tdrl.objectives.natural_gradient import NaturalPolicyGradient


class TRPOLoss(NaturalPolicyGradient):
    """TRPO: the NPG direction, then a backtracking line search that enforces the KL bound.

    ``actor_step(batch)`` computes the natural direction ``F^-1 g`` by conjugate gradient, the
    largest step with ``1/2 s^T F s = max_kl``, then tries fractions ``backtrack_ratio ** i``
    (``i < max_backtracks``) until the measured mean KL to the old policy is at most ``max_kl``
    and the surrogate ``E[pi/pi_old A]`` improved; if none qualifies the parameters are restored
    (step size 0). It is not a ``loss.backward()`` (see ``tdrl.objectives.natural_gradient``).
    ``forward(batch)`` returns ``"loss_critic"`` for the critic's optimizer. Defaults are
    Tianshou's (max_kl 0.01, damping 0.1, 10 CG iterations, backtrack ratio 0.8, 10 backtracks).
    ``actor_step`` reads ``"action"`` and ``"advantage"`` plus the actor's in-keys; ``forward``
    reads ``"value_target"`` plus the critic's in-keys.

    Args:
        actor_network: provides ``get_dist(td)``.
        critic_network: writes ``"state_value"``.
        max_kl: KL bound of a step.
        damping: added to the Fisher matrix.
        cg_iters: conjugate-gradient iterations.
        backtrack_ratio: step shrink factor of the line search.
        max_backtracks: line-search trials.
        critic_coeff: weight of the critic loss.
        loss_critic_type: ``"l2"``, ``"l1"`` or ``"smooth_l1"``.
        normalize_advantage: normalize advantages over the batch (Tianshou's default).

    Shapes:
        batch ``[*B]``; every output is a scalar.
    """

    line_search = True
