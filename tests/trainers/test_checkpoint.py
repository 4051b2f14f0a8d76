import random

import numpy as np
import pytest
import torch

from tdrl.trainers import load_checkpoint, save_checkpoint


def test_roundtrip_restores_modules_optimizers_and_rng(tmp_path):
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.randn(4, 3)).sum().backward()
    opt.step()
    path = save_checkpoint(tmp_path / "ckpt.pt", model=net, optim=opt, step=123)
    expected = (random.random(), np.random.rand(), torch.rand(3))

    net2 = torch.nn.Linear(3, 2)
    opt2 = torch.optim.Adam(net2.parameters(), lr=1e-3)
    payload = load_checkpoint(path, model=net2, optim=opt2)
    assert payload["step"] == 123
    for p, q in zip(net.parameters(), net2.parameters(), strict=True):
        assert torch.equal(p, q)
    assert opt2.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    got = (random.random(), np.random.rand(), torch.rand(3))
    assert got[0] == expected[0] and got[1] == expected[1] and torch.equal(got[2], expected[2])
    assert not (tmp_path / "ckpt.pt.tmp").exists()


def test_missing_entry_and_file_are_named(tmp_path):
    path = save_checkpoint(tmp_path / "c.pt", step=1)
    with pytest.raises(KeyError, match="'model'"):
        load_checkpoint(path, model=torch.nn.Linear(1, 1))
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        load_checkpoint(tmp_path / "nope.pt")
