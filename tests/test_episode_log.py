"""``trainer/episode_log.py``: a step's stored episodes are the rows the update took (the stored
ids and action mask, cut after the last policy token), the extreme-advantage rows of the first
fresh and replayed groups with signal, with the gate's drift and headroom on replayed ones; the
scan's per-group records; and a resume drops the lines of later steps."""

import json

import pytest
import torch

from agentsearch.replay import ReplayGroup, Selection
from agentsearch.replay.stats import ScanRecord
from agentsearch.trainer.episode_log import EPISODES_FILE, SCAN_FILE, EpisodeLog


class IdTokenizer:
    """Decodes token ``i`` as ``<i>``."""

    def batch_decode(self, seqs):
        return [f"<{s[0]}>" for s in seqs]


def _group(pid, masks, advantages, born=1):
    """A group whose row r holds ids 100*r + t; masks are strings, shorter rows padded."""
    width = max(len(m) for m in masks)
    ids = torch.tensor([[100 * r + t for t in range(width)] for r in range(len(masks))])
    mask = torch.tensor([[c == "1" for c in m.ljust(width, "0")] for m in masks])
    n = len(masks)
    return ReplayGroup(prompt_id=pid, token_ids=ids, action_mask=mask,
                       gen_logprobs=torch.full((n, width), -1.0) * mask,
                       advantages=torch.tensor(advantages), rewards=torch.tensor(
                           [float(a > 0) for a in advantages]),
                       answer_correct=torch.tensor([a > 0 for a in advantages]), born_step=born)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_step_stores_the_extreme_rows_of_a_fresh_and_a_replayed_group_as_the_loss_saw_them(
        tmp_path):
    flat = _group("flat", ["0011", "0011"], [0.0, 0.0])  # no signal: not shown
    # env tokens after the last policy token and trailing padding are not in the update's row
    fresh = _group("q1", ["0011001000", "00111", "0001100"], [0.5, -1.5, 1.2], born=5)
    replayed = _group("q0", ["0110", "0111010"], [1.0, -1.0], born=2)
    records = [ScanRecord(0.9, 0.05, 0.05, 6, passed=False, accepted=False, age=4),
               ScanRecord(0.4, 0.003, 0.003, 7, passed=True, accepted=True, age=3)]
    log = EpisodeLog(tmp_path, IdTokenizer())
    log.write(5, [flat, fresh], Selection(accepted=[replayed], scanned=2, records=records))

    eps = _lines(tmp_path / EPISODES_FILE)
    assert [(e["source"], e["group"], e["row"]) for e in eps] == [
        ("fresh", "q1", 2), ("fresh", "q1", 1), ("replay", "q0", 0), ("replay", "q0", 1)]
    assert [e["action_mask"] for e in eps] == ["00011", "00111", "011", "011101"]
    assert eps[0]["token_ids"] == [200, 201, 202, 203, 204]
    assert eps[0]["tokens"] == ["<200>", "<201>", "<202>", "<203>", "<204>"]
    assert eps[3]["token_ids"] == [100 + t for t in range(6)]
    assert [e["advantage"] for e in eps] == pytest.approx([1.2, -1.5, 1.0, -1.0])
    assert [e["reward"] for e in eps] == [1.0, 0.0, 1.0, 0.0]
    assert [e["correct"] for e in eps] == [True, False, True, False]
    assert [e["born_step"] for e in eps] == [5, 5, 2, 2] and {e["step"] for e in eps} == {5}
    # the gate's values of the group it accepted, not of the one it rejected
    assert "drift" not in eps[0]
    assert eps[2]["drift"] == pytest.approx(0.003) and eps[2]["headroom"] == pytest.approx(0.4)

    (scan,) = _lines(tmp_path / SCAN_FILE)
    assert scan == {"step": 5, "drift": pytest.approx([0.05, 0.003]),
                    "headroom": pytest.approx([0.9, 0.4]), "age": [4, 3], "passed": "01",
                    "accepted": "01"}


def test_without_replay_a_second_fresh_group_is_shown_and_no_scan_is_written(tmp_path):
    a = _group("a", ["011", "011"], [1.0, -1.0])
    b = _group("b", ["0101", "0111"], [-0.5, 0.5])
    c = _group("c", ["01", "01"], [1.0, -1.0])
    EpisodeLog(tmp_path, IdTokenizer()).write(1, [a, b, c], Selection())
    eps = _lines(tmp_path / EPISODES_FILE)
    assert [(e["group"], e["row"]) for e in eps] == [("a", 0), ("a", 1), ("b", 1), ("b", 0)]
    assert not (tmp_path / SCAN_FILE).exists()


def test_a_resume_drops_the_lines_after_its_checkpoint_and_a_torn_last_line(tmp_path):
    g = _group("a", ["011", "011"], [1.0, -1.0])
    records = [ScanRecord(0.5, 0.001, 0.001, 2, passed=True, accepted=True, age=1)]
    log = EpisodeLog(tmp_path, IdTokenizer())
    for step in (1, 2, 3):
        log.write(step, [g], Selection(accepted=[g], scanned=1, records=records))
    with open(tmp_path / EPISODES_FILE, "a") as f:
        f.write('{"step": 4, "source": "fr')  # killed mid-write
    EpisodeLog(tmp_path, IdTokenizer(), keep_through=2)
    assert sorted({e["step"] for e in _lines(tmp_path / EPISODES_FILE)}) == [1, 2]
    assert [s["step"] for s in _lines(tmp_path / SCAN_FILE)] == [1, 2]
