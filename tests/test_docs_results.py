"""The docs' results hook (docs/hooks/results.py): placeholders become rows of the stores."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hook():
    spec = importlib.util.spec_from_file_location(
        "docs_results_hook", ROOT / "docs/hooks/results.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def seed_values(store: str, field: str, **match: object) -> list[float]:
    lines = [json.loads(x) for x in (ROOT / f"docs/benchmarks/{store}_table.jsonl").open()]
    chosen = [x[field] for x in lines if all(x[k] == v for k, v in match.items())]
    assert len(chosen) == 3  # one line per seed
    return chosen


def test_a_placeholder_becomes_its_rows_with_the_mean_over_seeds(hook) -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_path="algorithms/sac.md"))
    markdown = 'x\n<!-- results: mujoco algo=sac task=Hopper-v5 columns="task,tdrl final" -->\ny'
    out = hook.on_page_markdown(markdown, page=page, config=None, files=None)
    rows = [line for line in out.splitlines() if line.startswith("| Hopper")]
    finals = seed_values(
        "mujoco", "final_return", library="tdrl", algorithm="sac", task="Hopper-v5"
    )
    mean, std = statistics.fmean(finals), statistics.stdev(finals)
    assert rows == [f"| Hopper-v5 | {mean:.1f} ± {std:.1f} |"]
    assert out.startswith("x\n") and out.endswith("\ny") and "| task | tdrl final |" in out


def test_filters_ignore_case_and_punctuation_and_take_lists(hook) -> None:
    table = hook.render("offline algo=TD3BC,iql dataset=tdrl/hopper-medium-v0")
    assert {row.split(" | ")[1] for row in table.splitlines()[2:]} == {"TD3+BC", "IQL"}


@pytest.mark.parametrize(
    "argument",
    ["nope", "mujoco algo=xyz", "mujoco foo=1", 'minatar columns="task,zzz"', "offline x"],
)
def test_an_unknown_store_column_or_a_placeholder_without_rows_raises(hook, argument) -> None:
    with pytest.raises(ValueError, match="results: "):
        hook.render(argument)


def test_rainbows_ablation_store_renders_each_variant_beside_the_full_agent(hook) -> None:
    lines = [json.loads(x) for x in (ROOT / "docs/benchmarks/minatar_ablation_table.jsonl").open()]
    full = {x["seed"]: x["final_return"] for x in lines if not x.get("overrides")}
    page = hook.render("minatar_ablation page")
    (row,) = [x for x in page.splitlines() if "| Rainbow |" in x]
    mean = f"{statistics.fmean(full.values()):.1f}"
    if len(full) > 1:  # one seed: the mean alone
        mean += f" ± {statistics.stdev(full.values()):.1f}"
    assert f"| {', '.join(map(str, sorted(full)))} | {mean} |" in row
    # one row per variant, however its --set value was spelled (False, "False", "false")
    variants = {
        tuple(sorted((k, str(v).lower()) for k, v in x["overrides"].items()))
        for x in lines
        if x.get("overrides")
    }
    assert len([x for x in page.splitlines() if "| - " in x]) == len(variants)
    assert "Versions: tdrl: python" in page
