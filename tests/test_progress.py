"""The one progress printer (agentsearch.core.progress) off a terminal."""

from __future__ import annotations

import io
import time

from agentsearch.core.progress import Progress


def test_plain_lines_every_tenth_and_at_the_end():
    out = io.StringIO()
    bar = Progress(20, "sft", stream=out, interval_s=1e9)
    for i in range(1, 21):
        bar.update(i, f"loss {i}")
    lines = out.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == [f"{i}/20" for i in range(2, 21, 2)]


def test_a_slow_unit_prints_once_the_interval_has_passed():
    """A real LM's RL step takes minutes: with every=5 a log would stay quiet for half an hour."""
    out = io.StringIO()
    bar = Progress(40, "train", every=5, stream=out, interval_s=0.05)
    bar.update(1)
    assert out.getvalue() == ""  # neither a fifth unit nor the interval yet
    time.sleep(0.06)
    bar.update(2)
    assert out.getvalue().startswith("[train] 2/40")
    bar.update(3)
    assert out.getvalue().count("\n") == 1  # the interval starts again at each line


def test_disabled_prints_nothing():
    out = io.StringIO()
    bar = Progress(10, "sft", stream=out, enabled=False, interval_s=0.0)
    bar.update(5)
    assert out.getvalue() == ""
