"""Values checked once, at the door: gamma and lambda finite in [0, 1] in every estimator, op,
buffer and loss; an empty time dimension is an error, not a silent empty result."""

from __future__ import annotations

import math

import pytest
import torch

from tdrl.data import ReplayBuffer
from tdrl.estimators import GAE, TD0Estimator, TD1Estimator, TDLambdaEstimator, VTrace
from tdrl.ops import InputError, gae, td0_return, td_lambda_return, vtrace

BAD = [1.5, -0.5, math.nan, math.inf]


@pytest.mark.parametrize("gamma", BAD)
def test_estimators_refuse_a_bad_gamma(gamma):
    for cls in (GAE, TDLambdaEstimator):
        with pytest.raises(ValueError, match="gamma"):
            cls(gamma=gamma, lmbda=0.9, value_network=None)
    for cls in (TD0Estimator, TD1Estimator, VTrace):
        with pytest.raises(ValueError, match="gamma"):
            cls(gamma=gamma, value_network=None)


@pytest.mark.parametrize("lmbda", [2.0, -0.1, math.nan])
def test_estimators_refuse_a_bad_lambda(lmbda):
    for cls in (GAE, TDLambdaEstimator):
        with pytest.raises(ValueError, match="lmbda"):
            cls(gamma=0.99, lmbda=lmbda, value_network=None)


def _inputs(T: int = 5):
    r = torch.randn(2, T, 1)
    flag = torch.zeros(2, T, 1, dtype=torch.bool)
    return r, torch.randn(2, T, 1), torch.randn(2, T, 1), flag


@pytest.mark.parametrize(
    "gamma", [*BAD, torch.tensor([0.9, math.nan]).view(1, 2, 1).expand(2, 2, 1)]
)
def test_ops_refuse_a_bad_gamma_naming_it(gamma):
    r, v, nv, flag = _inputs(2)
    with pytest.raises(InputError, match="gamma"):
        gae(r, v, nv, flag, flag, gamma=gamma, lmbda=0.9)
    with pytest.raises(InputError, match="gamma"):
        td0_return(r, nv, flag, flag, gamma=gamma)
    with pytest.raises(InputError, match="lmbda"):
        td_lambda_return(r, nv, flag, flag, gamma=0.9, lmbda=1.5)
    with pytest.raises(InputError, match="lmbda"):
        vtrace(r, v, nv, torch.zeros(2, 2, 1), flag, flag, gamma=0.9, lmbda=math.nan)


def test_an_empty_time_dimension_is_an_error():
    r, v, nv, flag = _inputs(0)
    with pytest.raises(InputError, match="time dimension .* is empty"):
        gae(r, v, nv, flag, flag, gamma=0.9, lmbda=0.9)


@pytest.mark.parametrize("gamma", BAD)
def test_buffers_refuse_a_bad_gamma(gamma):
    with pytest.raises(InputError, match="gamma"):
        ReplayBuffer(10, n_steps=3, gamma=gamma)
