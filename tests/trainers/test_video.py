"""record_video plays the policy as evaluate does: the env made with the evaluation's kwargs
(frame_stack), uint8 frames, "is_init" and the recurrent state carried between steps."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential

from tdrl.modules import CategoricalActor, LSTMModule, MinAtarCNN, mlp


def test_video_of_a_recurrent_pixel_policy_on_stacked_minatar_frames(tmp_path):
    pytest.importorskip("minatar")
    imageio = pytest.importorskip("imageio.v2")
    pytest.importorskip("imageio_ffmpeg")
    from tdrl.trainers.video import record_video

    torch.manual_seed(0)
    seen: list[TensorDictBase] = []

    class Spy(TensorDictModuleBase):
        in_keys, out_keys = ["observation"], []

        def forward(self, td: TensorDictBase) -> TensorDictBase:
            seen.append(td.clone())
            return td

    policy = TensorDictSequential(
        Spy(),
        TensorDictModule(MinAtarCNN(8, 16), ["observation"], ["embed"]),  # 2 stacked frames
        LSTMModule(16, 8, in_key="embed", out_key="hidden"),
        CategoricalActor(mlp(8, 3), in_key="hidden"),
    )
    path = tmp_path / "final.mp4"
    frames = record_video(
        "MinAtar/Breakout-v1", policy, path, seed=3, max_steps=5, env_kwargs={"frame_stack": 2}
    )
    assert frames == len(imageio.mimread(path, memtest=False)) == len(seen) + 1 == 6
    first, later = seen[0], seen[-1]
    assert first["observation"].dtype == torch.uint8
    assert first["observation"].shape == (1, 8, 10, 10)
    assert bool(first["is_init"].all()) and not bool(later["is_init"].any())
    state = later["recurrent_state_h"]
    assert state.shape == (1, 1, 8) and bool(state.abs().sum() > 0)  # carried from step to step


def test_frames_are_written_as_uint8_whatever_the_env_renders():
    import numpy as np

    from tdrl.trainers.video import uint8_frame

    unit = np.array([[[0.0, 0.5, 1.0]]])  # MinAtar renders float64 in [0, 1]
    assert uint8_frame(unit).dtype == np.uint8
    assert uint8_frame(unit).tolist() == [[[0, 128, 255]]]
    wide = np.array([[[-3.0, 17.4, 300.0]]])  # floats in pixel units: rounded and clipped
    assert uint8_frame(wide).tolist() == [[[0, 17, 255]]]
    pixels = np.arange(6, dtype=np.uint8).reshape(1, 2, 3)
    assert uint8_frame(pixels) is pixels
