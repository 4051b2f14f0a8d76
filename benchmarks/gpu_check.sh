#!/usr/bin/env bash
# The GPU checks, for a machine lent with a CUDA device and no package registry (the device
# tool: its image has python3 with torch, numpy and numba, not tdrl's other dependencies).
#
#   bash benchmarks/gpu_check.sh wheels    # here: download the missing wheels into .gpu/wheels
#   bash benchmarks/gpu_check.sh run       # there (carry .gpu): install them, compiled and
#                                          # captured steps, CUDA tests (run all: + estimators, collector)
#
# .gpu/ is not in git (add "/.gpu/" to .git/info/exclude). Outputs go to $OUT (default .gpu/out).
# Do not set MUJOCO_GL there: mujoco's EGL import fails without the GL loaders.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.gpu/out}
mkdir -p "$OUT" .gpu/wheels
if [ "${1:-run}" = wheels ]; then
    # The pinned stack's pure and cp312 wheels (the image's python is 3.12), no dependencies:
    # the image has the rest (torch, numpy, numba, matplotlib, tensorboard, pytest, xdist).
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 -d .gpu/wheels \
        tensordict==0.14.3 torchrl==0.14.1 gymnasium==1.4.0 mujoco==4.0.0 mujoco-core==4.0.0 \
        mujoco-studio==4.0.0 stable-baselines3==2.9.2 minari==0.5.4 tyro docstring-parser \
        typeguard shtab farama-notifications cloudpickle orjson pyvers hoptorch \
        importlib_metadata glfw pyopengl websockets minatar==1.0.15 pytz
    du -sh .gpu/wheels
    exit 0
fi
export PYTHONPATH=$PWD PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONWARNINGS=ignore
t0=$(date +%s)
stamp() { echo "== $1 at $(($(date +%s) - t0)) s" | tee -a "$OUT/log.txt"; }
python3 -m pip install -q --no-index --no-deps .gpu/wheels/*.whl >"$OUT/install.txt" 2>&1
{
    nvidia-smi -L
    python3 -c "import torch, tensordict, torchrl; print('torch', torch.__version__, \
torch.cuda.get_device_name(), 'tensordict', tensordict.__version__, 'torchrl', torchrl.__version__)"
} >>"$OUT/log.txt" 2>&1
stamp installed
# What each part may take is its timeout (the device tool allows 600 s a call): the compiled
# and captured steps first (end to end, then the update tables), then the CUDA tests.
TDRL_FAST=force timeout 210 python3 -u benchmarks/compiled_e2e.py --device cuda --quick \
    --timeout 100 >"$OUT/compiled_e2e.txt" 2>&1
stamp compiled_e2e
TDRL_FAST=force timeout 150 python3 -u benchmarks/updates.py --device cuda --compile \
    --sections sac td3 dqn >"$OUT/updates.txt" 2>&1
TDRL_FAST=force timeout 50 python3 -u benchmarks/updates.py --device cuda --compile --quick \
    --sections ppo >>"$OUT/updates.txt" 2>&1
stamp updates
# The device-parametrized tests (the `device` fixture) and the CUDA-only ones, with the fast
# paths off (the torch there is not the tested version: their plain twins run).
timeout 120 python3 -m pytest -q -k cuda -n 8 -p no:cacheprovider tests >"$OUT/tests_plain.txt" 2>&1
stamp tests_plain
if [ "${2:-}" = all ]; then  # the earlier figures: estimators, collector
    timeout 60 python3 -u benchmarks/estimators.py --device cuda >"$OUT/estimators.txt" 2>&1
    stamp estimators
    timeout 80 python3 -u benchmarks/collector.py --policy-device cuda --rounds 2 --frames 6000 \
        >"$OUT/collector.txt" 2>&1
    stamp collector
fi
