"""Run folders as data: curves, method labels, and seeds grouped into methods.

A *run* is a folder with ``metrics.jsonl`` (and, normally, the ``config.yaml`` the trainer
wrote). Its *curve* is one point per evaluation record: (``time/train_cumulative``, the
quality metric, step). A *method* is the set of runs that differ only in their seed (and
settings that do not change what is trained: ``RUN_ONLY_KEYS``; evaluation settings,
``eval.*``, are compared on their own and a message says when they differ); its curve is
the mean and spread over seeds at the evaluation steps all of them share.

Method labels (``label_by="auto"``) come from each run's ``config.yaml``:

- ``replay.kind``: ``none`` -> ``on_policy``; ``on_policy_larger`` when the run generates more
  fresh groups per step (``prompts_per_step``) than the smallest of the runs given; any
  other kind is its own name (``hdr``, ``naive``, ...);
- a loss other than ``grpo`` prefixes it (``gspo_hdr``), ``dynamic_sampling=true`` adds
  ``dapo_`` (``dapo_on_policy``).

Runs that get one such label but whose configs differ in anything else are different
methods: the keys that differ are appended, ``hdr[lr=0.001]`` and ``hdr[lr=0.0001]``, so two
settings are never averaged as if they were seeds. That is the naming of
``scripts/experiments/replay_suite.py``. ``label_by="dir"`` uses the
folder name without a trailing ``-s<seed>``; ``label_by="replay.kind,replay.tau"`` (config
keys, dotted) builds the label from those values. Bad input never raises here: a folder
that cannot be read is returned with ``problems`` and no points, and the caller reports it.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Run", "MethodCurve", "load_run", "load_runs", "group_methods", "mean_std",
           "RUN_ONLY_KEYS"]

_SEED_SUFFIX = re.compile(r"[-_](?:s|seed)(\d+)$")
# config keys that do not change what a run trains (seed, threads, logging and checkpoint
# cadence): runs differing only in these are seeds of one method
RUN_ONLY_KEYS = frozenset({"seed", "threads", "tensorboard", "wandb_project", "checkpoint_every",
                           "eval.every", "sft.log_every", "sft.pretrain_cache",
                           "tool_latency.in_eval"})


@dataclass
class Run:
    """One run folder: its records, its curve of ``metric`` and what was wrong with it."""

    path: Path
    records: list[dict] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    points: list[tuple[float, float, int]] = field(default_factory=list)  # (seconds, value, step)
    problems: list[str] = field(default_factory=list)
    label: str = ""
    seed: int | None = None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def final(self) -> float | None:
        """The metric at the last evaluation."""
        return self.points[-1][1] if self.points else None

    @property
    def train_seconds(self) -> float | None:
        """Training wall-clock at the last evaluation (``time/train_cumulative``)."""
        return self.points[-1][0] if self.points else None


@dataclass
class MethodCurve:
    """Seeds of one method: per shared evaluation step, mean and std of time and metric."""

    label: str
    runs: list[Run]
    steps: list[int] = field(default_factory=list)
    seconds: list[tuple[float, float]] = field(default_factory=list)  # (mean, std) per step
    values: list[tuple[float, float]] = field(default_factory=list)   # (mean, std) per step

    @property
    def usable(self) -> list[Run]:
        return [r for r in self.runs if r.points]

    @property
    def final(self) -> tuple[float, float] | None:
        """Mean and std over seeds of each run's final metric."""
        xs = [r.final for r in self.usable]
        return mean_std(xs) if xs else None

    @property
    def train_seconds(self) -> tuple[float, float] | None:
        xs = [r.train_seconds for r in self.usable]
        return mean_std(xs) if xs else None

    @property
    def on_policy(self) -> bool:
        """All its runs are on-policy (``replay.kind=none``; by label when no config)."""
        kinds = {(r.config.get("replay") or {}).get("kind") for r in self.runs}
        if kinds == {"none"}:
            return True
        return kinds == {None} and "on_policy" in self.label


def cell(x, fmt: str = ".4f", none: str = "-") -> str:
    """A table cell: ``x`` formatted, or ``none`` for a missing value."""
    return none if x is None else format(x, fmt)


def write_csv(path: Path, rows: list[dict], fields: list[str] | None = None) -> Path:
    """``rows`` as CSV with ``fields`` as columns (default: the first row's keys)."""
    import csv

    fields = fields or (list(rows[0]) if rows else ["method"])
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def mean_std(xs: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def _number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _read_records(path: Path, problems: list[str]) -> list[dict]:
    """metrics.jsonl lines as dicts; a torn or non-object line is skipped and counted."""
    records, bad = [], 0
    try:
        if path.suffix == ".gz":  # an archived run (``suite_archive``): the same lines, gzipped
            import gzip

            with gzip.open(path, "rt", errors="replace") as f:
                text = f.read()
        else:
            text = path.read_text(errors="replace")
    except (OSError, EOFError) as e:  # EOFError: a truncated .gz
        problems.append(f"{path.name} cannot be read ({getattr(e, 'strerror', None) or e})")
        return []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(rec, dict):
            records.append(rec)
        else:
            bad += 1
    if bad:
        problems.append(f"{bad} unreadable line(s) in metrics.jsonl skipped "
                        "(a run killed mid-write?)")
    return records


def _read_config(run_dir: Path, problems: list[str]) -> dict:
    path = run_dir / "config.yaml"
    if not path.exists():
        return {}
    import yaml

    try:
        cfg = yaml.safe_load(path.read_text(errors="replace"))
    except (yaml.YAMLError, OSError) as e:
        problems.append(f"config.yaml cannot be read ({str(e).splitlines()[0]}); "
                        "labelled by folder name")
        return {}
    return cfg if isinstance(cfg, dict) else {}


def load_run(run_dir: str | Path, metric: str = "eval/mean_at_n") -> Run:
    """Read one run folder (or an archived one, with ``metrics.jsonl.gz``); what is missing or
    odd goes to ``run.problems``."""
    run = Run(Path(run_dir))
    metrics = run.path / "metrics.jsonl"
    if not metrics.exists() and (run.path / "metrics.jsonl.gz").exists():
        metrics = run.path / "metrics.jsonl.gz"
    if not run.path.is_dir():
        run.problems.append("not a folder")
        return run
    if not metrics.exists():
        run.problems.append("no metrics.jsonl (not a run folder, or the run never logged)")
        return run
    run.records = _read_records(metrics, run.problems)
    run.config = _read_config(run.path, run.problems)
    by_step: dict[int, tuple[float, float, int]] = {}
    untimed = 0
    for rec in run.records:
        value = _number(rec.get(metric))
        if value is None:
            continue
        seconds = _number(rec.get("time/train_cumulative"))
        step = rec.get("step")
        if seconds is None or not isinstance(step, int):
            untimed += 1
            continue
        by_step[step] = (seconds, value, step)  # a re-logged step (resume) keeps its last record
    run.points = sorted(by_step.values(), key=lambda p: p[2])
    if untimed:
        run.problems.append(f"{untimed} '{metric}' record(s) without time/train_cumulative "
                            "or step skipped")
    if not run.points:
        others = sorted({k for rec in run.records for k in rec if k.startswith("eval/")
                         and _number(rec[k]) is not None})
        if others:
            run.problems.append(f"no '{metric}' records; it has {', '.join(others[:6])}"
                                f"{' ...' if len(others) > 6 else ''} (choose one with --metric)")
        else:
            run.problems.append("no evaluation rows (eval/*): the run stopped before its first "
                                "evaluation, or evaluation was off")
    seed = run.config.get("seed")
    m = _SEED_SUFFIX.search(run.name)
    run.seed = int(seed) if isinstance(seed, int) else (int(m.group(1)) if m else None)
    return run


def _get(cfg: dict, dotted: str):
    cur = cfg
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def auto_label(cfg: dict, smallest_pps: int | None, larger_pps: set[int]) -> str | None:
    """The method label of a config (module doc); None without a config."""
    kind = _get(cfg, "replay.kind")
    if kind is None:
        return None
    pps = _get(cfg, "prompts_per_step")
    if kind == "none":
        core = "on_policy"
        if smallest_pps is not None and isinstance(pps, int) and pps > smallest_pps:
            core = "on_policy_larger" if len(larger_pps) == 1 else f"on_policy_pps{pps}"
    else:
        core = str(kind)
    prefix = ""
    loss = _get(cfg, "loss")
    if loss not in (None, "grpo"):
        prefix += f"{loss}_"
    if _get(cfg, "dynamic_sampling") is True:
        prefix += "dapo_"
    return prefix + core


def _dir_label(run: Run) -> str:
    return _SEED_SUFFIX.sub("", run.name) or run.name


def label_runs(runs: list[Run], label_by: str = "auto") -> None:
    """Set every run's ``label`` (module doc)."""
    if label_by == "dir":
        for r in runs:
            r.label = _dir_label(r)
        return
    if label_by != "auto":
        keys = [k.strip() for k in label_by.split(",") if k.strip()]
        for r in runs:
            r.label = (",".join(f"{k}={_get(r.config, k)}" for k in keys) if r.config
                       else _dir_label(r))
        return
    pps = [p for r in runs if isinstance(p := _get(r.config, "prompts_per_step"), int)]
    smallest = min(pps) if pps else None
    larger = {_get(r.config, "prompts_per_step") for r in runs
              if _get(r.config, "replay.kind") == "none" and smallest is not None
              and isinstance(_get(r.config, "prompts_per_step"), int)
              and _get(r.config, "prompts_per_step") > smallest}
    for r in runs:
        r.label = auto_label(r.config, smallest, larger) or _dir_label(r)
    _split_differing_configs(runs)


def _flat(cfg: dict, prefix: str = "") -> dict[str, str]:
    """Dotted key -> the value as JSON text (comparable, hashable)."""
    out = {}
    for k, v in cfg.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = json.dumps(v, sort_keys=True, default=str)
    return out


def _split_differing_configs(runs: list[Run]) -> None:
    """Within each label, runs whose configs differ beyond ``RUN_ONLY_KEYS`` get the keys that
    differ appended to the label (module doc); runs without a config keep theirs."""
    by_label: dict[str, list[Run]] = {}
    for r in runs:
        if r.config:
            by_label.setdefault(r.label, []).append(r)
    for label, members in by_label.items():
        flats = [_flat(r.config) for r in members]
        keys = sorted(k for k in {k for f in flats for k in f} - RUN_ONLY_KEYS
                      if not k.startswith("eval."))
        differ = [k for k in keys if len({f.get(k, "null") for f in flats}) > 1]
        for r, f in zip(members, flats):
            if differ:
                r.label = label + "[" + ",".join(f"{k}={_show(f.get(k, 'null'))}"
                                                 for k in differ) + "]"


def _show(text: str) -> str:
    v = json.loads(text)
    return "None" if v is None else (v if isinstance(v, str) else json.dumps(v))


def load_runs(run_dirs, metric: str = "eval/mean_at_n", label_by: str = "auto") -> list[Run]:
    """``load_run`` for each folder, then labels."""
    runs = [load_run(d, metric) for d in run_dirs]
    label_runs(runs, label_by)
    return runs


def group_methods(runs: list[Run]) -> tuple[list[MethodCurve], list[str]]:
    """Runs grouped by label (first-seen order) with their mean curves; and messages about
    seeds that evaluated at different steps (the mean uses the steps all of them have)."""
    order: dict[str, list[Run]] = {}
    for r in runs:
        order.setdefault(r.label, []).append(r)
    methods, messages = [], []
    for label, members in order.items():
        mc = MethodCurve(label, members)
        usable = mc.usable
        if usable:
            step_sets = [{p[2] for p in r.points} for r in usable]
            common = sorted(set.intersection(*step_sets))
            if any(s != step_sets[0] for s in step_sets):
                messages.append(f"{label}: its {len(usable)} seeds evaluated at different steps; "
                                f"the mean curve uses the {len(common)} step(s) they share")
            for step in common:
                pts = [next(p for p in r.points if p[2] == step) for r in usable]
                mc.steps.append(step)
                mc.seconds.append(mean_std([p[0] for p in pts]))
                mc.values.append(mean_std([p[1] for p in pts]))
        methods.append(mc)
    evals = {json.dumps({k: v for k, v in (r.config.get("eval") or {}).items() if k != "every"},
                        sort_keys=True) for r in runs if r.points and r.config.get("eval")}
    if len(evals) > 1:
        messages.append("the runs were evaluated with different settings (eval.split/limit/n/"
                        "temperature differ): their scores are not comparable")
    return methods, messages
