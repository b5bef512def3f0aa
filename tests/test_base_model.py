"""The shipped bases (``tiny-base``, ``tiny-chain-base``, ``tiny-math-base``): each is what
``scripts/build_base.py`` builds from its recipe, loads fresh with the dev EM it was built with,
and a missing, corrupt or mismatched asset is a clear error that names the build script."""

import json
import shutil

import pytest

from agentsearch.core.config import ConfigError
from agentsearch.data.paths import BASE_DIRS
from agentsearch.models import load_base
from agentsearch.models.tiny_base import BASE_DIR, BASE_RECIPES, check_base
from agentsearch.recipes.base_build import code_fingerprint, recipe_changes


def _build(base: str = "tiny-base") -> dict:
    return json.loads((BASE_DIRS[base] / "build.json").read_text())


@pytest.mark.parametrize("base", sorted(BASE_RECIPES))
def test_shipped_base_matches_the_recipe_and_the_code_that_builds_it(base):
    build = _build(base)
    assert not recipe_changes(build["recipe"], base), (
        f"agentsearch/configs/{BASE_RECIPES[base]}.yaml (or TrainConfig's defaults) changed since "
        f"the shipped {base} was built ({recipe_changes(build['recipe'], base)}): "
        f"run scripts/build_base.py --base {base}")
    assert build["code_sha256"] == code_fingerprint(base), (
        "the world, the oracle population, the SFT loop, its optimizer schedule or the tokenizer "
        f"changed since the shipped {base} was built: run scripts/build_base.py --base {base}")
    assert build["overrides"] == [] and build["preset"] == BASE_RECIPES[base]


def test_recipe_changes_ignore_a_new_field_at_its_default_and_name_every_real_change():
    recorded = json.loads(json.dumps(_build("tiny-chain-base")["recipe"]))
    assert recipe_changes(recorded, "tiny-chain-base") == []
    # a field added after the build, at its default (0)
    del recorded["sft"]["worlds"]
    assert recipe_changes(recorded, "tiny-chain-base") == []
    recorded["sft"]["steps"] += 1                      # a value the build used differs
    recorded["sft"]["gone"] = 1                        # a field the code no longer has
    assert recipe_changes(recorded, "tiny-chain-base") == ["sft.gone", "sft.steps"]
    recorded = _build("tiny-chain-base-worlds")["recipe"]
    # a new field away from its default is a change
    del recorded["sft"]["worlds"]
    assert recipe_changes(recorded, "tiny-chain-base-worlds") == ["sft.worlds"]


def test_missing_corrupt_or_foreign_assets_are_clear_errors(tmp_path):
    base = tmp_path / "base"
    shutil.copytree(BASE_DIR, base)
    (base / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ConfigError, match="does not load.*scripts/build_base.py"):
        load_base(base)
    (base / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors.*scripts/build_base.py"):
        check_base(base)
    shutil.copy(BASE_DIR / "model.safetensors", base / "model.safetensors")
    build = _build()
    build["tokenizer_sha256"] = "0" * 64
    (base / "build.json").write_text(json.dumps(build))
    with pytest.raises(ConfigError, match="another tokenizer.*scripts/build_base.py"):
        check_base(base)
    build["tokenizer_sha256"] = _build()["tokenizer_sha256"]  # the world tokenizer's, while its
    build["recipe"]["model"] = "tiny+worlds"  # recipe names the one trained on other worlds
    (base / "build.json").write_text(json.dumps(build))
    with pytest.raises(ConfigError, match="another tokenizer.*tokenizer-worlds"):
        check_base(base)


@pytest.mark.slow
@pytest.mark.parametrize("base", sorted(BASE_RECIPES))
def test_the_shipped_base_loaded_fresh_reproduces_its_build_time_dev_em(base):
    """Greedy, the same dev questions and settings as at build time (``build.json``)."""
    import torch

    from agentsearch.models import load_model
    from agentsearch.recipes.base_build import _config
    from agentsearch.rollout.hf import HFBackend
    from agentsearch.trainer.eval import eval_envs, eval_settings, evaluate

    cfg = _config(base=base)
    torch.set_num_threads(cfg.threads)  # as at build time: the reduction order decides near-ties
    model, tok = load_model(base)
    envs, tasks = eval_envs(cfg)
    res = evaluate(HFBackend(model, tok), envs, tasks, **eval_settings(cfg))
    built = _build(base)["eval"]
    assert res["eval/questions"] == built["eval/questions"] >= 400
    assert res["eval/mean_at_n"] == pytest.approx(built["eval/mean_at_n"], abs=1e-9)
