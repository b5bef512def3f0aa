from dataclasses import dataclass, field
from typing import Literal

import pytest

from agentsearch.config import ConfigError, apply_overrides, parse_overrides


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
                          ["kwargs.topk=2", "kwargs.tau=1e-3", "kwargs.flag=true", "kwargs.none=null",
                           "kwargs.prompt=Search with <search> q </search>: then answer."])
    assert cfg.kwargs == {"topk": 2, "name": "x", "tau": 1e-3, "flag": True, "none": None,
                          "prompt": "Search with <search> q </search>: then answer."}
