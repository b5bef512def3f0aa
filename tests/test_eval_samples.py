"""``write_samples`` (``agentsearch eval --samples F --samples-per-type K``): the first K
questions of each type, their first sample each, decoded with the reward and the gold."""

from types import SimpleNamespace

from agentsearch.trainer.eval import write_samples


class _Tok:
    def decode(self, ids):
        return " ".join(f"t{i}" for i in ids)


def _episode(i: int, correct: bool):
    return SimpleNamespace(reward=float(correct), reward_components={"reward/em": float(correct)},
                           answer_correct=correct, info={"tool_calls": 1}, token_ids=[i, i + 1])


def test_samples_per_type_picks_the_first_k_of_each_type_first_sample(tmp_path):
    tasks = [{"type": t, "golden_answers": [f"g{i}"]}
             for i, t in enumerate(["name", "year", "name", "name", "year"])]
    n = 2  # two samples per question: only each question's first is decoded
    episodes = [_episode(10 * q + s, correct=(s == 0)) for q in range(len(tasks)) for s in range(n)]
    out = tmp_path / "s.txt"
    write_samples(episodes, tasks, n, out, tokenizer=_Tok(), per_bucket=2)
    blocks = out.read_text().split("=== ")[1:]
    assert [b.split(" | ")[0] for b in blocks] == ["name", "year", "name", "year"]
    assert [b.split("gold ")[1].splitlines()[0] for b in blocks] == \
        ["['g0']", "['g1']", "['g2']", "['g4']"]
    assert "t0 t1" in blocks[0] and "t40 t41" in blocks[3]  # question 4's first sample
    assert all("correct True" in b and "reward/em=1" in b for b in blocks)
    write_samples(episodes, tasks, n, out, tokenizer=_Tok(), per_bucket=5)
    assert len(out.read_text().split("=== ")[1:]) == 5
