"""``agentsearch index plan``: which dense index fits a corpus, extrapolated from measurements.

Advice, labelled as such. Memory is arithmetic (bytes a vector of each kind, the table in
``faiss_index``, plus what FAISS keeps besides the codes); build time, latency and recall
come from curves measured on this project's machines by ``scripts/bench_index_scale.py``
and shipped in ``plan_curves.json``: for each kind, a power law ``t = a * (N * d) ** b``
fitted by least squares on log-log axes to the measured points (build seconds, search
milliseconds per query), and the recall@10 measured at the largest N (recall at fixed
settings falls slowly with N, so it is an upper estimate past the measured range).

    agentsearch index plan --vectors 21e6 --dim 768 --ram 16G
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

__all__ = ["bytes_per_vector", "fit_power", "predict", "plan", "parse_size", "main"]

CURVES = Path(__file__).with_name("plan_curves.json")


def bytes_per_vector(kind: str, dim: int, *, hnsw_m: int = 32, pq_m: int | None = None) -> dict:
    """``{"ram": bytes, "disk": bytes}`` a vector of ``kind`` holds (codes, ids, graph links;
    ``disk`` adds what stays in files: ``dense-ivfpq``'s exact vectors for re-ranking)."""
    pq_m = pq_m or max(1, dim // 4)
    links = 2 * hnsw_m * 4 * 1.05  # level-0 neighbour lists of int32, ~5% in upper levels
    ram = {"dense-flat": 4 * dim, "dense-hnsw": 4 * dim + links, "dense-ivf": 4 * dim + 8,
           "dense-ivfpq": pq_m + 8, "dense-hnsw-sq8": dim + links}[kind]
    return {"ram": ram, "disk": ram + (4 * dim if kind == "dense-ivfpq" else 0)}


def fit_power(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``(a, b)`` of ``y = a * x ** b`` by least squares on ``log y = log a + b log x``.
    One point: ``b = 1`` (linear through it)."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if not pts:
        raise ValueError("no positive points to fit")
    if len({x for x, _ in pts}) < 2:
        x, y = pts[0]
        return math.exp(y - x), 1.0
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return math.exp(my - b * mx), b


def predict(points: list[dict], key: str, n: float, dim: int) -> float | None:
    """``key`` at ``n`` vectors of ``dim`` from measured ``points`` (fit on N * d)."""
    pts = [(p["n"] * p["dim"], p[key]) for p in points if p.get(key)]
    if not pts:
        return None
    a, b = fit_power(pts)
    return a * (n * dim) ** b


def parse_size(text: str) -> float:
    """``"16G"`` / ``"512M"`` / ``"2.5T"`` / a number of bytes -> bytes."""
    m = re.fullmatch(r"\s*([\d.]+(?:e\d+)?)\s*([KMGT]?)i?B?\s*", str(text), re.I)
    if not m:
        raise ValueError(f"cannot read a size from {text!r} (e.g. 16G, 512M)")
    return float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " ")


def plan(n: float, dim: int, ram: float | None = None, curves: dict | None = None) -> dict:
    """One row per kind: memory, disk, build hours, recall@10, latency; ``fits`` against ``ram``."""
    if curves is None:
        curves = json.loads(CURVES.read_text()) if CURVES.is_file() else {
            "machine": "nothing (no measured curves shipped: memory only; make them with "
                       "scripts/bench_index_scale.py --curves)",
            "kinds": {k: {"points": []} for k in ("dense-flat", "dense-ivf", "dense-ivfpq",
                                                  "dense-hnsw-sq8")}}
    rows = []
    for kind, c in curves["kinds"].items():
        size = bytes_per_vector(kind, dim, **c.get("params", {}))
        ram_b = size["ram"] * n + c.get("fixed_bytes", 0)
        pts = c["points"]
        build = predict(pts, "build_s", n, dim)
        lat = predict(pts, "search_ms", n, dim)
        top = max(pts, key=lambda p: p["n"]) if pts else {}
        rows.append({"kind": kind, "settings": c.get("settings", ""),
                     "ram_gb": round(ram_b / 2**30, 1),
                     "disk_gb": round((size["disk"] * n + c.get("fixed_bytes", 0)) / 2**30, 1),
                     "build_hours": None if build is None else round(build / 3600, 2),
                     "search_ms": None if lat is None else round(lat, 2),
                     "recall10": top.get("recall10"), "recall_measured_at": top.get("n"),
                     "fits": None if ram is None else ram_b <= ram})
    return {"advice": "extrapolated from measurements; see docs/retrieval.md#planning",
            "vectors": n, "dim": dim,
            "ram_budget_gb": None if ram is None else round(ram / 2**30, 1),
            "measured_on": curves.get("machine", "?"),
            "fit": "power law in N*d, least squares on log-log", "kinds": rows}


def main(a) -> int:
    try:
        ram = parse_size(a.ram) if a.ram else None
        out = plan(float(a.vectors), a.dim, ram,
                   json.loads(Path(a.curves).read_text()) if a.curves else None)
    except (ValueError, OSError) as e:
        print(f"agentsearch index plan: error: {e}")
        return 2
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"Advice, extrapolated from curves measured on {out['measured_on']} ({out['fit']}):")
    print(f"{out['vectors']:,.0f} vectors x {out['dim']} dims"
          + (f", {out['ram_budget_gb']} GiB of RAM" if ram else ""))
    print(f"{'kind':<16}{'RAM GiB':>8}{'disk GiB':>9}{'build h':>9}{'ms/query':>10}"
          f"{'recall@10':>11}  fits  settings")
    for r in out["kinds"]:
        fits = "-" if r["fits"] is None else ("yes" if r["fits"] else "no")
        rec = "-" if r["recall10"] is None else f"{r['recall10']:.3f}"
        print(f"{r['kind']:<16}{r['ram_gb']:>8}{r['disk_gb']:>9}{_fmt(r['build_hours']):>9}"
              f"{_fmt(r['search_ms']):>10}{rec:>11}  {fits:<5} {r['settings']}")
    print("recall@10 is the value measured at the largest measured N (an upper estimate beyond it);"
          " build hours and latency are for the measuring machine's cores.")
    return 0


def _fmt(x) -> str:
    return "-" if x is None else f"{x:g}"
