"""The offline RL table: tdrl's six offline algorithms on tdrl-made D4RL-style
datasets, beside TorchRL's CQL and IQL and Tianshou's CQL trained on the same data.

A cell is (library, algorithm, dataset, seed, gradient-step budget, evaluation protocol): a
``mujoco_table.Cell`` whose ``task`` is the Minari dataset id and whose ``steps`` are gradient
steps. The JSON lines (``docs/benchmarks/offline_table.jsonl``: one fsynced line per finished
cell, done cells skipped on a rerun), ``--jobs``, the subprocess per cell with one torch thread
and the grouping of the lines are ``benchmarks/mujoco_table.py``'s; this file adds the cells,
the two peer libraries, the dataset step and the page (``offline_table.md``).

Datasets (``--make-datasets``, each step skipped when its output exists; Minari format under
``MINARI_DATASETS_PATH``, default ``/tmp/tdrl_offline_table/minari``; source runs in
``/tmp/tdrl_offline_table/sources``), D4RL's recipe (Fu et al. 2020, arXiv 2004.07219) with
tdrl's own agents: an expert run (``recipes/ppo.py``'s defaults, 1M steps; Hopper: stopped at
return 3300),
a medium run (``recipes/sac.py``'s defaults stopped at the first evaluation >= 0.3 x the
expert's return), then ``recipes/make_dataset.py``: ``expert`` (100k deterministic steps of
the expert), ``medium`` (100k stochastic steps of the medium policy), ``medium-replay`` (the
medium run's whole replay buffer) and ``random`` (100k uniform random steps). Every dataset
stores D4RL's references: ``ref_min_score`` the mean return of 100 uniform random episodes,
``ref_max_score`` the expert run's final deterministic evaluation (10 episodes); a score is
``100 * (return - ref_min) / (ref_max - ref_min)``.

tdrl: ``recipes/offline.py``'s ``main(configure(Config, ...))`` with its defaults except the
algorithm, dataset, its env, seed, budget, evaluation protocol and run folder (progress bar off).
TorchRL 0.14.1: ``CQLLoss`` and ``IQLLoss`` with ``sota-implementations/{cql,iql}/
offline_config.yaml`` of pytorch/rl at ae9719f17b15 (256x256 ReLU MLPs, a TanhNormal actor
with NormalParamExtractor(biased_softplus_1.0, scale_lb 0.1), L2 losses, gamma 0.99, tau 0.005,
batch 256; CQL: Adam 3e-4 for the actor, the critic, alpha (actor lr) and alpha' (critic lr),
temperature 1, min_q_weight 1, 10 random actions, stochastic backup, Lagrange threshold 5, the
actor's BC loss for the first 4% of the steps (their policy_eval_start 40k of 1M); IQL: Adam
3e-4 for actor, critic and value, temperature 3, expectile 0.7), their update functions'
order of operations, TorchRL's own replay buffer (LazyTensorStorage, sampling without
replacement as their offline buffer does). Tianshou 2.0.1: ``tianshou.algorithm.CQL`` with
thu-ml/tianshou ``examples/offline/d4rl_cql.py`` at f2402056b03a (its Net/actor/critics
256x256, actor lr 1e-4, critics 3e-4, auto alpha lr 1e-4, CQL alpha lr 3e-4, weight 1,
temperature 1, Lagrange threshold 10, calibrated (Cal-QL) on, batch 256, tau 0.005, gamma
0.99), ``algorithm.process_buffer`` then ``algorithm.update`` per step as its OfflineTrainer
does, a ``ReplayBuffer.from_data`` of the same transitions (with the dataset's truncations,
where its example passes zeros). Tianshou has no IQL. Peers run in torch's default float mode
(tdrl's recipes flush subnormals).

Evaluation, the same for all: ``tdrl.collectors.evaluate``, deterministic (each library's own
deterministic action: the squashed mean), 10 episodes on a separate env of 5 copies reset with
seed + 10,000 every time, every ``eval_every`` gradient steps and at the end.

Hopper-v5's v0 datasets as made here (commit bf58452): the expert run is the PPO run of
``docs/benchmarks/gail_Hopper-v5.txt`` (the same command; stopped at 561,152 steps, final
evaluation 3312.3 = ref_max); random: 17.2 (ref_min). The medium run (SAC seed 0) stopped at
44k steps: its evaluation jumped from 504 at 43k to 1829 at 44k (55% of the expert; with
evaluations every 5k it jumped from 593 at 65k to 2846 at 70k, hence the 1k). Datasets: expert
100k steps, 96 complete episodes of 3311.2 +- 3.0; medium 100k steps, 220 complete episodes of
1092.8 +- 652.9 (score 32.6: a third of the expert, as D4RL's); medium-replay 44k steps, 720
episodes; random 100k steps, 4475 complete episodes of 17.7 +- 17.7. 335 s for the medium run.
Hopper-v5's v1 datasets (commit d32c27e, the same command, new source runs): the expert
stopped at 260,096 steps (evaluation 3461.8 = ref_max; 1563 s at nice 10 beside two other
runs); random 17.2. The medium run overshot: its evaluation went from 969 (28% of the
expert) at 47k steps to 2356 (68%) at 48k, so v1's medium data score 69.9 (121 complete
episodes of 2426.0 +- 704.9), twice D4RL's medium, and its medium-replay holds 48k steps (724
episodes); expert 96 complete episodes of 3466.5 +- 18.8.
HalfCheetah-v5's (commit 7f84b7d): the expert is PPO seed 0
at 1M steps (the recipe's defaults of 8eb6ebc; final evaluation 7060.8 = ref_max, 1915 s at
nice 10); random: -268.7 (ref_min); the medium SAC run stopped at 24k steps (evaluation 1509 at
23k, 2381.5 at 24k; 340 s). Datasets: expert 100k steps, 96 complete episodes of 6838.9 +- 898.5;
medium 100k steps, 96 of 1970.8 +- 795.1 (score 30.6); medium-replay 24k steps, 24 episodes;
random 100k steps, 96 of -290.9 +- 81.7.

Speed, gradient steps per second of training on Hopper medium-replay (one torch thread, nice 10,
another benchmark on the second of 2 cores, 1-minute load 2.3-4): tdrl BC 524, TD3+BC 174, IQL
125, CRR 64, BCQ 38, CQL 10.1; TorchRL IQL 70, CQL 6.8. A 10k cell with its 10 evaluations:
20 s (BC) to 16 min (tdrl CQL); a 100k cell ten times that (tdrl CQL ~2.7 h, TorchRL's ~4 h).
Hence the 10k budget here and 5k for CQL.

    python benchmarks/offline_table.py --make-datasets Hopper-v5
    python benchmarks/offline_table.py --datasets tdrl/hopper-medium-replay-v1 \
        --algos bc td3bc iql bcq crr --libraries tdrl torchrl --seeds 0 1 2 --jobs 1
    python benchmarks/offline_table.py --datasets tdrl/hopper-medium-replay-v1 --algos cql \
        --seeds 0 --steps 5000 --eval-every 1000 --jobs 1
    python benchmarks/offline_table.py --render     # offline_table.md
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # when a test loads this file
import mujoco_table as mt  # noqa: E402

WORKDIR = Path("/tmp/tdrl_offline_table")
os.environ.setdefault("MINARI_DATASETS_PATH", str(WORKDIR / "minari"))
STEPS, EVAL_EVERY = 10_000, 1_000  # what two shared CPU cores afford; the papers: 1M
DATASETS = (
    "tdrl/hopper-medium-replay-v1", "tdrl/hopper-medium-v1", "tdrl/halfcheetah-medium-v0"
)  # fmt: skip
LIBRARIES = ("tdrl", "torchrl", "tianshou")
PEERS = {"torchrl": ("cql", "iql"), "tianshou": ("cql",)}
TITLES = {"bc": "BC", "td3bc": "TD3+BC", "cql": "CQL", "iql": "IQL", "bcq": "BCQ", "crr": "CRR"}
ALGOS = {name: mt.Algo("offline", (("algo", name),), STEPS, None) for name in TITLES}
PACKAGES = ("gymnasium", "mujoco", "minari")
MEDIUM_FRACTION = 0.3  # D4RL: "about a third" of the expert's return
# The version --make-datasets writes, by task: Hopper's v0 came from source runs of an earlier
# tdrl, v1 from source runs made again (the docstring has both).
DATASET_VERSION = {"Hopper-v5": 1}
RANDOM_EPISODES = 100

# Kostrikov et al. 2021 (IQL, arXiv 2110.06169), Table 1: D4RL v2 datasets, normalized score
# after 1M gradient steps (their runs and those they quote). BCQ and CRR are not in it.
PAPER = {
    "hopper-medium-replay": {"bc": 18.1, "td3bc": 60.9, "cql": 95.0, "iql": 94.7},
    "hopper-medium": {"bc": 52.9, "td3bc": 59.3, "cql": 58.5, "iql": 66.3},
    "halfcheetah-medium": {"bc": 42.6, "td3bc": 48.3, "cql": 44.0, "iql": 47.4},
}


def dataset_name(dataset: str) -> str:
    """``"tdrl/hopper-medium-replay-v0"`` -> ``"hopper-medium-replay"``."""
    return dataset.rsplit("/", 1)[-1].rsplit("-v", 1)[0]


# ----------------------------------------------------------------------------- datasets


def sources(env_id: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """The expert and medium runs of ``env_id``: recipe and Config fields (the medium run's
    ``stop_at_return`` is set from the expert's return)."""
    common = {"env_id": env_id, "seed": 0, "threads": 1, "progress": False}
    # D4RL's experts are SAC runs of 1M steps (~4 h a run here); tdrl's are PPO's defaults at
    # 1M steps (~4 min): Hopper's is the PPO expert of GAIL's page (stopped at 3300), the
    # others run the whole 1M (HalfCheetah seed 0: ~4,600 in docs/benchmarks/mujoco_table.md)
    expert = ("ppo", dict(total_frames=1_000_000))
    if env_id == "Hopper-v5":
        expert = ("ppo", dict(total_frames=1_000_000, stop_at_return=3300.0))
    # an evaluation every 1k steps to stop near the target (every 5k, seed 0 jumped from 593
    # to 2846 between two); a checkpoint (with the replay buffer) every 100k and at the stop
    medium = ("sac", dict(total_frames=300_000, eval_every=1_000, checkpoint_every=100_000))
    return {"expert": (expert[0], common | expert[1]), "medium": (medium[0], common | medium[1])}


def train_source(env_id: str, role: str, stop_at_return: float | None = None) -> Path:
    """The run folder of ``env_id``'s ``role`` run, trained first unless it has a checkpoint."""
    import importlib

    from tdrl import trainers

    recipe, fields = sources(env_id)[role]
    folder = WORKDIR / "sources" / f"{role}-{env_id}"
    if trainers.latest_checkpoint(folder) is None:
        module = importlib.import_module(f"recipes.{recipe}")
        extra = {} if stop_at_return is None else {"stop_at_return": stop_at_return}
        print(f"training the {role} run of {env_id}: {recipe} {fields | extra}", flush=True)
        # resume: a source run killed before its first checkpoint starts over in its folder
        module.main(
            trainers.configure(module.Config, **fields, **extra, log_dir=str(folder), resume=True)
        )
    return folder


def last_eval(folder: Path) -> float:
    """A run's final deterministic evaluation (the last row of its eval.csv)."""
    from tdrl.trainers import read_csv

    return float(read_csv(folder / "eval.csv")[-1]["return_mean"])


def random_return(env_id: str, episodes: int = RANDOM_EPISODES, seed: int = 0) -> float:
    """The mean return of ``episodes`` uniform random episodes (D4RL's 0)."""
    from tdrl.collectors import evaluate
    from tdrl.envs import make_vec_env

    env = make_vec_env(env_id, 5, seed=seed)
    try:
        return evaluate(env, None, episodes, seed=seed)["return_mean"]
    finally:
        env.close()


def make_datasets(env_id: str, steps: int = 100_000) -> dict[str, str]:
    """Train the source runs and write the four datasets of ``env_id`` that do not exist yet
    (``steps`` each, but the replay); returns kind -> dataset id."""
    from recipes import make_dataset as md

    root = Path(os.environ["MINARI_DATASETS_PATH"])
    expert = train_source(env_id, "expert")
    ref_max = last_eval(expert)
    medium = train_source(env_id, "medium", stop_at_return=MEDIUM_FRACTION * ref_max)
    ref_min = random_return(env_id)
    print(f"{env_id}: references random {ref_min:.1f}, expert {ref_max:.1f}, medium run's "
          f"last evaluation {last_eval(medium):.1f}", flush=True)  # fmt: skip
    task = env_id.split("-")[0].lower()
    # (a run folder's config.json tells make_dataset.py its recipe and networks)
    kinds: dict[str, dict[str, Any]] = {
        "expert": dict(kind="policy", run=str(expert), deterministic=True),
        "medium": dict(kind="policy", run=str(medium)),
        "medium-replay": dict(kind="replay", run=str(medium)),
        "random": dict(kind="random"),
    }
    made = {}
    for kind, fields in kinds.items():
        version = DATASET_VERSION.get(env_id, 0)
        dataset_id = made[kind] = f"tdrl/{task}-{kind}-v{version}"
        if (root / dataset_id).exists():
            print(f"exists, skipped: {dataset_id}")
            continue
        md.main(md.Config(
            **fields, env_id=env_id, steps=steps, seed=0, dataset_id=dataset_id,
            ref_min_score=ref_min, ref_max_score=ref_max,
        ))  # fmt: skip
    return made


def references(dataset: Any) -> tuple[float, float]:
    """The dataset's stored ``(ref_min_score, ref_max_score)``."""
    meta = dataset.storage.metadata
    if "ref_min_score" not in meta or "ref_max_score" not in meta:
        raise ValueError(f"dataset {dataset.id!r} stores no reference returns")
    return float(meta["ref_min_score"]), float(meta["ref_max_score"])


# ----------------------------------------------------------------------------- cells


def build_cells(
    datasets: list[str], algorithms: list[str], seeds: list[int], libraries: list[str], *,
    steps: int = STEPS, eval_every: int = EVAL_EVERY, eval_episodes: int = mt.EVAL_EPISODES,
) -> list[mt.Cell]:  # fmt: skip
    """Dataset by dataset, seed by seed (seed 0 of every algorithm first), algorithm by
    algorithm, library by library; peer cells only where the peer has the algorithm."""
    return [
        mt.Cell(library, algorithm, dataset, seed, steps, eval_every, eval_episodes)
        for dataset in datasets
        for seed in seeds
        for algorithm in algorithms
        for library in libraries
        if library == "tdrl" or algorithm in PEERS.get(library, ())
    ]


def run_tdrl(cell: mt.Cell, folder: Path, env_id: str) -> dict[str, Any]:
    """recipes/offline.py through mujoco_table's run_tdrl (its env is the dataset's)."""
    preset = (("algo", cell.algorithm), ("dataset", cell.task), ("progress", False))
    algo = mt.Algo("offline", preset, cell.steps, None)
    suite = dataclasses.replace(OFFLINE, algos={cell.algorithm: algo})
    result = mt.run_tdrl(dataclasses.replace(cell, task=env_id), folder, suite)
    rows = _eval_rows(folder)
    result["curve"]["eval_s"] = [row["eval_time"] for row in rows]
    return result


def _eval_rows(folder: Path) -> list[dict[str, float]]:
    from tdrl.trainers import read_csv

    return read_csv(folder / "eval.csv")


def evaluate_peer(
    cell: mt.Cell, env_id: str, build: Callable[[Any, Any], tuple[Callable[[int], None], Any]]
) -> dict[str, Any]:
    """A peer's loop: ``build(transitions, action_space)`` (the dataset's steps as one
    ``[N]`` TensorDict in tdrl's layout, and its gymnasium Box) gives ``update(step)`` and a
    policy (a callable that writes ``"action"``), run for the cell's budget with the table's
    evaluations; returns the line's results."""
    import minari
    import numpy as np
    import torch

    from tdrl.collectors import evaluate
    from tdrl.data import load_minari
    from tdrl.envs import make_vec_env
    from tdrl.trainers.run import EVAL_SEED_OFFSET

    torch.manual_seed(cell.seed)
    np.random.seed(cell.seed)
    start = time.perf_counter()
    dataset = minari.load_dataset(cell.task)
    transitions = load_minari(dataset).storage[:, 0]  # every step, episode after episode
    update, policy = build(transitions, dataset.action_space)
    eval_seed = cell.seed + EVAL_SEED_OFFSET
    eval_env = make_vec_env(env_id, min(mt.EVAL_ENVS, cell.eval_episodes), seed=eval_seed)
    curve: dict[str, list[float]] = {k: [] for k in ("steps", "returns", "stds", "wall_s")}
    curve["eval_s"] = []
    for step in range(1, cell.steps + 1):
        update(step - 1)
        if step % cell.eval_every == 0 or step == cell.steps:
            began = time.perf_counter()
            out = evaluate(eval_env, policy, cell.eval_episodes, deterministic=True, seed=eval_seed)
            now = time.perf_counter()
            values = (step, out["return_mean"], out["return_std"], now - start, now - began)
            for name, value in zip(curve, values, strict=True):
                curve[name].append(value)
    eval_env.close()
    return {
        **mt.curve_summary(curve),
        "env_steps": cell.steps,  # gradient steps
        "wall_s": time.perf_counter() - start,
        "curve": curve,
    }


def torchrl_peer(cell: mt.Cell, env_id: str) -> dict[str, Any]:
    """TorchRL's CQL or IQL as its sota-implementations build and update them."""
    import torch
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torch import nn
    from torchrl.data import (
        Bounded,
        LazyTensorStorage,
        SamplerWithoutReplacement,
        TensorDictReplayBuffer,
    )
    from torchrl.envs.utils import ExplorationType
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import CQLLoss, IQLLoss, SoftUpdate

    lr, batch, hidden = 3e-4, 256, [256, 256]
    bc_steps = round(0.04 * cell.steps)  # CQL: their policy_eval_start, 40k of 1M steps
    settings: dict[str, Any] = {}

    def build(data: Any, space: Any) -> tuple[Callable[[int], None], Any]:
        n_obs, n_act = data["observation"].shape[-1], data["action"].shape[-1]
        low, high = (torch.as_tensor(b, dtype=torch.float32) for b in (space.low, space.high))

        def mlp(inputs: int, outputs: int) -> nn.Module:
            return MLP(in_features=inputs, out_features=outputs, num_cells=hidden,
                       activation_class=nn.ReLU)  # fmt: skip

        extractor = NormalParamExtractor(scale_mapping="biased_softplus_1.0", scale_lb=0.1)
        actor = ProbabilisticActor(
            TensorDictModule(nn.Sequential(mlp(n_obs, 2 * n_act), extractor),
                             in_keys=["observation"], out_keys=["loc", "scale"]),
            in_keys=["loc", "scale"], spec=Bounded(low, high, shape=(n_act,)),
            distribution_class=TanhNormal,
            distribution_kwargs={"low": low, "high": high, "tanh_loc": False},
            default_interaction_type=ExplorationType.RANDOM,
        )  # fmt: skip
        qvalue = ValueOperator(mlp(n_obs + n_act, 1), in_keys=["observation", "action"])
        loss: Any
        if cell.algorithm == "cql":
            loss = CQLLoss(
                actor, qvalue, loss_function="l2", temperature=1.0, min_q_weight=1.0,
                max_q_backup=False, deterministic_backup=False, num_random=10,
                with_lagrange=True, lagrange_thresh=5.0,
            )  # fmt: skip
            groups = [(loss.actor_network_params, lr), (loss.qvalue_network_params, lr)]
            optimizers = [torch.optim.Adam(p.flatten_keys().values(), lr=r) for p, r in groups]
            optimizers.append(torch.optim.Adam([loss.log_alpha], lr=lr))
            optimizers.append(torch.optim.Adam([loss.log_alpha_prime], lr=lr))
            terms: tuple[str, ...] = ("loss_qvalue", "loss_cql", "loss_alpha", "loss_alpha_prime")
        else:
            value = ValueOperator(mlp(n_obs, 1), in_keys=["observation"])
            loss = IQLLoss(actor, qvalue, value_network=value, loss_function="l2",
                           temperature=3.0, expectile=0.7)  # fmt: skip
            params = (loss.actor_network_params, loss.qvalue_network_params,
                      loss.value_network_params)  # fmt: skip
            optimizers = [torch.optim.Adam(p.flatten_keys().values(), lr=lr) for p in params]
            terms = ("loss_value", "loss_qvalue")
        loss.make_value_estimator(gamma=0.99)
        updater = SoftUpdate(loss, tau=0.005)
        buffer = TensorDictReplayBuffer(
            storage=LazyTensorStorage(len(data)), batch_size=batch,
            sampler=SamplerWithoutReplacement(drop_last=False),
        )  # fmt: skip
        buffer.extend(data.exclude("collector"))
        settings.update(batch_size=batch, lr=lr, hidden_sizes=hidden, loss=repr(type(loss)))

        def update(step: int) -> None:
            out = loss(buffer.sample())
            bc = cell.algorithm == "cql" and step < bc_steps
            total = out["loss_actor_bc" if bc else "loss_actor"] + sum(out[k] for k in terms)
            total.backward()
            for optimizer in optimizers:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            updater.step()

        return update, actor

    result = evaluate_peer(cell, env_id, build)
    source = "pytorch/rl ae9719f17b15 sota-implementations/" + cell.algorithm
    result["settings"] = settings | {"source": source, "bc_steps": bc_steps}
    result["versions"] = mt.versions("torch", "tensordict", "torchrl", *PACKAGES)
    return result


def tianshou_peer(cell: mt.Cell, env_id: str) -> dict[str, Any]:
    """Tianshou's CQL as examples/offline/d4rl_cql.py builds it, updated as its trainer does."""
    import numpy as np
    import torch
    from tianshou.algorithm import CQL
    from tianshou.algorithm.algorithm_base import policy_within_training_step
    from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Batch, ReplayBuffer
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic

    hidden, batch = [256, 256], 256
    settings = dict(
        hidden_sizes=hidden, actor_lr=1e-4, critic_lr=3e-4, alpha_lr=1e-4, cql_alpha_lr=3e-4,
        cql_weight=1.0, temperature=1.0, with_lagrange=True, lagrange_threshold=10.0,
        calibrated=True, tau=0.005, gamma=0.99, batch_size=batch,
    )  # fmt: skip

    def build(data: Any, space: Any) -> tuple[Callable[[int], None], Any]:
        obs_shape, act_shape = tuple(data["observation"].shape[1:]), space.shape
        actor = ContinuousActorProbabilistic(
            preprocess_net=Net(state_shape=obs_shape, action_shape=act_shape,
                               hidden_sizes=hidden),
            action_shape=act_shape, unbounded=True, conditioned_sigma=True,
        )  # fmt: skip

        def critic() -> ContinuousCritic:
            net = Net(state_shape=obs_shape, action_shape=act_shape, hidden_sizes=hidden,
                      concat=True)  # fmt: skip
            return ContinuousCritic(preprocess_net=net)

        alpha = AutoAlpha(-float(np.prod(act_shape)), 0.0, AdamOptimizerFactory(lr=1e-4))
        algorithm = CQL(
            policy=SACPolicy(actor=actor, action_space=space),
            policy_optim=AdamOptimizerFactory(lr=1e-4), critic=critic(),
            critic_optim=AdamOptimizerFactory(lr=3e-4), critic2=critic(),
            critic2_optim=AdamOptimizerFactory(lr=3e-4), calibrated=True, cql_alpha_lr=3e-4,
            cql_weight=1.0, tau=0.005, gamma=0.99, alpha=alpha, temperature=1.0,
            with_lagrange=True, lagrange_threshold=10.0,
            min_action=float(space.low.min()), max_action=float(space.high.max()),
        )  # fmt: skip
        terminated = data["next", "terminated"].view(-1).numpy()
        truncated = data["next", "truncated"].view(-1).numpy()
        buffer = ReplayBuffer.from_data(
            obs=data["observation"].numpy(), act=data["action"].numpy(),
            rew=data["next", "reward"].view(-1).numpy(), terminated=terminated,
            truncated=truncated, done=terminated | truncated,
            obs_next=data["next", "observation"].numpy(),
        )  # fmt: skip
        buffer = algorithm.process_buffer(buffer)  # Cal-QL's Monte Carlo returns

        def update(step: int) -> None:
            with policy_within_training_step(algorithm.policy):
                algorithm.update(buffer=buffer, sample_size=batch)

        def policy(td: Any) -> Any:
            obs = Batch(obs=td["observation"].numpy(), info=Batch())
            act = algorithm.policy.map_action(algorithm.policy(obs).act.detach().numpy())
            return td.set("action", torch.as_tensor(act, dtype=torch.float32))

        return update, policy

    result = evaluate_peer(cell, env_id, build)
    source = "thu-ml/tianshou f2402056b03a examples/offline/d4rl_cql.py"
    result["settings"] = settings | {"source": source}
    result["versions"] = mt.versions("torch", "tianshou", *PACKAGES)
    return result


def run_cell(cell: mt.Cell, folder: Path, *, jobs: int = 1, running: int = 1) -> dict[str, Any]:
    """One cell in this process (one torch thread); its line, normalized scores included, also
    written to ``folder/result.json``."""
    import minari
    import torch

    torch.set_num_threads(1)
    folder.mkdir(parents=True, exist_ok=True)
    dataset = minari.load_dataset(cell.task)
    env_id = dataset.env_spec.id
    ref_min, ref_max = references(dataset)
    before = mt.machine()
    code = mt.git_commit()  # the code the run starts with (HEAD may move while it runs)
    if cell.library == "tdrl":
        result = run_tdrl(cell, folder, env_id)
    else:
        result = {"torchrl": torchrl_peer, "tianshou": tianshou_peer}[cell.library](cell, env_id)
    curve = result["curve"]
    curve["scores"] = [100 * (r - ref_min) / (ref_max - ref_min) for r in curve["returns"]]
    scores = {"final_score": curve["scores"][-1], "best_score": max(curve["scores"])}
    conditions = {"date": before["time"], "load_start": before["load"]}
    conditions |= {"load_end": mt.machine()["load"], "jobs": jobs, "running_at_start": running}
    line = mt.finite(
        dataclasses.asdict(cell) | result | scores | code | conditions
        | {"env_id": env_id, "ref_min_score": ref_min, "ref_max_score": ref_max,
           "cpus": os.cpu_count()}
    )  # fmt: skip
    partial = folder / (mt.RESULT + ".part")
    partial.write_text(json.dumps(line, allow_nan=False))
    partial.replace(folder / mt.RESULT)
    return line


def child(payload: str) -> None:
    raw = json.loads(payload)
    folder, jobs, running = Path(raw.pop("folder")), raw.pop("jobs"), raw.pop("running")
    sys.path.insert(0, str(mt.ROOT))
    line = run_cell(mt.Cell(**raw), folder, jobs=jobs, running=running)
    print(f"final score {line['final_score']:.1f}, {line['wall_s']:.0f} s")


# ----------------------------------------------------------------------------- the page


def steps_per_second(line: dict[str, Any]) -> float:
    """Gradient steps per second of training (the run's wall time less its evaluations)."""
    return line["steps"] / (line["wall_s"] - sum(line["curve"]["eval_s"]))


HEADER = """\
# Offline RL table

Written by `python benchmarks/offline_table.py --render` from `offline_table.jsonl` (one line
per finished cell: library, algorithm, dataset, seed, gradient-step budget, curve, references,
settings, commit, machine load). Datasets: tdrl's own D4RL-style Minari datasets
(`--make-datasets`: expert, medium, medium-replay and random of Hopper-v5 and HalfCheetah-v5,
made with tdrl's PPO and SAC; see the driver's docstring), so the absolute scores are not those
of D4RL's datasets. tdrl: `recipes/offline.py`'s defaults; TorchRL: `CQLLoss`/`IQLLoss` with
its sota-implementations' offline settings; Tianshou: `CQL` with its
`examples/offline/d4rl_cql.py` settings (no IQL there). Evaluation, every library: 10
deterministic episodes on a separate env every `eval_every` gradient steps and at the end, one
torch thread per run, one run at a time. Lines of settings that are not the recipe's defaults
(TD3+BC without its state normalization; IQL without its authors' reward scaling, the recipe's
default before `--scale-rewards`: every IQL line on the v0 datasets; CQL with SAC's soft target
and no actor warm-up, the recipe's defaults before `--cql-bc-steps`: every tdrl CQL line on the
v0 datasets, and seeds 0-5 on hopper-medium-v1) are kept in `offline_table_superseded.jsonl`.
Hopper's v1 datasets were made with the same command from new source runs; v1's medium data
score 69.9, twice D4RL's medium (the medium run's evaluation jumped from 28% to 68% of the
expert's within 1k steps).

- score: D4RL's normalized return, `100 * (return - random) / (expert - random)` with the
  dataset's stored references (random: 100 uniform random episodes; expert: the expert run's
  final evaluation). final: the last evaluation, mean ± sample std over seeds; best: each
  seed's max over its evaluations, mean ± std; wall: mean seconds per run (loading, training,
  evaluations); steps/s: gradient steps per second of training (wall less evaluations).
- tdrl/peer: tdrl's mean final score over the peer's (only where the peer's is > 0).
- IQL paper: Kostrikov et al. 2021 (arXiv 2110.06169) Table 1, D4RL v2 datasets, 1M steps:
  quoted for the ordering, not comparable in absolute terms.
"""


def _library_cells(runs: list[dict[str, Any]]) -> list[str]:
    if not runs:
        return ["—"] * 4
    return [
        mt.pm([r["final_score"] for r in runs]),
        mt.pm([r["best_score"] for r in runs]),
        str(len(runs)),
        f"{statistics.fmean(r['wall_s'] for r in runs):.0f}",
    ]


def ordering(groups: dict[mt.Group, Any]) -> list[str]:
    """Per dataset: tdrl's algorithms by mean final score, and whether IQL, TD3+BC and CQL are
    above BC (the D4RL-paper ordering on medium-replay)."""
    out = []
    means: dict[str, dict[str, float]] = {}
    for (dataset, algorithm, steps), libraries in groups.items():
        runs = list(libraries.get("tdrl", {}).values())
        if runs:
            label = f"{dataset} ({mt.fmt_steps(steps)} steps)"
            means.setdefault(label, {})[algorithm] = statistics.fmean(
                r["final_score"] for r in runs
            )
    for label, scores in means.items():
        ranked = sorted(scores, key=scores.__getitem__, reverse=True)
        line = f"- {label}: " + " > ".join(f"{TITLES[a]} {scores[a]:.1f}" for a in ranked)
        if "bc" in scores and all(a in scores for a in ("iql", "td3bc", "cql")):
            above = [TITLES[a] for a in ("iql", "td3bc", "cql") if scores[a] > scores["bc"]]
            line += f"; above BC: {', '.join(above) or 'none'} of IQL, TD3+BC, CQL"
        out.append(line)
    return out


def conditions(runs: list[dict[str, Any]]) -> str:
    """Commits (``+``: tracked files differed) and mean 1-minute load at the start and end of
    ``runs``, as two table cells."""
    commits = sorted({(r["commit"] or "?")[:8] + "+" * r["dirty"] for r in runs})
    load = [statistics.fmean(r[key][0] for r in runs) for key in ("load_start", "load_end")]
    return f"{' '.join(commits)} | {load[0]:.2f} → {load[1]:.2f}"


def paper_ordering(names: set[str]) -> list[str]:
    """The IQL paper's ordering on the datasets of ``names`` (``PAPER``'s figures)."""
    out = []
    for name, scores in PAPER.items():
        if name in names:
            ranked = sorted(scores, key=scores.__getitem__, reverse=True)
            figures = " > ".join(f"{TITLES[a]} {scores[a]:.1f}" for a in ranked)
            out.append(f"- IQL paper (Table 1), {name}-v2, 1M steps: {figures}")
    return out


def markdown(lines: list[dict[str, Any]]) -> str:
    """The table of normalized scores, the ordering, the speeds and the run conditions."""
    groups = mt.summarize(lines, OFFLINE)
    out = [HEADER]
    if not groups:
        return "\n".join([*out, "No cell has finished yet.\n"])
    out.append(
        mt.versions_and_machine(
            run for libraries in groups.values() for by_seed in libraries.values()
            for run in by_seed.values()
        )
    )  # fmt: skip
    out += [
        "| dataset | algorithm | steps | tdrl final | tdrl best | seeds | wall s "
        "| TorchRL final | TorchRL best | seeds | wall s | Tianshou final | Tianshou best "
        "| seeds | wall s | tdrl/TorchRL | tdrl/Tianshou | IQL paper |",
        "|---|---|---:|" + "---:|" * 15,  # one per column after the first three
    ]
    for (dataset, algorithm, steps), libraries in groups.items():
        cells = [dataset, TITLES.get(algorithm, algorithm), mt.fmt_steps(steps)]
        finals = {}
        for library in LIBRARIES:
            runs = list(libraries.get(library, {}).values())
            cells += _library_cells(runs)
            if runs:
                finals[library] = statistics.fmean(r["final_score"] for r in runs)
        for peer in ("torchrl", "tianshou"):
            both = "tdrl" in finals and peer in finals
            cells.append(mt.ratio(finals["tdrl"], finals[peer], positive=True) if both else "—")
        paper = PAPER.get(dataset_name(dataset), {}).get(algorithm)
        cells.append("n/a" if paper is None else f"{paper:.1f}")
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "Ordering of tdrl's algorithms (mean final score):", "", *ordering(groups)]
    out += [
        *paper_ordering({dataset_name(group[0]) for group in groups}),
        "",
        "References, speeds and run conditions (commits with `+` when tracked files differed):",
        "",
        "| dataset | algorithm | library | random | expert | steps/s | commits "
        "| load start → end |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    runs_of = [
        (dataset, TITLES.get(algorithm, algorithm), library, list(by_seed.values()))
        for (dataset, algorithm, _), libraries in groups.items()
        for library, by_seed in libraries.items()
    ]
    for dataset, title, library, runs in runs_of:
        refs = f"{runs[0]['ref_min_score']:.1f} | {runs[0]['ref_max_score']:.1f}"
        speed = statistics.fmean(map(steps_per_second, runs))
        out.append(
            f"| {dataset} | {title} | {library} | {refs} | {speed:.0f} | {conditions(runs)} |"
        )
    return "\n".join(out) + "\n"


def render(table: Path) -> Path:
    md = table.with_suffix(".md")
    md.write_text(markdown(mt.read_lines(table)))
    return md


OFFLINE = mt.Suite(
    "offline", __file__, ALGOS, DATASETS, lambda algorithm, task: None,
    lambda cell, folder: {}, HEADER, packages=PACKAGES,
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=HEADER.splitlines()[0].lstrip("# "))
    parser.add_argument("--algos", nargs="+", choices=list(ALGOS), default=list(ALGOS))
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), help="Minari ids")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES))
    parser.add_argument("--steps", type=int, default=STEPS, help="gradient steps a cell")
    parser.add_argument("--eval-every", type=int, default=EVAL_EVERY, help="gradient steps")
    parser.add_argument("--eval-episodes", type=int, default=mt.EVAL_EPISODES)
    parser.add_argument("--jobs", type=int, default=1, help="cells at once, one core each")
    parser.add_argument("--table", type=Path, default=OFFLINE.table, help="the JSON-lines file")
    parser.add_argument("--workdir", type=Path, default=OFFLINE.workdir, help="run folders")
    parser.add_argument("--dry-run", action="store_true", help="list the cells left to run")
    parser.add_argument("--render", action="store_true", help="only write the .md")
    parser.add_argument(
        "--make-datasets", nargs="*", metavar="ENV_ID",
        help="make the datasets of these tasks (default Hopper-v5) and stop",
    )  # fmt: skip
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(mt.ROOT))
    if args.child:
        child(args.child)
        return 0
    if args.render:
        print(f"wrote {render(args.table)}")
        return 0
    if args.make_datasets is not None:
        for env_id in args.make_datasets or ["Hopper-v5"]:
            print(make_datasets(env_id))
        return 0
    cells = build_cells(
        args.datasets, args.algos, args.seeds, args.libraries, steps=args.steps,
        eval_every=args.eval_every, eval_episodes=args.eval_episodes,
    )  # fmt: skip
    if args.dry_run:
        done = {mt.line_key(line) for line in mt.read_lines(args.table)}
        todo = [cell for cell in cells if cell.key not in done]
        print("\n".join(map(str, todo)) + f"\n{len(todo)} of {len(cells)} cells to run")
        return 0
    launch = functools.partial(mt.launch_subprocess, script=__file__)
    failures = mt.run_cells(cells, args.table, args.workdir, args.jobs, launch)
    if failures:
        print(f"{failures} cell(s) failed; the same command runs them again")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
