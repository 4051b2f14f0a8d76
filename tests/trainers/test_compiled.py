"""compiled_step: torch.compile'd and CUDA-graph-captured update steps give the eager step's
numbers (to a stated tolerance), and the settings that cannot work are refused by name."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from tdrl.modules import (
    CategoricalActor,
    DeterministicActor,
    EnsembleCritic,
    EnsembleMLP,
    QValueActor,
    TanhGaussianActor,
    ValueCritic,
    mlp,
)
from tdrl.objectives import (
    ClipPPOLoss,
    DQNLoss,
    SACLoss,
    SoftUpdate,
    TD3Loss,
    total_loss,
)
from tdrl.trainers import RunConfig, adam, compiled_step, optimizer_step
from tdrl.trainers.config import PPOConfig
from tests.rollouts import transitions

OBS, ACT, N_ACTIONS, HIDDEN = 5, 2, 3, [16, 16]
# Compiled kernels fuse and reorder float32 arithmetic: parameters after a few Adam steps agree
# with eager ones to about 1e-6; this leaves room for that and no more.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def critic() -> EnsembleCritic:
    return EnsembleCritic(EnsembleMLP(OBS + ACT, 1, HIDDEN, num_members=2))


LOSSES: dict[str, Callable[[], nn.Module]] = {
    "sac": lambda: SACLoss(TanhGaussianActor(mlp(OBS, 2 * ACT, HIDDEN), ACT), critic()),
    "td3": lambda: TD3Loss(DeterministicActor(mlp(OBS, ACT, HIDDEN), ACT), critic()),
    "dqn": lambda: DQNLoss(QValueActor(mlp(OBS, N_ACTIONS, HIDDEN))),
    "ppo": lambda: ClipPPOLoss(
        CategoricalActor(mlp(OBS, N_ACTIONS, HIDDEN)), ValueCritic(mlp(OBS, 1))
    ),
}


def make_step(algo: str, loss: nn.Module, optimizer: torch.optim.Optimizer) -> Callable:
    """The recipes' update step of ``algo``: the loss, one clipped (DQN, PPO) or plain gradient
    step, the soft target update (SAC, TD3); the outputs detached."""
    target = SoftUpdate(loss, tau=0.05) if algo in ("sac", "td3") else None
    max_grad_norm = {"dqn": 10.0, "ppo": 0.5}.get(algo)

    def update(sample: TensorDictBase) -> TensorDictBase:
        out = loss(sample)
        total = out["loss"] if algo == "dqn" else total_loss(out)  # DQN's one term: "loss"
        optimizer_step(total, optimizer, max_grad_norm=max_grad_norm)
        if target is not None:
            target.step()
        return out.detach()

    return update


def samples(algo: str, count: int, device: str) -> list[TensorDict]:
    if algo == "ppo":
        g = torch.Generator().manual_seed(1)
        return [
            TensorDict(
                observation=torch.randn(32, OBS, generator=g),
                action=torch.randint(N_ACTIONS, (32,), generator=g),
                action_log_prob=torch.randn(32, generator=g) - 1,
                advantage=torch.randn(32, 1, generator=g),
                value_target=torch.randn(32, 1, generator=g),
                batch_size=[32],
            ).to(device)
            for _ in range(count)
        ]
    return [
        transitions(32, OBS, num_actions=N_ACTIONS if algo == "dqn" else None, action_dim=ACT,
                    terminal_rate=0.1, seed=k).to(device)
        for k in range(count)
    ]  # fmt: skip


def run_steps(algo: str, device: str, steps: int, **options: object) -> tuple[list, list]:
    """(parameters, per-step outputs) after ``steps`` updates from the same start and samples."""
    torch.manual_seed(0)
    loss = LOSSES[algo]().to(device)
    optimizer = adam((loss.parameters(), 1e-2))
    update = compiled_step(make_step(algo, loss, optimizer), optimizer, **options)
    torch.manual_seed(1)
    outs = [update(sample) for sample in samples(algo, steps, device)]
    return [p.detach().clone() for p in loss.parameters()], outs


@pytest.fixture
def eager_random_ops() -> object:
    """Compiled random ops draw eager's numbers (inductor's own generator otherwise)."""
    import torch._inductor.config as inductor

    with inductor.patch(fallback_random=True):
        yield


def assert_same(ours: tuple[list, list], eager: tuple[list, list]) -> None:
    for p, q in zip(ours[0], eager[0], strict=True):
        torch.testing.assert_close(p, q, **TOLERANCE)
    for out, expected in zip(ours[1], eager[1], strict=True):
        for key in ("loss", "loss_qvalue", "loss_objective", "loss_critic"):
            if key in expected.keys():
                torch.testing.assert_close(out[key], expected[key], **TOLERANCE)


def test_compiled_dqn_step_matches_eager() -> None:
    """The smoke of the default set: DQN's step (clipped gradients) compiled, 4 steps."""
    assert_same(run_steps("dqn", "cpu", 4, compile=True), run_steps("dqn", "cpu", 4))


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac", "td3", "ppo"])
def test_compiled_step_matches_eager(algo: str, eager_random_ops: object) -> None:
    assert_same(run_steps(algo, "cpu", 4, compile=True), run_steps(algo, "cpu", 4))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("algo", ["sac", "td3", "dqn", "ppo"])
@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_cudagraph_step_matches_eager_cuda(algo: str, compile: bool, eager_random_ops) -> None:
    """Captured after 2 warm-up steps, replayed for the rest: the eager step's numbers (random
    ops too: the graph replays the same generator's stream)."""
    captured = run_steps(algo, "cuda", 5, cudagraphs=True, compile=compile)
    assert_same(captured, run_steps(algo, "cuda", 5))


def test_bad_settings_are_named() -> None:
    loss = DQNLoss(QValueActor(mlp(OBS, N_ACTIONS, HIDDEN)))
    optimizer = adam((loss.parameters(), 1e-3))
    with pytest.raises(ValueError, match="compile mode must be one of .*'fastest'"):
        compiled_step(lambda td: td, optimizer, compile=True, mode="fastest")
    with pytest.raises(ValueError, match="parameters are on cpu; a CUDA graph"):
        compiled_step(lambda td: td, optimizer, cudagraphs=True)
    with pytest.raises(ValueError, match="pass the step's optimizers"):
        compiled_step(lambda td: td, cudagraphs=True)
    sgd = torch.optim.SGD(loss.parameters(), lr=0.1)
    if torch.cuda.is_available():
        loss.cuda()
        with pytest.raises(ValueError, match="SGD has no capturable mode"):
            compiled_step(lambda td: td, sgd, cudagraphs=True)
    with pytest.raises(ValueError, match="--cudagraphs captures .* --device is cpu"):
        RunConfig(device="cpu", cudagraphs=True)
    with pytest.raises(ValueError, match="'reduce-overhead' captures CUDA graphs of its own"):
        compiled_step(lambda td: td, optimizer, compile=True, mode="reduce-overhead",
                      cudagraphs=True)  # fmt: skip
    with pytest.raises(ValueError, match="--compile-mode max-autotune needs --compile"):
        RunConfig(compile_mode="max-autotune")
    ppo = PPOConfig()
    with pytest.raises(ValueError, match="--minibatch-size 64 must divide --frames-per-batch 100"):
        ppo.check_compiled(100, None, cudagraphs=True)
    ppo.check_compiled(100, None, cudagraphs=False)  # compiled alone takes a short last one
    # a recurrent network's sequence mode reads where episodes start on the host
    with pytest.raises(ValueError, match="--cudagraphs: --recurrent networks cut their sequences"):
        PPOConfig(minibatch_size=128).check_compiled(256, 32, cudagraphs=True)
    PPOConfig(minibatch_size=96).check_compiled(256, 32, cudagraphs=False)
    for cudagraphs, flag in ((False, "--compile"), (True, "--cudagraphs")):
        with pytest.raises(ValueError, match=f"{flag}: --clip-decay"):
            PPOConfig(clip_decay=True).check_compiled(128, None, cudagraphs=cudagraphs)
    ppo.check_compiled(128, None, cudagraphs=True)


def test_off_switch_returns_the_step_itself() -> None:
    def step(td: TensorDictBase) -> TensorDictBase:
        return td

    assert compiled_step(step) is step
    assert copy.copy(RunConfig().compile_options()) == {
        "compile": False, "mode": "default", "cudagraphs": False,
    }  # fmt: skip


def test_two_captured_steps_of_one_optimizer_share_its_lr_tensor() -> None:
    """A second step's setup (SAC's critic-only step) keeps the lr tensor the first captured, so
    a schedule's fill_ reaches both graphs."""
    from tdrl.trainers.compiled import _make_capturable

    optimizer = adam((nn.Linear(2, 2).parameters(), 1e-3))
    _make_capturable((optimizer,), torch.device("cpu"))
    lr = optimizer.param_groups[0]["lr"]
    _make_capturable((optimizer,), torch.device("cpu"))
    assert optimizer.param_groups[0]["lr"] is lr and float(lr) == pytest.approx(1e-3)
    assert optimizer.param_groups[0]["capturable"]
