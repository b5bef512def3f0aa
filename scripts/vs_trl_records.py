"""The side-by-side's records (``bench_vs_trl.py keep`` / ``summary``): a finished run's records
kept in the repository, and per run and per arm the training seconds to the target."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

from agentsearch.recipes.runner import run_finished


def finished(folder: Path) -> bool:
    """A TRL run that wrote ``DONE`` or an agentsearch run that saved its final weights."""
    return (folder / "DONE").exists() or run_finished(folder)


def keep(out: Path, to: Path, settings: dict, latency: dict) -> dict:
    """Each finished run's records from ``out`` into ``to/<run>``: metrics, provenance,
    agentsearch's resolved config or TRL's last ``trainer_state.json``, and the shared
    ``settings`` it ran under (``latency`` added for a ``-lat-`` run); no weights."""
    kept = []
    for folder in sorted(p for p in out.glob("*-seed*") if finished(p)):
        dest = to / folder.name
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("metrics.jsonl", "provenance.json", "config.yaml"):
            if (folder / name).exists():
                shutil.copy2(folder / name, dest / name)
        states = sorted((folder / "trl").glob("checkpoint-*/trainer_state.json"),
                        key=lambda f: int(f.parent.name.split("-")[1]))
        if states:
            shutil.copy2(states[-1], dest / "trl_trainer_state.json")
        record = {**settings, "latency": latency if "-lat-" in folder.name else None}
        (dest / "settings.json").write_text(json.dumps(record, indent=1) + "\n")
        kept.append(folder.name)
    return {"kept": kept, "to": str(to)}


def time_to_target(rows: list[dict], target: float) -> tuple[float | None, float | None]:
    """(training seconds at the first eval at or above ``target``, or None; the last eval's
    dev EM)."""
    evals = [r for r in rows if "eval/mean_at_n" in r]
    hit = next((r for r in evals if r["eval/mean_at_n"] >= target), None)
    seconds = None if hit is None else float(hit.get("time/train_cumulative", 0.0))
    return seconds, (evals[-1]["eval/mean_at_n"] if evals else None)


PHASES = ("generate", "env", "reward", "logprobs", "update")
"""The per-step phases both systems log (``time/<phase>``; TRL's: ``trl_peer.step_phases``)."""


def median_phases(steps: list[dict]) -> dict[str, float]:
    """Each phase's median seconds over the steps that logged it."""
    return {p: statistics.median(r[f"time/{p}"] for r in steps if f"time/{p}" in r)
            for p in PHASES if any(f"time/{p}" in r for r in steps)}


def cpu_kind(folder: Path) -> str:
    """The run's CPU capability as torch named it in ``provenance.json`` (``AVX2``, ``AVX512``,
    ...; ``mixed`` when a resumed run's sessions ran on different kinds, ``unknown`` without
    one): the bf16 engine and the fp32 kernels run at different speeds on each, so times
    compare only within one kind."""
    try:
        prov = json.loads((folder / "provenance.json").read_text())
    except (OSError, ValueError):
        return "unknown"
    machines = [x.get("machine", "") for x in prov.get("sessions", [prov])]
    kinds = {m.group(1) if (m := re.search(r"torch \S+ (\w+)", x)) else "unknown"
             for x in machines}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def generated_tokens(row: dict, rollouts: int) -> float | None:
    """The policy's sampled tokens in one step, tool results not counted: agentsearch logs
    ``tokens/generated``; TRL the mean model-token count per completion (its
    ``completions/mean_length`` counts ``tool_mask`` = 1 only) over ``rollouts`` completions."""
    if "tokens/generated" in row:
        return float(row["tokens/generated"])
    if "trl/completions/mean_length" in row:
        return float(row["trl/completions/mean_length"]) * rollouts
    return None


def token_rates(steps: list[dict], rollouts: int) -> dict[str, float]:
    """Median generated tokens per second of step and per second of the generate phase."""
    out = {}
    for name, key in (("tokens_per_step_s", "time/step"), ("tokens_per_generate_s",
                                                            "time/generate")):
        rates = [n / r[key] for r in steps
                 if (n := generated_tokens(r, rollouts)) is not None and r.get(key)]
        if rates:
            out[name] = statistics.median(rates)
    return out


def json_rows(folder: Path) -> list[dict]:
    """A run's ``metrics.jsonl`` records."""
    with open(folder / "metrics.jsonl", encoding="utf-8") as f:
        return [json.loads(x) for x in f]


def run_line(folder: Path, target: float, rollouts: int) -> dict:
    """One run's figures: time to ``target``, final dev EM, steps, seconds and tokens/s."""
    rows = json_rows(folder)
    t, final = time_to_target(rows, target)
    steps = [r for r in rows if "time/step" in r]
    first = next((r["eval/mean_at_n"] for r in rows if "eval/mean_at_n" in r), None)
    return {"bench": "vs_trl", "run": folder.name, "cpu": cpu_kind(folder), "target": target,
            "seconds_to_target": t, "first_dev_em": first, "final_dev_em": final,
            "training_s": max((r.get("time/train_cumulative", 0.0) for r in rows), default=0.0),
            "steps": len(steps), "median_step_s":
            statistics.median(r["time/step"] for r in steps) if steps else None,
            "median_phase_s": median_phases(steps), **token_rates(steps, rollouts)}


def summary(out: Path, target: float, rollouts: int) -> list[dict]:
    """One line per run in ``out`` (``<arm>[-lat]-seed<k>``, ``rollouts`` completions a step)
    and, for each latency setting and CPU kind, one per arm's ratio of mean time to target over
    TRL's on the same kind: runs on different CPU kinds are never paired. A TRL run that ended
    short of the target took more than its training seconds: with one, the ratio is a bound
    (``ratio_to_trl_at_most``)."""
    lines, runs = [], {}
    for folder in sorted(out.glob("*-seed*")):
        if not (folder / "metrics.jsonl").exists():
            continue
        arm, _ = folder.name.rsplit("-seed", 1)
        latency = arm.endswith("-lat")
        arm = arm.removesuffix("-lat")
        line = {**run_line(folder, target, rollouts), "arm": arm, "latency": latency}
        lines.append(line)
        runs.setdefault((latency, line["cpu"]), {}).setdefault(arm, []).append(line)
    for (latency, cpu), arms in sorted(runs.items()):
        ref = arms.get("trl", [])
        bound = any(x["seconds_to_target"] is None for x in ref)
        ref_s = [x["training_s"] if x["seconds_to_target"] is None else x["seconds_to_target"]
                 for x in ref]
        for arm, got in arms.items():
            reached = [x["seconds_to_target"] for x in got if x["seconds_to_target"] is not None]
            if arm != "trl" and reached and ref_s:
                ratio = statistics.mean(reached) / statistics.mean(ref_s)
                lines.append({"bench": "vs_trl_ratio", "arm": arm, "latency": latency,
                              "cpu": cpu, "target": target,
                              ("ratio_to_trl_at_most" if bound else "ratio_to_trl"): ratio,
                              "seeds": len(reached), "of_seeds": len(got),
                              "trl_seeds": len(ref_s), "trl_short_of_target": sum(
                                  x["seconds_to_target"] is None for x in ref)})
    return lines


COLUMNS = (("cpu", None), ("step-0 EM", "first_dev_em"), ("last EM", "final_dev_em"),
           ("s to target", "seconds_to_target"), ("steps", "steps"),
           ("s/step", "median_step_s"), ("generate", "generate"), ("env", "env"),
           ("logprobs", "logprobs"), ("update", "update"), ("tokens/s", "tokens_per_step_s"))
"""The measured table's columns after the run's name: (header, field of a run line or phase
of its ``median_phase_s``; None: printed as is). Seconds are medians over the run's steps."""


def field_of(line: dict, field: str):
    """A run line's ``field``, or the median seconds of the phase so named."""
    return line.get(field, line["median_phase_s"].get(field))


def cell(line: dict, field: str | None, header: str) -> str:
    """One table cell of a run line as the page prints it (``-``: no value)."""
    if field is None:
        return str(line[header])
    value = field_of(line, field)
    if value is None:
        return "-"
    if field in ("first_dev_em", "final_dev_em"):
        return f"{value:.3f}"
    return f"{value:,.0f}" if field in ("steps", "seconds_to_target") else f"{value:,.1f}"


def markdown(lines: list[dict]) -> str:
    """The measured table (one row per run line of ``summary``), as docs/from-trl.md prints it."""
    head = ["run", *(h for h, _ in COLUMNS)]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for line in (x for x in lines if x["bench"] == "vs_trl"):
        rows.append("| " + " | ".join([line["run"], *(cell(line, f, h) for h, f in COLUMNS)])
                    + " |")
    return "\n".join(rows)
