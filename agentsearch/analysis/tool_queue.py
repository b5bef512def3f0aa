"""What a search service with limited slots adds to a lock-step training step, and runs'
clocks replayed under it (the hard world's latency suites, ``hard_world.py predict``).

The learning of a seeded run does not depend on tool latency (the same tokens and evaluation
scores at every step, measured at latency 0 and 0.2 s), only its clock does. So a run's
training seconds under another service are its own seconds with each step's measured tool
wait (``time/env``) replaced by the wait the service would give that step's calls.
"""

from __future__ import annotations

import random
import statistics

from agentsearch.analysis.runs import Run
from agentsearch.envs.tools.latency import ToolService, lognormal_s

__all__ = ["makespan", "turn_calls", "step_wait", "step_compute", "queued_points", "predict",
           "priced_by_work", "measured_against", "same_seed_ratios"]


def makespan(durations: list[float], slots: int) -> float:
    """Seconds until the last of calls arriving together finishes, served first come first
    served by ``slots`` servers (0: unlimited, all at once)."""
    if not durations:
        return 0.0
    if slots <= 0:
        return max(durations)
    service = ToolService(slots)  # the queue the trainer's searches wait in
    return max(service.reserve(d, now=0.0) for d in durations)


def turn_calls(record: dict) -> list[float]:
    """A logged step's tool calls, turn by turn: ``rollout/tool_calls_by_turn`` where the step
    logged it (lock-step rollouts since it exists; regeneration rounds each count their own
    turns), else the older estimate: ``rollout/tool_calls`` spread evenly over the
    ``rollout/generate_calls - 1`` turns that search (the last turn answers). That estimate is
    wrong under regeneration (every round has an answering turn) and for uneven turns."""
    if (by_turn := record.get("rollout/tool_calls_by_turn")) is not None:
        return [float(c) for c in by_turn]
    calls = float(record.get("rollout/tool_calls", 0))
    turns = int(record.get("rollout/generate_calls", 1))
    searching = max(turns - 1, 1)
    return [round(calls / searching)] * searching


def step_wait(calls_by_turn: list[float], slots: int, mean_s: float, rng: random.Random,
              sigma: float = 0.5) -> float:
    """The tool wait of one lock-step step: each turn's calls arrive together and wait in the
    service (``makespan``), each call log-normal with mean ``mean_s``; turns follow each other."""
    return sum(makespan([lognormal_s(rng, mean_s, sigma) for _ in range(int(c))], slots)
               for c in calls_by_turn)


def step_compute(record: dict, price: dict[str, float]) -> float:
    """A step's compute seconds as its work prices them: ``price`` (``hard_world.work_model``'s)
    per token of each of its keys but ``step``, plus ``price["step"]``."""
    return price["step"] + sum(p * float(record.get(k) or 0.0) for k, p in price.items()
                               if k != "step")


def queued_points(run: Run, slots: int, mean_s: float | None, rng: random.Random,
                  sigma: float = 0.5,
                  price: dict[str, float] | None = None) -> list[tuple[float, float, int]]:
    """The run's evaluation points (seconds, value, step) with every step's ``time/env``
    replaced by ``step_wait`` of its calls turn by turn (``turn_calls``)
    (``mean_s`` None: the measured ``time/env`` kept). With ``price``, every step's compute is
    ``step_compute`` too: a clock that no machine's speed or load enters, only the run's work
    and the service."""
    steps = {r["step"]: r for r in run.records if isinstance(r.get("step"), int) and r["step"] > 0}
    # without a price: the shift of the measured clock (each step's wait swapped in); with one:
    # the whole clock (priced compute plus wait)
    clock, at = 0.0, {}
    for s in sorted(steps):
        r = steps[s]
        wait = float(r.get("time/env") or 0.0) if mean_s is None else step_wait(
            turn_calls(r), slots, mean_s, rng, sigma)
        clock += wait + (step_compute(r, price) if price else -float(r.get("time/env") or 0.0))
        at[s] = clock
    return [((0.0 if price else t) + at.get(step, 0.0), q, step) for t, q, step in run.points]


def predict(runs: list[Run], slots: int, mean_s: float | None,
            target_method: str = "on_policy_larger", share: float = 0.9, seed: int = 0,
            sigma: float = 0.5, price: dict[str, float] | None = None) -> dict:
    """Per method, under a service of ``slots`` x ``mean_s``: the mean time to ``share`` of
    ``target_method``'s mean final score, its ratio to ``target_method``'s mean training time
    (as the report's "ratio") and to its mean time to that target, its mean training time, and
    ``same_seed``: the mean over its runs of each one's time over ``target_method``'s run of the
    same seed (seeds differ in difficulty, so a method with fewer seeds is read against the same
    ones; None unless every such pair reached). ``runs``: loaded, their seconds already on one
    clock; with ``price``, compute priced by work (``queued_points``; ``mean_s`` None: each
    step's measured tool wait kept, the runs' own service with every machine's speed and load
    taken out)."""
    rng = random.Random(seed)
    points = {r.name: queued_points(r, slots, mean_s, rng, sigma, price) for r in runs if r.points}
    ref = [r for r in runs if r.label == target_method and r.points]
    if not ref:
        raise ValueError(f"predict: no {target_method} runs with evaluations: no target")
    target = share * statistics.mean(r.final for r in ref)

    def time_to(r: Run) -> float | None:
        return next((t for t, q, _ in points[r.name] if q >= target - 1e-12), None)

    ref_train = statistics.mean(points[r.name][-1][0] for r in ref)
    ref_hits = [t for t in map(time_to, ref) if t is not None]
    by_seed = {r.seed: time_to(r) for r in ref}
    ref_time = statistics.mean(ref_hits) if ref_hits else None
    rows = []
    for label in sorted({r.label for r in runs if r.points}):
        mine = [r for r in runs if r.label == label and r.points]
        hits = [t for t in map(time_to, mine) if t is not None]
        mean = statistics.mean(hits) if hits else None
        train = statistics.mean(points[r.name][-1][0] for r in mine)
        pairs = [(time_to(r), by_seed[r.seed]) for r in mine if r.seed in by_seed]
        paired = pairs and all(a is not None and b for a, b in pairs)
        rows.append({"method": label, "seeds": len(mine), "reached": f"{len(hits)}/{len(mine)}",
                     "time_to_target": mean, "train_seconds": train,
                     "ratio": None if mean is None else mean / ref_train,
                     "to_reference": None if mean is None or not ref_time else mean / ref_time,
                     "same_seed": statistics.mean(a / b for a, b in pairs) if paired else None})
    return {"slots": slots, "mean_s": mean_s, "target": target, "target_method": target_method,
            "methods": rows}


def priced_by_work(result: dict, model: dict | None) -> list[dict]:
    """Per method of a ``pareto.analyse`` result, ``predict``'s row on the work-priced clock
    (``model``: ``hard_world.work_model`` of the result's runs; each step's tool wait as
    measured) to the result's target. Empty without a model, a target or on_policy_larger runs."""
    score = (result.get("target") or {}).get("score")
    runs = [r for m in result["_methods"] for r in m.usable if r.points]
    finals = [r.final for r in runs if r.label == "on_policy_larger"]
    if model is None or score is None or not finals or statistics.mean(finals) <= 0:
        return []
    return predict(runs, 0, None, share=score / statistics.mean(finals),
                   price=model["price"])["methods"]


def measured_against(run: Run, twin: Run, slots: int, mean_s: float, target: float,
                     price: dict[str, float] | None = None, seed: int = 0,
                     sigma: float = 0.5) -> dict:
    """A run measured under a service of ``slots`` x ``mean_s`` against the prediction made
    from its ``twin`` (the same method and seed at latency 0; finished or not, up to the run's
    last evaluation): whether it learned the same (its evaluations against the twin's at the
    steps both have), its mean tool wait a step against the queue model's for its own calls,
    and its time to ``target`` on three clocks: ``measured`` (its own seconds, as given),
    ``priced`` (its measured waits, compute priced by work; without ``price`` None) and
    ``predicted`` (the twin's run replayed under the service, ``queued_points``)."""
    twin_at = {step: q for _, q, step in twin.points}
    shared = [(q, twin_at[step]) for _, q, step in run.points if step in twin_at]
    last = run.points[-1][2] if run.points else 0
    by_step = {r["step"]: r for r in run.records if isinstance(r.get("step"), int)}
    steps = [r for r in by_step.values()
             if 0 < r["step"] <= last]  # a re-logged step counts once: its last record
    rng = random.Random(seed)
    modelled = [step_wait(turn_calls(r), slots, mean_s, rng, sigma) for r in steps]

    def time_to(points) -> tuple[float | None, int | None]:
        return next(((t, step) for t, q, step in points if q >= target - 1e-12), (None, None))

    twin_cut = Run(path=twin.path, records=twin.records, label=twin.label, seed=twin.seed,
                   points=[p for p in twin.points if p[2] <= last])
    measured, step = time_to(run.points)
    return {"run": run.name, "step": last, "evals_compared": len(shared),
            "max_eval_difference": max((abs(a - b) for a, b in shared), default=None),
            "wait_measured": (statistics.mean(float(r.get("time/env") or 0.0) for r in steps)
                              if steps else None),
            "wait_model": statistics.mean(modelled) if modelled else None,
            "step_to_target": step, "measured": measured,
            "priced": (time_to(queued_points(run, slots, None, rng, sigma, price))[0]
                       if price else None),
            "predicted": time_to(queued_points(twin_cut, slots, mean_s, random.Random(seed),
                                               sigma, price))[0]}


def same_seed_ratios(rows: list[dict], reference: str = "on_policy_larger",
                     clocks: tuple[str, ...] = ("measured", "priced", "predicted")) -> list[dict]:
    """Per ``measured_against`` row (with its ``method`` and ``seed``) of another method than
    ``reference``: its time to the target over ``reference``'s run of the same seed, on each
    clock (None where either did not reach it or the clock is not given)."""
    refs = {r["seed"]: r for r in rows if r["method"] == reference}
    return [{"pair": f"{r['run']} / {refs[r['seed']]['run']}",
             **{c: r[c] / refs[r["seed"]][c] if r[c] and refs[r["seed"]][c] else None
                for c in clocks}}
            for r in rows if r["method"] != reference and r["seed"] in refs]
