import pytest
import torch

from tdrl.trainers import setup
from tdrl.trainers.config import RunConfig

SUBNORMAL = 1e-40  # below float32's smallest normal, 1.18e-38


@pytest.mark.parametrize("flush", [True, False])
def test_setup_sets_subnormal_flushing(flush: bool) -> None:
    try:
        env, eval_env = setup(RunConfig(env_id="CartPole-v1", flush_denormal=flush))
        env.close()
        eval_env.close()
        product = torch.tensor([SUBNORMAL], dtype=torch.float32) * 1.0
        if flush:
            assert product.item() == 0.0
        else:
            assert product.item() == pytest.approx(SUBNORMAL, rel=1e-2)
    finally:
        torch.set_flush_denormal(False)  # torch's default, for the tests that follow
