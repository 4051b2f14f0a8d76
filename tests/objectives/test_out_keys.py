"""Off-policy losses report what they return in ``out_keys`` (TorchRL's tools read them before
calling), and every ``"loss_*"`` name is a keys.py constant."""

from __future__ import annotations

import pytest
import torch
from offpolicy_data import transitions
from torch import nn

from tdrl import keys
from tdrl.modules import (
    CategoricalActor,
    DeterministicActor,
    EnsembleCritic,
    EnsembleMLP,
    QValueActor,
    StateActionCritic,
    TanhGaussianActor,
    mlp,
    q_mlp,
)
from tdrl.objectives import (
    DDPGLoss,
    DiscreteSACLoss,
    DQNLoss,
    REDQLoss,
    SACLoss,
    TD3Loss,
)

OBS, ACT, N = 3, 2, 4


def _losses() -> dict[str, tuple[nn.Module, bool]]:
    torch.manual_seed(0)
    q2 = lambda n=2: EnsembleCritic(EnsembleMLP(OBS + ACT, 1, (8,), num_members=n))  # noqa: E731
    discrete_q = EnsembleCritic(
        EnsembleMLP(OBS, N, (8,), num_members=2),
        in_keys=(keys.OBSERVATION,),
        out_key=keys.ACTION_VALUE,
    )
    return {
        "dqn": (DQNLoss(QValueActor(q_mlp(OBS, N, (8,)))), True),
        "ddpg": (
            DDPGLoss(
                DeterministicActor(mlp(OBS, ACT, (8,)), ACT),
                StateActionCritic(mlp(OBS + ACT, 1, (8,))),
            ),
            False,
        ),
        "td3": (TD3Loss(DeterministicActor(mlp(OBS, ACT, (8,)), ACT), q2()), False),
        "sac": (SACLoss(TanhGaussianActor(mlp(OBS, 2 * ACT, (8,)), ACT), q2()), False),
        "redq": (
            REDQLoss(TanhGaussianActor(mlp(OBS, 2 * ACT, (8,)), ACT), q2(4), num_qvalue_nets=4),
            False,
        ),
        "discrete_sac": (
            DiscreteSACLoss(CategoricalActor(mlp(OBS, N, (8,))), discrete_q, num_actions=N),
            True,
        ),
    }


@pytest.mark.parametrize("name", ["dqn", "ddpg", "td3", "sac", "redq", "discrete_sac"])
def test_out_keys_are_what_forward_returns(name: str) -> None:
    loss, discrete = _losses()[name]
    batch = transitions(6, OBS, ACT, num_actions=N if discrete else None)
    out = loss(batch)
    assert loss.out_keys, name
    assert set(out.keys()) == set(loss.out_keys)
    losses = [k for k in out.keys() if k.startswith(keys.LOSS_PREFIX) or k == keys.LOSS]
    known = {getattr(keys, n) for n in dir(keys) if n.startswith("LOSS")}
    assert set(losses) <= known  # every loss name is a keys.py constant


@pytest.mark.parametrize("name", ["dqn", "ddpg", "td3", "sac", "redq", "discrete_sac"])
def test_in_keys_are_entries_of_a_transition_batch(name: str) -> None:
    # The next state's action is the loss's own (sampled or greedy), never read: listing
    # ("next", "action") made minibatches(batch, n, in_keys=loss.in_keys) refuse every batch.
    from tdrl.data import minibatches

    loss, discrete = _losses()[name]
    batch = transitions(6, OBS, ACT, num_actions=N if discrete else None)
    assert ("next", "action") not in loss.in_keys
    assert set(loss.in_keys) <= set(batch.keys(True, True))
    (minibatch,) = minibatches(batch, 6, in_keys=loss.in_keys)
    assert set(minibatch.keys(True, True)) == set(loss.in_keys)
    loss(minibatch)  # the selection is all the loss needs


@pytest.mark.parametrize("name", ["dqn", "ddpg", "td3", "sac", "redq", "discrete_sac"])
def test_a_missing_next_state_entry_is_named_by_its_whole_key(name: str) -> None:
    # The networks read the next state from batch["next"] and saw "observation" missing there;
    # the error named 'observation', which the batch has (and, for the actors, "it has []").
    from tdrl.keyed import MissingKeyError

    loss, discrete = _losses()[name]
    batch = transitions(6, OBS, ACT, num_actions=N if discrete else None)
    with pytest.raises(MissingKeyError, match=r"missing key \('next', 'observation'\) in the"):
        loss(batch.exclude(("next", "observation")))
    with pytest.raises(MissingKeyError, match=r"missing key 'observation' in the batch") as err:
        loss(batch.exclude("observation"))
    assert err.value.key == "observation"
