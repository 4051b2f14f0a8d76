"""Natural-gradient machinery of NPG and TRPO: Fisher-vector products, conjugate gradient, steps.

The actor update of NPG (Kakade 2001) and TRPO (Schulman et al. 2015, arXiv 1502.05477) is not
``loss.backward(); optimizer.step()``: it solves ``F s = g`` for the natural direction with
conjugate gradient, where ``g`` is the surrogate's gradient and ``F`` the Fisher matrix (the
Hessian of the mean KL between the old and the current policy, applied to vectors by double
backpropagation, never formed), scales the step so that the quadratic KL model
``1/2 s^T F s`` equals ``max_kl``, and writes the parameters directly. TRPO then backtracks
until the measured KL is within ``max_kl`` and the surrogate improved. So the losses expose
``actor_step(batch)`` for the actor and a plain ``"loss_critic"`` for the critic's optimizer.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch.distributions import Distribution, kl_divergence

from tdrl.keyed import require
from tdrl.keys import ENTROPY, LOSS_CRITIC
from tdrl.objectives.common import OnPolicyLoss, entropy_of


def flat_grad(
    output: torch.Tensor,
    params: Sequence[torch.Tensor],
    *,
    retain_graph: bool | None = None,
    create_graph: bool = False,
) -> torch.Tensor:
    """``d output / d params`` as one vector (zeros for parameters ``output`` does not use)."""
    grads = torch.autograd.grad(
        output, params, retain_graph=retain_graph, create_graph=create_graph, allow_unused=True
    )
    return torch.cat(
        [
            (torch.zeros_like(p) if g is None else g).reshape(-1)
            for g, p in zip(grads, params, strict=True)
        ]
    )


def write_parameters(vector: torch.Tensor, params: Sequence[torch.Tensor]) -> None:
    """Copy consecutive slices of ``vector`` into ``params``, in place.

    Unlike ``torch.nn.utils.vector_to_parameters``, which rebinds every ``param.data`` to a view
    into ``vector``, each parameter keeps its own storage: optimizers and checkpoints see the same
    tensors, and vectorized kernels see the same memory alignment as in a freshly loaded model (a
    view at an unaligned offset rounds differently, ~1e-8 relative, so a run resumed from a
    checkpoint drifted from an uninterrupted one).

    Shapes:
        ``vector``: ``[sum of numels]``.
    """
    offset = 0
    for param in params:
        n = param.numel()
        param.data.copy_(vector[offset : offset + n].view_as(param))
        offset += n
    if offset != vector.numel():
        raise ValueError(f"vector has {vector.numel()} elements, the parameters {offset}")


def conjugate_gradient(
    matvec: Callable[[torch.Tensor], torch.Tensor],
    b: torch.Tensor,
    iters: int = 10,
    residual_tol: float = 1e-10,
) -> torch.Tensor:
    """Approximately solve ``A x = b`` for symmetric positive-definite ``A`` given ``x -> A x``.

    Shapes:
        ``b``: ``[n]`` -> ``[n]``.
    """
    x = torch.zeros_like(b)
    r = b.clone()
    p = b.clone()
    r_dot = r.dot(r)
    for _ in range(iters):
        if r_dot < residual_tol:
            break
        ap = matvec(p)
        alpha = r_dot / p.dot(ap)
        x += alpha * p
        r -= alpha * ap
        new_r_dot = r.dot(r)
        p = r + (new_r_dot / r_dot) * p
        r_dot = new_r_dot
    return x


def mean_kl(
    old: Distribution, new: Distribution, old_log_prob: torch.Tensor, log_prob: torch.Tensor
):
    """Mean ``KL(old || new)``: analytic where registered, else the sample estimate.

    The fallback ``E[log old(a) - log new(a)]`` over the batch actions (drawn from the old policy
    when the batch is fresh) has the Fisher matrix as its expected Hessian at ``new = old``.
    """
    try:
        return kl_divergence(old, new).mean()
    except NotImplementedError:
        return (old_log_prob - log_prob).mean()


class NaturalPolicyGradient(OnPolicyLoss):
    """Shared body of ``NPGLoss`` and ``TRPOLoss``: critic loss in ``forward``, ``actor_step``."""

    line_search = False

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        critic_network: TensorDictModuleBase | None = None,
        *,
        max_kl: float = 0.01,
        damping: float = 0.1,
        cg_iters: int = 10,
        backtrack_ratio: float = 0.8,
        max_backtracks: int = 10,
        critic_coeff: float = 1.0,
        loss_critic_type: str = "l2",
        normalize_advantage: bool = True,
    ) -> None:
        if not (max_kl > 0 and damping >= 0) or cg_iters < 1:  # NaN fails the first test
            raise ValueError(
                f"need max_kl > 0, damping >= 0, cg_iters >= 1; got {max_kl}, {damping}, {cg_iters}"
            )
        if not 0 < backtrack_ratio < 1 or max_backtracks < 1:
            raise ValueError(
                f"need 0 < backtrack_ratio < 1 and max_backtracks >= 1; got {backtrack_ratio}, "
                f"{max_backtracks}"
            )
        super().__init__(
            actor_network, critic_network, critic_coeff=critic_coeff,
            loss_critic_type=loss_critic_type, normalize_advantage=normalize_advantage,
        )  # fmt: skip
        self.max_kl = max_kl
        self.damping = damping
        self.cg_iters = cg_iters
        self.backtrack_ratio = backtrack_ratio
        self.max_backtracks = max_backtracks

    # The step is taken from the current policy, whose log-probs it recomputes.
    reads_sample_log_prob = False

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """The critic loss (``"loss_critic"``) for the critic's optimizer; the actor is not here."""
        if self.critic_network is None:
            raise RuntimeError(f"{type(self).__name__} has no critic: use actor_step only")
        self._check_batch(tensordict)
        return self._output({LOSS_CRITIC: self._critic_loss(tensordict)[0]})

    def _surrogate(
        self,
        tensordict: TensorDictBase,
        action: torch.Tensor,
        old_log_prob: torch.Tensor,
        advantage: torch.Tensor,
    ) -> tuple[torch.Tensor, Distribution, torch.Tensor]:
        dist = self._dist(tensordict, check=False)  # actor_step checked it
        log_prob = dist.log_prob(action)
        return ((log_prob - old_log_prob).exp() * advantage).mean(), dist, log_prob

    def actor_step(self, tensordict: TensorDictBase) -> TensorDict:
        """One natural-gradient step of the actor on ``tensordict``; returns diagnostics.

        Returns ``"kl"`` (measured mean KL between the policies before and after the step),
        ``"step_size"`` (the fraction of the full step taken; 0 when TRPO's line search
        failed and the parameters were restored), ``"surrogate_improvement"`` and ``"entropy"``.
        """
        owner = type(self).__name__
        keys = self.tensor_keys
        params = [p for p in self.actor_network.parameters() if p.requires_grad]
        self._check_batch(tensordict)
        action = require(tensordict, keys.action, owner)
        with torch.no_grad():
            # A frozen copy: a distribution may alias the actor's parameters (a state-independent
            # log-std), which the step below overwrites.
            old_dist = copy.deepcopy(self.actor_network).get_dist(
                tensordict.select(*self.actor_network.in_keys)
            )
            old_log_prob = old_dist.log_prob(action)
        advantage = self._advantage(tensordict, old_log_prob.shape)
        surrogate, dist, log_prob = self._surrogate(tensordict, action, old_log_prob, advantage)
        grad = flat_grad(surrogate, params, retain_graph=True)
        kl = mean_kl(old_dist, dist, old_log_prob, log_prob)
        kl_grad = flat_grad(kl, params, create_graph=True)

        def fisher_vector(v: torch.Tensor) -> torch.Tensor:
            # F v = d/dtheta (dKL/dtheta . v): one extra backward, F never formed; damping keeps
            # CG well-posed where F is singular (Tianshou's default 0.1).
            return flat_grad(kl_grad.dot(v), params, retain_graph=True) + self.damping * v

        direction = conjugate_gradient(fisher_vector, grad.detach(), self.cg_iters)
        curvature = direction.dot(fisher_vector(direction)).detach()
        with torch.no_grad():
            entropy = entropy_of(old_dist).mean()
        if not torch.isfinite(curvature) or curvature <= 0 or not bool(grad.any()):
            zero = torch.zeros(())
            return self._output(
                {"kl": zero, "step_size": zero, "surrogate_improvement": zero, ENTROPY: entropy}
            )
        # Largest step along the direction whose quadratic KL model equals max_kl.
        full_step = direction * torch.sqrt(2.0 * self.max_kl / curvature)
        # reshape, not torch's parameters_to_vector (a view): a CNN's channels-last weights
        old_params = torch.cat([p.detach().reshape(-1) for p in params])
        fractions = [self.backtrack_ratio**i for i in range(self.max_backtracks)]
        with torch.no_grad():
            for fraction in fractions if self.line_search else [1.0]:
                write_parameters(old_params + fraction * full_step, params)
                new_surrogate, new_dist, new_log_prob = self._surrogate(
                    tensordict, action, old_log_prob, advantage
                )
                new_kl = mean_kl(old_dist, new_dist, old_log_prob, new_log_prob)
                improvement = new_surrogate - surrogate.detach()
                if not self.line_search or (new_kl <= self.max_kl and improvement > 0):
                    break
            else:
                write_parameters(old_params, params)
                fraction, new_kl, improvement = 0.0, torch.zeros(()), torch.zeros(())
        return self._output(
            {
                "kl": new_kl.detach(),
                "step_size": torch.tensor(float(fraction)),
                "surrogate_improvement": improvement.detach(),
                ENTROPY: entropy,
            }
        )
