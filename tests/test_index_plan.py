"""``agentsearch index plan``: the arithmetic and the fit, against hand-worked numbers."""

from __future__ import annotations

import json
import math

import pytest

from agentsearch.retrievers.plan import bytes_per_vector, fit_power, parse_size, plan


def test_bytes_per_vector_by_hand():
    assert bytes_per_vector("dense-flat", 768) == {"ram": 3072, "disk": 3072}
    assert bytes_per_vector("dense-ivf", 768)["ram"] == 3080          # + an 8-byte id
    # 192 codes + id; vectors on disk
    assert bytes_per_vector("dense-ivfpq", 768) == {"ram": 200, "disk": 200 + 3072}
    assert (bytes_per_vector("dense-hnsw-sq8", 768, hnsw_m=32)["ram"]
            == pytest.approx(768 + 2 * 32 * 4 * 1.05))


def test_fit_power_recovers_a_power_law():
    a, b = fit_power([(1e6, 2.0), (4e6, 8.0), (16e6, 32.0)])  # y = 2e-6 x
    assert (a, b) == (pytest.approx(2e-6), pytest.approx(1.0))
    a, b = fit_power([(100, 10.0), (10_000, 100.0)])  # y = x ** 0.5
    assert (a, b) == (pytest.approx(1.0), pytest.approx(0.5))
    assert fit_power([(10.0, 5.0)]) == (pytest.approx(0.5), 1.0)  # one point: linear through it
    with pytest.raises(ValueError):
        fit_power([(0, 1.0)])


def test_parse_size():
    assert (parse_size("16G") == 16 * 2**30 and parse_size("512MiB") == 512 * 2**20
            and parse_size("1e3") == 1000)
    with pytest.raises(ValueError, match="16G"):
        parse_size("lots")


def test_plan_extrapolates_measured_points():
    curves = {"machine": "test", "kinds": {
        "dense-flat": {"points": [{"n": 1e5, "dim": 384, "build_s": 1.0, "search_ms": 2.0,
                                   "recall10": 1.0},
                                  {"n": 1e6, "dim": 384, "build_s": 10.0, "search_ms": 20.0,
                                   "recall10": 1.0}]},
        "dense-ivfpq": {"settings": "nprobe=32, refine=8",
                        "points": [{"n": 1e6, "dim": 384, "build_s": 100.0, "search_ms": 1.0,
                                    "recall10": 0.96}]}}}
    out = plan(21e6, 768, ram=16 * 2**30, curves=curves)
    flat, pq = out["kinds"]
    assert flat["ram_gb"] == round(21e6 * 3072 / 2**30, 1) == 60.1 and flat["fits"] is False
    assert flat["build_hours"] == round(10.0 * 42 / 3600, 2)  # linear in N*d: 42x the largest point
    assert flat["search_ms"] == pytest.approx(20.0 * 42, rel=1e-3)
    assert pq["fits"] is True and pq["recall10"] == 0.96 and pq["recall_measured_at"] == 1e6
    assert math.isclose(pq["ram_gb"], 21e6 * 200 / 2**30, abs_tol=0.05)
    assert out["advice"].startswith("extrapolated")


def test_plan_command_prints_a_table(tmp_path, capsys):
    import argparse

    from agentsearch.retrievers.plan import main

    curves = tmp_path / "c.json"
    curves.write_text(json.dumps({"machine": "m", "kinds": {"dense-flat": {"points": [
        {"n": 1e5, "dim": 384, "build_s": 1.0, "search_ms": 2.0, "recall10": 1.0}]}}}))
    assert main(argparse.Namespace(vectors="21e6", dim=768, ram="16G", curves=str(curves),
                                   json=False)) == 0
    out = capsys.readouterr().out
    assert "Advice, extrapolated" in out and "dense-flat" in out and " no " in out
    assert main(argparse.Namespace(vectors="21e6", dim=768, ram="lots", curves=str(curves),
                                   json=False)) == 2


def test_plan_without_curves_is_memory_arithmetic(monkeypatch, tmp_path):
    import agentsearch.retrievers.plan as plan_mod

    monkeypatch.setattr(plan_mod, "CURVES", tmp_path / "absent.json")
    out = plan(21e6, 768, ram=16 * 2**30)
    assert "no measured curves" in out["measured_on"]
    by = {r["kind"]: r for r in out["kinds"]}
    assert by["dense-ivfpq"]["fits"] is True and by["dense-flat"]["fits"] is False
    assert by["dense-flat"]["build_hours"] is None and by["dense-flat"]["recall10"] is None
