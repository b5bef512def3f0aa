"""Questions about pictures, with a zoom tool: ``agentsearch/Vision-v0``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gymnasium.spaces import Dict

from agentsearch.envs.images import DEFAULT_MAX_IMAGE_PIXELS, ImageTuple, open_image
from agentsearch.envs.rewards import AnswerScore, MathGrade, exact_match, math_grade
from agentsearch.envs.tasks.vision_tasks import KINDS, load_geometry3k, synthetic_vision
from agentsearch.envs.text_env import TextEnv, UnicodeText
from agentsearch.envs.text_env_config import TextEnvConfig

__all__ = ["VisionEnv", "VisionEnvConfig", "vision_score"]

TAG_PROMPT = ("Answer the question about the image.\n{image}\nThe image is {width}x{height} "
              "pixels. Reason step by step inside <think> and </think>. {tools}Give the final "
              "answer inside <answer> and </answer>, without explanation. For example, "
              "<answer> red </answer>. Question: {question}\n")
JSON_SYSTEM_PROMPT = ("Answer the question about the image. {tools}Give the final answer inside "
                      "<answer> and </answer>, without explanation.")
_CROP_LINE = ("To look closer, write <crop> x0 y0 x1 y1 </crop> (pixel corners of a region of "
              "the image) or a region name such as <crop> top-left </crop>; the enlarged region "
              "comes back between <information> and </information>. ")


@dataclass
class VisionEnvConfig(TextEnvConfig):
    """Settings of ``VisionEnv`` (plus those of ``TextEnvConfig``).

    ``split``: ``train``/``dev``/``test`` (seeded synthetic pictures), or any label when
    ``data_path`` is set. ``tools``: ``("crop",)`` by default (``()`` for single-shot
    answers); per-tool settings go in ``tool_kwargs``, e.g. ``{"crop": {"zoom": 3}}``.
    """

    tools: tuple = ("crop",)
    """Tool names, ``module:attr`` paths or tool objects; ``crop`` zooms into the image."""
    task_seed: int = 0
    """Seed of the synthetic picture generator."""
    n_tasks: int | None = None
    """Synthetic tasks in the split (default 2000 train, 200 dev, 200 test)."""
    kinds: tuple = KINDS
    """Synthetic task kinds to draw from: ``bar``, ``bigger``, ``count``, ``left_of``, ``zoom``."""
    image_size: int = 96
    """Width and height of the synthetic pictures, in pixels (>= 48)."""
    data_path: str | None = None
    """Geometry3K-style data (a ``.jsonl``/``.json`` file or an InterGPS folder; see
    ``load_geometry3k``) instead of synthetic pictures; ``{split}`` in it is replaced by
    ``split`` (e.g. ``"geo3k/{split}.jsonl"``)."""
    image_token: str = "<image>"
    """The placeholder written into the text where an image goes: once in the prompt, once
    per image of a tool result. The VLM's processor expands it into image tokens."""
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    """A task image with more pixels (width x height) is a ValueError naming the file."""

    def __post_init__(self):
        super().__post_init__()
        self.kinds = tuple(self.kinds)
        if not self.image_token or not self.image_token.strip():
            raise ValueError("image_token must be a non-empty placeholder string, e.g. '<image>'")
        if self.max_image_pixels < 1:
            raise ValueError(f"max_image_pixels must be >= 1, got {self.max_image_pixels}")


def vision_score(answer: str, task: dict) -> AnswerScore:
    """Score an answer by the task's ``answer_type``: ``"text"`` exact match after SQuAD
    normalisation; ``"math"`` normalised text, then math-verify; ``"choice"`` the choice's
    letter (``B``, ``(B)``, ``B.``) or its value (math-verify)."""
    gold = [str(g) for g in task["golden_answers"]]
    kind = task.get("answer_type", "text")
    if kind == "choice":
        letter = answer.strip().strip("().").strip().upper()
        if re.fullmatch(r"[A-Z]", letter):
            grade = MathGrade(letter == gold[0].upper())
        else:
            grade = math_grade(answer, gold[1:])
    elif kind == "math":
        grade = math_grade(answer, gold)
    else:
        grade = MathGrade(bool(exact_match(answer, gold)))
    ok = grade.equal
    return AnswerScore(correct=ok, score=float(ok),
                       metrics={"em": float(ok), "grading_timeout": float(grade.timed_out)})


class _ImageToolAdapter:
    """Puts a tool into a ``VisionEnv``: gives a ``needs_image`` tool the episode's image and
    turns an ``ImageResult`` into text (one image placeholder per image, first) while the
    images wait in a slot for this turn's observation. Slots are taken when a call starts,
    which is call order (``asyncio.gather`` starts them in order), so images follow calls."""

    def __init__(self, tool, env: VisionEnv):
        self.tool, self.env = tool, env
        self.name, self.description = tool.name, tool.description
        self.parameters, self.timeout_s = tool.parameters, tool.timeout_s

    async def __call__(self, **arguments: Any):
        slot: list = []
        self.env._step_images.append(slot)
        if getattr(self.tool, "needs_image", False):
            arguments = {**arguments, "image": self.env._image}
        out = await self.tool(**arguments)
        token = self.env.config.image_token
        images = tuple(getattr(out, "images", ()) or ())
        text = "" if out is None else str(getattr(out, "text", out))
        text = text.replace(token, "")  # a tool's text must not add image slots
        slot.extend(images)
        return "".join(token for _ in images) + ("\n" if images and text else "") + text

    async def aclose(self) -> None:
        if hasattr(self.tool, "aclose"):
            await self.tool.aclose()


class VisionEnv(TextEnv):
    """Answer a question about a picture, optionally zooming in with ``crop`` first.

    ## Observations
    Always ``{"text": str, "images": tuple}``; images are RGB ``PIL.Image`` objects and the
    text holds ``image_token`` exactly once per image, in order. At reset: the prompt (chat
    template applied) with the task's image. After a ``crop``: the tool result
    (``<information>…</information>`` for tags; a tool-response turn for JSON) with the
    enlarged region. After a malformed turn: an error message, no image. At the end:
    ``{"text": "", "images": ()}``. The rollout keeps every image in order in
    ``Episode.info["images"]``.

    ## Action space
    One turn of text. Tags: ``<think>…</think>`` then ``<crop> x0 y0 x1 y1 </crop>`` (or a
    region name, e.g. ``<crop> top-left </crop>``) or ``<answer>…</answer>`` (or
    ``\\boxed{…}``). JSON: ``<tool_call>{"name": "crop", "arguments": {"box": "…"}}</tool_call>``.

    ## Rewards
    ``reward/answer``: 1.0 if ``vision_score`` accepts the answer (colours and labels by
    exact match, counts and geometry values with math-verify, choices by letter or value),
    else 0. ``reward/format``: ``-format_penalty`` per malformed turn. A crop box that
    cannot be used is an ``Error: …`` observation, not a malformed turn.

    ## Episode end
    Terminated by an answer; truncated when turn ``max_turns`` is not one.

    ## Errors
    A task image that is missing, corrupt or over ``max_image_pixels`` makes ``reset`` raise
    a ``ValueError`` naming the file (``load_geometry3k`` checks headers at load time).

    ## Version history
    - v0: initial version.
    """

    Config = VisionEnvConfig
    boxed = True
    check_variants = ({}, {"tools": ()})

    def __init__(self, config: VisionEnvConfig | None = None, **kwargs):
        super().__init__(config, **kwargs)
        cfg = self.config
        self.tools = {n: _ImageToolAdapter(t, self) for n, t in self.tools.items()}
        self.observation_space = Dict({"text": UnicodeText(cfg.obs_space_chars),
                                       "images": ImageTuple(max(1, cfg.max_calls_per_turn))})
        self._image = None
        self._step_images: list[list] = []

    def load_tasks(self) -> list[dict]:
        cfg = self.config
        if cfg.data_path:
            return load_geometry3k(cfg.data_path.replace("{split}", cfg.split),
                                   max_image_pixels=cfg.max_image_pixels)
        return synthetic_vision(cfg.split, cfg.n_tasks, cfg.task_seed, cfg.image_size, cfg.kinds)

    def _tool_text(self) -> str:
        return "".join(_CROP_LINE if n == "crop" else
                       f"You can use {n} ({t.description.rstrip('.')}) by <{n}> … </{n}>. "
                       for n, t in self.tools.items())

    def instructions(self, task: dict) -> list[dict]:
        cfg = self.config
        q = str(task["question"]).replace(cfg.image_token, " ").strip()
        self._image = open_image(task.get("image"), max_pixels=cfg.max_image_pixels)
        w, h = self._image.size
        if cfg.turn_format == "tags":
            if cfg.system_prompt:
                return [{"role": "user", "content": f"{cfg.system_prompt}{cfg.image_token}\n"
                                                    f"Question: {q}\n"}]
            return [{"role": "user", "content": TAG_PROMPT.format(
                image=cfg.image_token, width=w, height=h, tools=self._tool_text(), question=q)}]
        tools = ("Use the crop tool to zoom in when details are small. " if "crop" in self.tools
                 else "")
        system = cfg.system_prompt or JSON_SYSTEM_PROMPT.format(tools=tools)
        return [{"role": "system", "content": system},
                {"role": "user", "content": f"{cfg.image_token}\nThe image is {w}x{h} pixels.\n"
                                            f"Question: {q}"}]

    def score(self, answer: str, task: dict) -> AnswerScore:
        return vision_score(answer, task)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._image = None  # instructions() loads the task's image while the prompt is built
        try:
            prompt, info = super().reset(seed=seed, options=options)
        except Exception:
            self._task = None  # no half-started episode: step() asks for a reset
            raise
        if prompt.count(self.config.image_token) != 1:
            self._task = None
            raise ValueError(f"the prompt must hold image_token {self.config.image_token!r} "
                             f"exactly once, found {prompt.count(self.config.image_token)} "
                             "(a system_prompt or chat template that writes it?)")
        info["task_type"] = str(self._task.get("type", ""))
        return {"text": prompt, "images": (self._image.copy(),)}, info

    async def astep(self, action: str):
        self._step_images = []
        obs, reward, terminated, truncated, info = await super().astep(action)
        images = tuple(i for slot in self._step_images for i in slot) if obs else ()
        self._step_images = []
        return {"text": obs, "images": images}, reward, terminated, truncated, info

    def _error_observation(self, action: str, error: str) -> str:
        return super()._error_observation(action, error).replace(self.config.image_token, " ")
