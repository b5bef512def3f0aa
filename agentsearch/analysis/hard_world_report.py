"""The hard world's report (docs/results/hard_world.md): the tables of ``analysis.hard_world``
written as markdown and CSV for one suite, for ``hard_world.py report``.

The numbers are computed in ``analysis.hard_world`` (method table, final evaluations, the load
check and its work model) and ``analysis.tool_queue`` (the work-priced clock); this module only
lays them out.
"""

from __future__ import annotations

from pathlib import Path

from agentsearch.analysis.hard_world import (
    MECHANISM,
    SLOWED,
    _mean_metric,
    _usable,
    costs_to,
    finals_table,
    method_table,
    pace,
    work_model,
)
from agentsearch.analysis.runs import cell, write_csv
from agentsearch.analysis.tool_queue import priced_by_work

__all__ = ["report"]


def report(result: dict, out: Path, title: str = "",
           evals: dict[str, dict] | None = None) -> list[Path]:
    """``hard_world.md`` (the tables), ``hard_world.csv``, ``pace.csv`` and the CSVs beside them
    (``finals``, ``priced``, ``replay_runs``: the replay table run by run) into ``out``; returns
    the paths. Seconds are on the clock the result was analysed with (``time_scale``: analyse
    with ``calibration_factor`` to put runs from different machines on the reference's)."""
    rows = method_table(result)
    out.mkdir(parents=True, exist_ok=True)
    tgt = result.get("target") or {}
    lines = [f"### {title}" if title else "", "",
             f"Target {cell(tgt.get('score'))} ({tgt.get('reason', 'none')}); horizon for the area "
             f"{cell(tgt.get('baseline_train_seconds'), '.0f')} s.", "",
             "| method | seeds | final dev EM (mean ± std) | 95% CI | train s | reached | "
             "time to target (s) | share of ref. training time | episodes to target | "
             "tool calls to target | time-avg EM | k=1 | k=2 | k=3 | k=4 | "
             "zero-var share | mean abs A |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['seeds']} | "
                     f"{cell(r['final_mean'], '.3f')} ± {cell(r['final_std'], '.3f')} | "
                     f"[{cell(r['ci_lo'], '.3f')}, {cell(r['ci_hi'], '.3f')}] | "
                     f"{cell(r['train_s_mean'], '.0f')} | "
                     f"{r['reached']} | {cell(r['time_to_target'], '.0f', 'never')} | "
                     f"{cell(r['ratio'], '.2f', '-')} | "
                     f"{cell(r['episodes_to_target'], '.0f', '-')} | "
                     f"{cell(r['tool_calls_to_target'], '.0f', '-')} | "
                     f"{cell(r['auc'], '.3f')} | "
                     + " | ".join(cell(r[f'final_k{k}'], '.3f') for k in (1, 2, 3, 4))
                     + f" | {cell(r['zero_var'], '.2f')} | {cell(r['abs_adv'], '.3f')} |")
    replay = [r for r in rows if r["scanned"]]  # on-policy runs log zeros
    if replay:
        lines += ["", "Replay: per-step means over each run, then over seeds (accept rate: "
                  "accepted over scanned groups; the τ / k_rep sweep's arms are named for what "
                  "they change).", "",
                  "| method | seeds | accept rate | scanned / step | replayed / step | "
                  "age of replayed (steps) | final | share of ref. training time |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['method']} | {r['seeds']} | {cell(r['accept'], '.3f')} | "
                  f"{cell(r['scanned'], '.2f')} | "
                  f"{cell(r['replayed'], '.2f')} | {cell(r['age'], '.1f')} | "
                  f"{cell(r['final_mean'], '.3f')} | "
                  f"{cell(r['ratio'], '.2f', '-')} |" for r in replay]
    per_run = [{"run": r.name, "method": m.label, "seed": r.seed, "final": r.final,
                "step_to_target": (costs_to(r, tgt["score"])["step"]
                                   if tgt.get("score") is not None else None),
                **{k: _mean_metric(r, MECHANISM[k])
                   for k in ("accept", "scanned", "replayed", "age")}}
               for m in result["_methods"] for r in m.usable]
    per_run = [r for r in per_run if r["scanned"]]  # as the replay table: on-policy runs log zeros
    finals = finals_table(result["_methods"], evals or {})
    if finals:
        lines += ["", "Final models (`hard_world.py finals`): pass@k of 8 samples at temperature "
                  "1 and greedy on the dev slice, greedy on a world never used in development, "
                  "per-hop success of the greedy episodes.",
                  "", "| method | runs | pass@1 | pass@4 | pass@8 | greedy | unseen world | "
                  "hop 2 | hop 3 | hop 4 |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['method']} | {r['runs']} | " + " | ".join(cell(r[k], '.3f') for k in (
            "pass_at_1", "pass_at_4", "pass_at_8", "greedy", "unseen_world", "hop2", "hop3",
            "hop4")) + " |"
            for r in finals]
    loads = pace(result)
    model = work_model(_usable(result))
    prices = (", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in model["price"].items()) if model
              else "none (too few runs)")
    lines += ["", "Load check: seconds per training step (every time in these tables is scaled to "
              "the reference machine by the run's factor where a calibration precedes the run) "
              "against what the run's work predicts (a non-negative least-squares price per "
              f"token and per step over this suite's runs: {prices}; work ratio: compute seconds "
              "over predicted) and against the method's median over seeds (slowed: work "
              f"ratio above {SLOWED}; rerun), and the runs it shared the machine with.", "",
              "| run | s/step | factor | work predicts | work ratio | method median | ratio | "
              "slowed | shared the machine with |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['run']} | {r['s_per_step']:.2f} | {cell(r['factor'], '.3f')} | "
              f"{cell(r['expected_s_per_step'], '.2f')} | {cell(r['work_ratio'], '.2f')} | "
              f"{r['method_median']:.2f} | "
              f"{cell(r['ratio'], '.2f')} | {'yes' if r['slowed'] else ''} | "
              f"{r['shared_with'] or '-'} |"
              for r in loads]
    priced = priced_by_work(result, model)
    if priced:
        lines += ["", "Priced by work, predicted: the same runs on a clock no machine's speed or "
                  "load enters (a fitted model, not a measurement), each step's compute at the "
                  "load check's prices and its tool wait as measured (share: of "
                  "on_policy_larger's mean training time, as above; speed-up: over "
                  "on_policy_larger's own mean time to the target; same seeds: the mean of each "
                  "run's time over on_policy_larger's run of its seed).", "",
                  "| method | seeds | reached | time to target (s) | share | speed-up | "
                  "same seeds | train s |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['method']} | {r['seeds']} | {r['reached']} | "
                  f"{cell(r['time_to_target'], '.0f', 'never')} | "
                  f"{cell(r['ratio'], '.2f', '-')} | {cell(r['to_reference'], '.2f', '-')} | "
                  f"{cell(r['same_seed'], '.2f', '-')} | "
                  f"{r['train_seconds']:.0f} |"
                  for r in priced]
    md = out / "hard_world.md"
    md.write_text("\n".join(lines) + "\n")
    csv = write_csv(out / "hard_world.csv", rows)
    # replay_runs.csv: the replay table, run by run
    return [md, csv, write_csv(out / "pace.csv", loads)] \
        + ([write_csv(out / "finals.csv", finals)] if finals else []) \
        + ([write_csv(out / "priced.csv", priced)] if priced else []) \
        + ([write_csv(out / "replay_runs.csv", per_run)] if per_run else [])
