"""MuJoCo's warnings through Python's ``warnings``, not the terminal and ``MUJOCO_LOG.TXT``.

MuJoCo prints its warnings (for instance "compiler attribute 'settotalmass' is deprecated", which
mujoco 4 says for several of gymnasium's MuJoCo XML files, once per env created) to the terminal
and appends them to ``MUJOCO_LOG.TXT`` in the working directory. tdrl installs MuJoCo's user
warning callback instead (``mujoco.set_mju_user_warning``; neither the print nor the file happen
then), which raises a :class:`MuJoCoWarning`: Python's default filter shows each message once
per process, ``warnings.filterwarnings`` and ``logging.captureWarnings`` work on it, and a run can
log it. A callback the user installed before importing tdrl is kept.
"""

from __future__ import annotations

import warnings

__all__ = ["MuJoCoWarning", "route_mujoco_warnings"]


class MuJoCoWarning(UserWarning):
    """A warning MuJoCo issued (``mju_warning``)."""


def _warn(message: str) -> None:
    warnings.warn(f"MuJoCo: {message}", MuJoCoWarning, stacklevel=2)


def route_mujoco_warnings() -> bool:
    """Install the callback (idempotent); False when mujoco is missing or a foreign callback is
    already installed."""
    try:
        import mujoco
    except ImportError:
        return False
    current = mujoco.get_mju_user_warning()
    if current is not None and current is not _warn:
        return False
    mujoco.set_mju_user_warning(_warn)
    return True
