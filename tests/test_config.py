from dataclasses import dataclass, field
from typing import Literal

import pytest

from agentsearch.core.config import ConfigError, apply_overrides, parse_overrides


@dataclass
class Inner:
    tau: float = 1e-2
    kind: Literal["hdr", "naive"] = "hdr"


@dataclass
class Outer:
    steps: int = 10
    lr: float = 1e-4
    name: str = "x"
    flag: bool = False
    modules: list[str] = field(default_factory=lambda: ["q_proj"])
    limit: int | None = None
    replay: Inner = field(default_factory=Inner)


def test_overrides_are_typed_and_nested():
    cfg = apply_overrides(Outer, {"steps": 3}, ["lr=3e-4", "flag=true", "replay.tau=1e-3",
                                                "modules=q_proj,v_proj", "limit=none", "steps=50"])
    assert cfg.steps == 50 and cfg.lr == 3e-4 and cfg.flag is True
    assert cfg.replay.tau == 1e-3 and cfg.replay.kind == "hdr"
    assert cfg.modules == ["q_proj", "v_proj"] and cfg.limit is None


@pytest.mark.parametrize("item,msg", [
    ("stepz=3", "did you mean steps"),
    ("steps=abc", "steps: expected an integer"),
    ("steps=1.5", "expected an integer"),
    ("flag=maybe", "expected true/false"),
    ("replay.kind=bogus", "not one of"),
    ("noequals", "not key=value"),
])
def test_bad_overrides_get_clear_errors(item, msg):
    with pytest.raises(ConfigError, match=msg):
        apply_overrides(Outer, {}, [item])


def test_parse_overrides_nesting():
    assert parse_overrides(["a.b=1", "a.c=2", "d=3"]) == {"a": {"b": "1", "c": "2"}, "d": "3"}


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown preset"):
        apply_overrides(Outer, "no-such-preset", [])


@dataclass
class WithMapping:
    kwargs: dict = field(default_factory=dict)


def test_free_form_mapping_values_are_typed():
    cfg = apply_overrides(WithMapping, {"kwargs": {"topk": 3, "name": "x"}},
                          ["kwargs.topk=2", "kwargs.tau=1e-3", "kwargs.flag=true",
                           "kwargs.none=null",
                           "kwargs.prompt=Search with <search> q </search>: then answer.",
                           "kwargs.kinds=[zoom, bar]", "kwargs.tools=[]", "kwargs.sub={a: 1}",
                           "kwargs.odd=[x"])
    assert cfg.kwargs == {"topk": 2, "name": "x", "tau": 1e-3, "flag": True, "none": None,
                          "prompt": "Search with <search> q </search>: then answer.",
                          "kinds": ["zoom", "bar"], "tools": [], "sub": {"a": 1}, "odd": "[x"}


# --- TrainConfig validation: settings that cannot work are errors that say how to fix them

def _train(*items):
    from agentsearch.trainer.train_config import TrainConfig

    return apply_overrides(TrainConfig, {}, list(items))


@pytest.mark.parametrize("preset", ["tiny", "smollm2", "search-r1-qwen2.5-3b", "base-tiny"])
def test_presets_pass_validation(preset):
    from agentsearch.trainer.train_config import TrainConfig

    cfg = apply_overrides(TrainConfig, preset, [])
    assert cfg.response_budget == cfg.max_turns * cfg.generation.max_new_tokens


@pytest.mark.parametrize("items,msg", [
    (["generation.temperature=0"], r"generation.temperature=0.0 must be > 0.*eval.temperature=0"),
    (["generation.temperature=-1"], "generation.temperature=-1.0 must be > 0"),
    (["checkpoint_every=0"], r"checkpoint_every=0 must be >= 1.*checkpoint_every=steps"),
    (["checkpoint_every=-5"], "checkpoint_every=-5 must be >= 1"),
    (["loss=cispo", "dual_clip=3"],
     r"dual_clip=3.0 is used only by loss=grpo, not cispo: unset it"),
    (["loss=gspo", "clip_low=3e-4", "clip_high=4e-4", "dual_clip=3"],
     "used only by loss=grpo, not gspo"),
    (["dual_clip=1.0"], "dual_clip=1.0 must be > 1"),
    (["loss=gspo"],
     r"loss=gspo with clip_low=0.2, clip_high=0.28.*set clip_low=3e-4 clip_high=4e-4"),
    (["loss=gspo", "clip_low=3e-4"], "clip_high=0.28: GSPO clips the sequence-level ratio"),
    (["overlong_buffer=-1"], "overlong_buffer=-1 must be >= 0"),
    (["max_response_tokens=0"], "max_response_tokens=0 must be >= 1"),
    # default budget: 4 turns x 64 new tokens = 256 policy tokens
    (["overlong_buffer=300"],
     r"overlong_buffer=300 exceeds the policy-token budget 256.*raise max_response_tokens"),
    (["max_response_tokens=100", "overlong_buffer=101"], "exceeds the policy-token budget 100"),
])
def test_train_config_rejects_what_cannot_work(items, msg):
    with pytest.raises(ConfigError, match=msg):
        _train(*items)


def test_train_config_accepts_working_loss_settings():
    assert _train("dual_clip=3").dual_clip == 3.0                                 # grpo uses it
    assert _train("loss=gspo", "clip_low=3e-4", "clip_high=4e-4").loss == "gspo"
    assert _train("loss=gspo", "clip_low=3e-4", "clip_high=4e-4", "agg=sequence").agg == "sequence"
    # CISPO clips its IS weight to [1 - clip_low, 1 + clip_high]: both clips are used
    assert _train("loss=cispo", "clip_low=0.5", "clip_high=2.0").clip_high == 2.0
    # greedy eval is fine
    assert _train("eval.temperature=0").eval.temperature == 0.0


def test_overlong_shaping_measures_a_policy_token_budget():
    cfg = _train("max_turns=3", "generation.max_new_tokens=20", "overlong_buffer=10",
                 "max_seq_len=4096")
    assert cfg.response_budget == 60 and cfg.overlong_shaping() == (60, 10, 1.0)  # not max_seq_len
    cfg = _train("max_response_tokens=50", "overlong_buffer=50", "overlong_penalty=0.5")
    assert cfg.overlong_shaping() == (50, 50, 0.5)
    assert _train().overlong_shaping() is None                                    # off by default


def test_a_preset_extends_another(tmp_path):
    """``extends: OTHER``: OTHER's settings with the preset's own merged on top, nested sections
    key by key; a cycle is a clear error."""
    (tmp_path / "a.yaml").write_text("steps: 3\nreplay:\n  tau: 0.5\n  kind: naive\n")
    (tmp_path / "b.yaml").write_text(f"extends: {tmp_path / 'a.yaml'}\nreplay:\n  tau: 0.25\n")
    cfg = apply_overrides(Outer, str(tmp_path / "b.yaml"), [])
    assert cfg.steps == 3 and cfg.replay.tau == 0.25 and cfg.replay.kind == "naive"
    (tmp_path / "a.yaml").write_text(f"extends: {tmp_path / 'b.yaml'}\n")
    with pytest.raises(ConfigError, match="cycle"):
        apply_overrides(Outer, str(tmp_path / "b.yaml"), [])
