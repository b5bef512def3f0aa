"""What is known of each record's code (``REVISIONS``), the quoted figures that have no record
(``NO_RECORD``: the page's text must say "no record"), the figures taken out of README.md for
want of one (``REMOVED``), and the reruns that would bring their records back (``RERUNS``:
command, estimated minutes on this 2-core machine; timing ones need an otherwise idle machine).
``scripts/check_results.py`` checks the first two and writes all of them into RECORDS.md."""

from __future__ import annotations

import json
from pathlib import Path

from results_registry import AL, AS, ASYNC, HW, HWP, README, RS, RSD, R

REVISIONS = {  # what is known of each record's code, by path prefix (the longest that matches)
    R: "not recorded (written before records were stamped)",
    AS: "f1c3870+dirty (its suite.json): dirty tree, not citable; the runs' metrics were not kept",
    AL: "f1c3870 (hdr, streaming, overlap; clean or not: not recorded, their suite.json was "
        "overwritten) and c72d544 (oversample, top-up): not citable; the runs' metrics were not "
        "kept",
    RSD: "386f3db at the start, 898736b at the end, tracked files clean; the runs' metrics were "
         "not kept (the suite's JSON line and analysis are)",
    R + "vision/": "8e1135d plus an uncommitted bench-script change (its page): dirty tree, "
                   "not citable",
    R + "learning/": "656fa80 (its page); clean or not: not recorded",
    R + "math/": "6a03ec3 (its page); clean or not: not recorded; the runs' metrics were not kept",
    HWP: "not recorded (archived before runs were stamped); the machines: the calibrations beside "
         "the runs",
}


ROOT = Path(__file__).resolve().parents[1]


def stamps(record: str) -> list[dict]:
    """The provenance stamps a record carries: its run folder's ``provenance.json`` (a training
    run) or the ``provenance`` of its JSON lines (a bench); [] for records written before."""
    path = ROOT / record
    folder = path if path.is_dir() else path.parent
    if (folder / "provenance.json").exists():
        return json.loads((folder / "provenance.json").read_text()).get("sessions", [])
    if path.suffix in (".jsonl", ".json") and path.is_file():
        text = path.read_text()
        lines = [json.loads(text)] if path.suffix == ".json" else \
            [json.loads(ln) for ln in text.splitlines() if ln.strip()]
        return [ln["provenance"] for ln in lines if isinstance(ln, dict) and "provenance" in ln]
    return []


def revision(record: str) -> str:
    """What is known of a record's code: its own stamps where it has them, else ``REVISIONS``."""
    if found := stamps(record):
        revs = ", ".join(dict.fromkeys(st["git"][:7] for st in found))
        clean = all(st.get("clean") for st in found)
        machines = "; ".join(dict.fromkeys(st.get("machine", "?") for st in found))
        return f"{revs} ({'clean tree' if clean else 'dirty tree, not citable'}; {machines})"
    return REVISIONS[max((p for p in REVISIONS if record.startswith(p)), key=len)]


RERUNS = {  # what brings a record back: (command, estimated minutes on this 2-core machine)
    "demo": ("agentsearch demo, keeping its run folder's config.yaml and metrics.jsonl under "
             "docs/results/demo/ (timing: an idle machine)", 5),
    "ci": (".ci/run on a fresh clone (its duration is the figure: an idle machine)", 25),
    "replay": ("python scripts/experiments/replay_suite.py --methods replay --seeds 0 1 2, then "
               "--methods losses, then --search-r1 --seeds 0 1; archive the runs "
               "(hard_world.py archive) (timing)", 40 + 33 + 7),
    "async": ("python scripts/experiments/replay_suite.py --methods async --seeds 0 1 2 "
              "--parallel 1 --out runs/async_suite, then --search-r1 --methods "
              "full_stack_async,search_r1_equivalent --seeds 0 1 2 --latency lognormal:0.2 "
              "--parallel 1 (timing)", 48 + 30 + 26),
    "diagnose": ("agentsearch diagnose --model tiny-chain-base --preset tiny-chains --limit 200 "
                 "env_kwargs.world_seed=S for S in 0 500 1000, and the same for the worlds bases "
                 "(not timing)", 6 * 3),
}

NO_RECORD: list[tuple[str, str, str]] = [  # (quoted text saying "no record", page, rerun)
    ("took about 20 minutes here (no record kept)", README, "ci"),
    ("- **Suite wall-clock:** 40 min (no record).", RS, "replay"),
    ("The suites' wall-clock minutes quoted below have no record.", ASYNC, "async"),
    ("No record was kept of the bases' `agentsearch diagnose` tables, the tokenizer measurements, "
     "the base build times or the load log's timings: those paragraphs' figures have no record.",
     HW, "diagnose"),
]

REMOVED = [  # figures taken out of README.md for want of a record: (figure, rerun)
    ("make test's 19 min 36 s (746 tests in 16 min 10 s) and 23 min 12 s", "ci"),
    ("the demo's earlier seeds and bases: +21.9 to +23.6 points", "demo"),
    ("HDR ~1.55× on-policy GRPO's time to its dev EM on the demo (a training-time ratio: now 1.56× "
     "on-policy's training time, from learning/summary.json)", "replay"),
]
