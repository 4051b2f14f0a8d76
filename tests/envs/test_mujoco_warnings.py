"""MuJoCo's warnings reach Python's warnings (once per message), not the terminal, and no
MUJOCO_LOG.TXT is written into the working directory."""

from __future__ import annotations

import os
import subprocess
import sys

CODE = """
import warnings
import tdrl.envs
from tdrl.envs import make_vec_env, MuJoCoWarning
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("default")
    for _ in range(3):
        make_vec_env("HalfCheetah-v5", 2).close()
mujoco_warnings = [w for w in caught if issubclass(w.category, MuJoCoWarning)]
print("caught", len(mujoco_warnings), "settotalmass" in str(mujoco_warnings[0].message))
"""


def test_mujoco_warnings_are_python_warnings_once_and_no_log_file(tmp_path):
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    out = subprocess.run(
        [sys.executable, "-c", CODE], cwd=tmp_path, capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    # six envs created, one warning: Python's filter shows a message once per place
    assert "caught 1 True" in out.stdout
    assert "WARNING: compiler attribute" not in out.stderr  # MuJoCo's own print is gone
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
