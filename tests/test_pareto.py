import json
from types import SimpleNamespace

from agentsearch.analysis.pareto import main, pareto_frontier, run_curve


def test_frontier_keeps_only_undominated_points():
    pts = [(10, 0.2), (20, 0.1), (30, 0.4), (40, 0.4), (5, 0.05), (25, 0.3)]
    # (20, 0.1) is beaten by (10, 0.2); (40, 0.4) by (30, 0.4)
    assert pareto_frontier(pts) == [(5, 0.05), (10, 0.2), (25, 0.3), (30, 0.4)]


def test_curves_from_run_folders(tmp_path):
    for name, qs in (("a", [0.1, 0.3]), ("b", [0.1, 0.2])):
        run = tmp_path / name
        run.mkdir()
        recs = [{"step": 0, "time/train_cumulative": 0.0, "eval/mean_at_n": qs[0]},
                {"step": 1, "time/train_cumulative": 5.0},
                {"step": 2, "time/train_cumulative": 10.0 if name == "a" else 4.0, "eval/mean_at_n": qs[1]}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert run_curve(tmp_path / "a") == [(0.0, 0.1, 0), (10.0, 0.3, 2)]
    out = tmp_path / "p.json"
    assert main(SimpleNamespace(runs=[tmp_path / "a", tmp_path / "b"], metric="eval/mean_at_n", out=str(out))) == 0
    summary = json.loads(out.read_text())
    assert [r["final"] for r in summary["runs"]] == [0.3, 0.2]
    assert summary["frontier"] == [[0.0, 0.1], [4.0, 0.2], [10.0, 0.3]]
