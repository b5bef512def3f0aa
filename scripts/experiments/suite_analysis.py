"""What a hard-world suite's finished runs say (``hard_world.py report`` / ``predict``): the
report's tables per suite folder, and the queue model's prediction of a latency suite (with its
test against the runs made under that service). Reads run folders and writes only under
``SUITE/analysis/``; trains nothing (``hard_world.py``'s module doc describes the commands)."""

from __future__ import annotations

import json
import sys
from functools import cache, partial
from pathlib import Path

from agentsearch.analysis.archive import reference_clock

__all__ = ["report", "predict"]


def _finished_runs(suite: Path) -> tuple[list[Path], list[str]]:
    """``archive.finished_runs``; the unfinished ones are named on stderr and left out."""
    from agentsearch.analysis.archive import finished_runs

    runs, unfinished = finished_runs(suite)
    if unfinished:
        print(f"[hard_world] {suite.name}: left out, not finished: {', '.join(unfinished)}",
              file=sys.stderr)
    return runs, unfinished


def predict(a) -> int:
    """The suite's finished runs replayed under a search service of ``--concurrency`` slots and
    ``--mean`` seconds a call (``analysis.tool_queue``): one JSON line of per-method times to
    the target (90% of on_policy_larger's final) and ratios."""
    from agentsearch.analysis.hard_world import work_model
    from agentsearch.analysis.pareto import analyse
    from agentsearch.analysis.tool_queue import predict as predict_on

    @cache  # --priced-by the suite itself: analysed once
    def loaded(suite: Path) -> list:
        return analyse(_finished_runs(suite)[0], label_by="dir",
                       time_scale=reference_clock(suite))["_runs"]

    price = None
    if a.priced_by:  # one price list, fitted over a suite's runs on the reference clock
        model = work_model(loaded(Path(a.priced_by)))
        if model is None:
            raise SystemExit(f"predict: too few finished runs in {a.priced_by} "
                             "to fit the work model")
        price = model["price"]
    out = predict_on(loaded(Path(a.suite)), a.concurrency, a.mean, seed=a.seed, price=price)
    print(json.dumps({"suite": a.suite, "priced_by": a.priced_by, "price": price, **out}))
    if a.measured:  # the prediction's test: the service's own runs, finished or not
        _measured(Path(a.measured), loaded(Path(a.suite)), a, out["target"], price)
    return 0


def _measured(suite: Path, twins: list, a, target: float, price: dict | None) -> None:
    """``--measured``: each of SUITE's runs against its twin (``tool_queue.measured_against``),
    then per seed each method's time over on_policy_larger's on each clock; JSON lines on stdout
    and in SUITE/analysis/measured.jsonl."""
    from agentsearch.analysis.pareto import analyse
    from agentsearch.analysis.tool_queue import measured_against, same_seed_ratios

    started = sorted(r for r in suite.iterdir() if (r / "metrics.jsonl").exists())
    twin = {r.name: r for r in twins}
    rows = [dict(measured_against(r, twin[r.name], a.concurrency, a.mean, target, price, a.seed),
                 seed=r.seed, method=r.label)
            for r in analyse(started, label_by="dir", time_scale=reference_clock(suite))["_runs"]
            if r.name in twin and r.points]
    rows += same_seed_ratios(rows)
    (suite / "analysis").mkdir(exist_ok=True)
    (suite / "analysis" / "measured.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print("".join(json.dumps(r) + "\n" for r in rows), end="")


def report(a) -> int:
    """Per suite: the pre-registered target (90% of on_policy_larger's final, ratios to its
    wall-clock) with pareto's outputs and the hard-world table; and the HDR paper's own test,
    the time to 100% of on_policy_larger's final."""
    from agentsearch.analysis.hard_world_report import report as write_report
    from agentsearch.analysis.pareto import analyse as analyse_on
    from agentsearch.analysis.pareto import write_outputs

    for suite in map(Path, a.suites):
        runs, unfinished = _finished_runs(suite)
        analyse = partial(analyse_on, label_by="dir", time_scale=reference_clock(suite))
        full = analyse(runs)
        base = next((m for m in full["methods"] if m["method"] == "on_policy_larger"), None)
        if not full["ok"] or base is None or base["final_mean"] is None:
            print(json.dumps({"suite": str(suite), "ok": False,
                              "messages": full["messages"][-5:] +
                              ([] if base else ["no on_policy_larger runs: no target"])}))
            continue
        result = analyse(runs, target_method="on_policy_larger",
                         target_score=0.9 * base["final_mean"])
        write_outputs(result, suite / "analysis" / "pareto.png")
        evals = {r.name: json.loads((r / "final_evals.json").read_text()) for r in runs}
        write_report(result, suite / "analysis",
                     title=f"{suite.name}: target 90% of on_policy_larger's final", evals=evals)
        write_report(full, suite / "analysis" / "paper_target",
                     title=f"{suite.name}: target 100% of on_policy_larger's final "
                     "(the HDR paper's test)")
        (suite / "analysis" / "final_evals.json").write_text(json.dumps(evals, indent=1))
        paper = {m["method"]: m["ratio_mean"] for m in full["methods"]}
        print(json.dumps({"suite": str(suite), "ok": True, "unfinished": unfinished,
                          "target": result["target"],
                          "methods": {m["method"]: {"final": m["final_mean"],
                                                    "ratio_to_90pct": m["ratio_mean"],
                                                    "reached": m["reached"],
                                                    "ratio_to_100pct": paper.get(m["method"])}
                                      for m in result["methods"]}}))
    return 0
