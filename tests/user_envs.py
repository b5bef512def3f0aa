"""A user-written env shared by the rollout tests (conftest puts this folder on sys.path)."""

from agentsearch.envs.rewards import AnswerScore
from agentsearch.envs.text_env import TextEnv


class CountingEnv(TextEnv):
    """A conforming user env: ends after 3 turns, reward 0.25 per turn and 1.0 at the end,
    returned by ``step``. ``named=True`` also reports them as two named components
    (``reward/progress`` 0.25 a turn, ``reward/answer`` 0.75 at the end); subclasses change
    the info through ``_info``."""

    named = False

    def __init__(self, *, named: bool | None = None, **kw):
        if named is not None:
            self.named = named
        super().__init__(chat_template="none", **kw)

    def load_tasks(self):
        return [{"id": "c", "question": "count", "golden_answers": ["3"]}]

    def instructions(self, task):
        return [{"role": "user", "content": task["question"]}]

    def score(self, answer, task):
        return AnswerScore(answer == "3", float(answer == "3"))

    def _info(self, done: bool) -> dict:
        info = {"answer_correct": True if done else None}
        if self.named:
            info.update({"reward/progress": 0.25, "reward/answer": 0.75 if done else 0.0})
        return info

    async def astep(self, action):
        self._turn += 1
        done = self._turn >= 3
        return ("" if done else " more"), 1.0 if done else 0.25, done, False, self._info(done)
