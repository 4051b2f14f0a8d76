#!/usr/bin/env bash
# The GPU checks, for a machine lent with a CUDA device and no package registry (the device
# tool: its image has python3 with torch, numpy and numba, not tdrl's other dependencies).
#
#   bash benchmarks/gpu_check.sh wheels    # here: the missing wheels into .gpu/ and .gpu_so/
#   bash benchmarks/gpu_check.sh so        # there, 1st call (carry .gpu_so): keep warp.so's 1st part
#   bash benchmarks/gpu_check.sh warp      # there, 2nd call (carry .gpu): MuJoCo Warp's worlds,
#                                          #   throughput and PPO on Hopper, beside the CPU envs
#   bash benchmarks/gpu_check.sh run       # there (carry .gpu): CUDA tests, whole runs beside
#                                          #   plain-PyTorch peers (PARTS=...; run all: + the
#                                          #   estimators and collector tables)
#
# .gpu/ and .gpu_so/ are not in git (add "/.gpu/" and "/.gpu_so/" to .git/info/exclude). A call
# carries at most 64 MiB, and warp-lang's wheel is 149 MB (its warp.so: 299 MB, 78 MB as xz):
# warp.so travels as xz in two parts, the first in a call of its own. Outputs go to $OUT
# (default .gpu/out). Do not set MUJOCO_GL there: mujoco's EGL import fails without GL loaders.
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
        stable-baselines3==2.9.2 minari==0.5.4 tyro docstring-parser \
        typeguard shtab farama-notifications cloudpickle orjson pyvers hoptorch \
        importlib_metadata glfw websockets minatar==1.0.15 pytz mujoco-warp==4.0.0
    # warp-lang: its Python files (no CPU compiler, examples or tests: CUDA kernels compile
    # with the NVRTC inside warp.so), and warp.so as xz in two parts
    rm -rf .gpu/warp_tmp && mkdir -p .gpu/warp_tmp .gpu_so
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_28_x86_64 -d .gpu/warp_tmp warp-lang==1.19.0
    (cd .gpu/warp_tmp && unzip -q ./*.whl && rm ./*.whl &&
        python -c "import lzma, shutil; shutil.copyfileobj(open('warp/bin/warp.so', 'rb'), \
lzma.open('warp.so.xz', 'wb', preset=9))" &&
        rm -rf warp/bin/warp.so warp/bin/warp-clang.so warp/examples warp/tests &&
        zip -qr ../warp_py.zip warp warp_lang-*.dist-info)
    split -b 50M .gpu/warp_tmp/warp.so.xz .gpu/warp_tmp/warp.so.xz.
    mv .gpu/warp_tmp/warp.so.xz.aa .gpu_so/ && mv .gpu/warp_tmp/warp.so.xz.ab .gpu/
    rm -rf .gpu/warp_tmp
    du -sh .gpu .gpu_so
    exit 0
fi
if [ "${1:-run}" = so ]; then  # the first part of warp.so, kept on the machine for `warp`
    mkdir -p /root/wso && cp .gpu_so/warp.so.xz.aa /root/wso/ && ls -la /root/wso
    exit 0
fi
export PYTHONPATH=$PWD PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONWARNINGS=ignore
t0=$(date +%s)
stamp() { echo "== $1 at $(($(date +%s) - t0)) s" | tee -a "$OUT/log.txt"; }
python3 -m pip install -q --no-index --no-deps .gpu/wheels/*.whl >"$OUT/install.txt" 2>&1
if [ "${1:-run}" = warp ]; then
    mkdir -p /tmp/site && python3 -c "import zipfile; zipfile.ZipFile('.gpu/warp_py.zip').extractall('/tmp/site')"
    cat /root/wso/warp.so.xz.aa .gpu/warp.so.xz.ab | python3 -c "import lzma, shutil, sys; \
shutil.copyfileobj(lzma.open(sys.stdin.buffer), open('/tmp/site/warp/bin/warp.so', 'wb'))"
fi
if [ -f /tmp/site/warp/bin/warp.so ]; then  # warp, unpacked by an earlier call on this machine
    export PYTHONPATH=$PWD:/tmp/site
fi
{
    nvidia-smi -L
    python3 -c "import torch, tensordict, torchrl; print('torch', torch.__version__, \
torch.cuda.get_device_name(), 'tensordict', tensordict.__version__, 'torchrl', torchrl.__version__)"
} >>"$OUT/log.txt" 2>&1
stamp installed
if [ "${1:-run}" = warp ]; then
    # env steps/s: gymnasium's CPU envs and tdrl's Collector beside the worlds (the first call
    # compiles Warp's CUDA kernels for the model), then PPO on Hopper both ways, side by side
    # for the same wall time (1024 worlds on the GPU; Tianshou's 8 CPU envs, policy on the CPU)
    timeout 280 python3 -u benchmarks/warp_envs.py --device cuda --worlds 1024 4096 16384 \
        --seconds 2 --rounds 1 >"$OUT/warp_envs.txt" 2>&1
    stamp warp_envs
    timeout 200 python3 -u recipes/ppo.py --env-backend mujoco_warp --device cuda \
        --num-envs 1024 --frames-per-batch 32768 --minibatch-size 4096 --epochs 5 \
        --total-frames 8000000 --eval-every 500000 --eval-episodes 5 --no-progress \
        --log-dir /tmp/ppo_warp >"$OUT/ppo_warp.txt" 2>&1 &
    if [ -z "${SKIP_CPU_PPO:-}" ]; then
        timeout 200 python3 -u recipes/ppo.py --device cpu --total-frames 1000000 \
            --eval-every 25000 --eval-episodes 5 --no-progress --log-dir /tmp/ppo_cpu \
            >"$OUT/ppo_cpu.txt" 2>&1 &
    fi
    wait
    for run in ppo_warp ppo_cpu; do
        { echo "== $run eval.csv"; cat /tmp/$run/eval.csv; echo "== $run train.csv (last rows)";
          tail -n 5 /tmp/$run/train.csv; } >>"$OUT/ppo_curves.txt" 2>&1
    done
    stamp ppo
    exit 0
fi
# What each part may take is its timeout (the device tool allows 600 s a call); PARTS picks them
# (default "tests e2e"): the CUDA tests (the device-parametrized ones, `device` fixture, and the
# CUDA-only ones, fast paths off: the torch there is not the tested version, so their plain twins
# run), whole runs of SAC/TD3/PPO beside their plain-PyTorch peers in every mode, the update tables.
for part in ${PARTS:-tests e2e}; do
    case $part in
    tests) timeout 200 python3 -m pytest -q -k cuda -n 8 -p no:cacheprovider tests \
        >"$OUT/tests_plain.txt" 2>&1 ;;
    e2e) TDRL_FAST=force timeout 380 python3 -u benchmarks/compiled_e2e.py --device cuda --quick \
        --modes eager compiled+graphs --peers --timeout 60 >"$OUT/compiled_e2e.txt" 2>&1 ;;
    updates) TDRL_FAST=force timeout 150 python3 -u benchmarks/updates.py --device cuda --compile \
        --sections ${SECTIONS:-sac td3 dqn} >"$OUT/updates.txt" 2>&1 ;;
    esac
    stamp "$part"
done
if [ "${2:-}" = all ]; then  # the earlier figures: estimators, collector
    timeout 60 python3 -u benchmarks/estimators.py --device cuda >"$OUT/estimators.txt" 2>&1
    stamp estimators
    timeout 80 python3 -u benchmarks/collector.py --policy-device cuda --rounds 2 --frames 6000 \
        >"$OUT/collector.txt" 2>&1
    stamp collector
fi
