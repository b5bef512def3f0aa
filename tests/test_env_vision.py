"""VisionEnv (agentsearch/Vision-v0): seeded pictures whose answers the pixels confirm, the crop
tool, Geometry3K-style data, bad images, and a scripted crop-then-answer rollout."""

from __future__ import annotations

import asyncio
import hashlib
import json
import warnings
from collections import Counter
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from PIL import Image

import agentsearch.envs  # noqa: F401 - registers the ids
from agentsearch.envs import VisionEnv
from agentsearch.envs.images import ImageTuple
from agentsearch.envs.tasks.vision_tasks import (
    BACKGROUND,
    COLOURS,
    KINDS,
    QUARTERS,
    load_geometry3k,
    render,
    synthetic_vision,
)
from agentsearch.envs.tools.crop import CropTool, parse_box
from agentsearch.envs.vision import vision_score
from agentsearch.rollout import SamplingParams, ScriptedBackend, check_rollout_contract, rollout
from agentsearch.rollout.checker import check_text_env

TOKEN = "<image>"


def _pixels(row) -> np.ndarray:
    return np.asarray(Image.open(row["image"]).convert("RGB"))


def _mask(px: np.ndarray, colour: str) -> np.ndarray:
    return np.all(px == COLOURS[colour], axis=-1)


def _components(mask: np.ndarray) -> int:
    """Connected regions (8-neighbourhood) of a boolean mask."""
    seen = np.zeros_like(mask)
    n = 0
    for y, x in zip(*np.nonzero(mask)):
        if seen[y, x]:
            continue
        n += 1
        stack = [(y, x)]
        seen[y, x] = True
        while stack:
            cy, cx = stack.pop()
            for ny in range(max(cy - 1, 0), min(cy + 2, mask.shape[0])):
                for nx in range(max(cx - 1, 0), min(cx + 2, mask.shape[1])):
                    if mask[ny, nx] and not seen[ny, nx]:
                        seen[ny, nx] = True
                        stack.append((ny, nx))
    return n


def _digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ------------------------------------------------------------------ synthetic tasks
def test_tasks_are_seeded_and_splits_disjoint(tmp_path, monkeypatch):
    a, b = synthetic_vision("dev", 40, seed=0), synthetic_vision("dev", 40, seed=0)
    assert (a == b and [r["question"] for r in synthetic_vision("dev", 40, seed=1)]
            != [r["question"] for r in a])
    assert [r["spec"] for r in synthetic_vision("dev", 40, seed=1)] != [r["spec"] for r in a]
    json.dumps(a)  # rows are JSON-serialisable (the image is a path)
    monkeypatch.setenv("AGENTSEARCH_CACHE", str(tmp_path))  # drawn again elsewhere: same bytes
    again = synthetic_vision("dev", 40, seed=0)
    assert again[0]["image"].startswith(str(tmp_path))
    assert [_digest(r["image"]) for r in again] == [_digest(r["image"]) for r in a]
    monkeypatch.undo()
    train, dev, test = synthetic_vision("train"), synthetic_vision("dev"), synthetic_vision("test")
    assert (len(train), len(dev), len(test)) == (2000, 200, 200)
    assert {r["type"] for r in dev} == set(KINDS) and len({r["id"] for r in train}) == 2000
    train_pics = {_digest(r["image"]) for r in train}
    assert not train_pics & {_digest(r["image"]) for r in dev + test}
    assert not {_digest(r["image"]) for r in dev} & {_digest(r["image"]) for r in test}
    only = synthetic_vision("dev", 20, kinds=["count"], size=64)
    assert {r["type"] for r in only} == {"count"} and Image.open(only[0]["image"]).size == (64, 64)
    with pytest.raises(ValueError, match="splits are"):
        synthetic_vision("validation")
    with pytest.raises(ValueError, match="kinds are"):
        synthetic_vision("dev", kinds=("colour",))


def test_every_answer_is_what_the_pixels_show():
    rows = synthetic_vision("dev")
    seen = Counter()
    for row in rows:
        px, spec, gold = _pixels(row), row["spec"], row["golden_answers"][0]
        assert np.array_equal(px, np.asarray(render(spec))), row["id"]
        seen[row["type"]] += 1
        if row["type"] == "bigger":
            colours = [o["colour"] for o in spec["shapes"]]
            counts = {c: int(_mask(px, c).sum()) for c in colours}
            assert gold == max(counts, key=counts.get) and min(counts.values()) > 0, row["id"]
            assert all(c in row["question"] for c in colours)
        elif row["type"] == "count":
            ink = ~np.all(px == BACKGROUND, axis=-1)
            assert _components(ink) == int(gold) == len(spec["shapes"]), row["id"]
        elif row["type"] == "bar":
            cols = _mask(px, spec["colour"]).sum(axis=0)  # bar pixels per column
            runs, start = [], None
            for x, v in enumerate(list(cols) + [0]):
                if v and start is None:
                    start = x
                elif not v and start is not None:
                    runs.append(int(cols[start:x].max()))
                    start = None
            assert len(runs) == len(spec["bars"]), row["id"]
            labels = [b["label"] for b in sorted(spec["bars"], key=lambda b: b["x"])]
            assert gold == labels[int(np.argmax(runs))] and sorted(runs)[-1] > sorted(runs)[-2]
            below = px[spec["baseline"] + 2:]
            for b in spec["bars"]:  # every bar has its label's ink under it
                assert (below[:, b["x"]:b["x"] + b["width"]] < 100).any(), row["id"]
        elif row["type"] == "quarter":  # the named quarter holds exactly one colour: the answer
            half = spec["size"] // 2
            quarter = next(q for q in QUARTERS if f"the {q} quarter" in row["question"])
            i = QUARTERS.index(quarter)
            for j in range(4):
                sub = px[(j // 2) * half:(j // 2 + 1) * half, (j % 2) * half:(j % 2 + 1) * half]
                present = [c for c in COLOURS if _mask(sub, c).any()]
                assert len(present) == 1, row["id"]
                if j == i:
                    assert present == [gold], row["id"]
        else:  # left_of: order the colours by their leftmost pixel
            shape_colour = {o["shape"]: o["colour"] for o in spec["shapes"]}
            assert len(shape_colour) == len(spec["shapes"])  # shape names are unique
            named = next(s for s in shape_colour if f"left of the {s}?" in row["question"])
            left = {c: int(np.nonzero(_mask(px, c))[1].min()) for c in shape_colour.values()}
            order = sorted(left, key=left.get)
            assert order.index(shape_colour[named]) > 0
            assert gold == order[order.index(shape_colour[named]) - 1], row["id"]
    assert set(seen) == set(KINDS) and min(seen.values()) > 20


def test_scoring_by_answer_type():
    text = {"golden_answers": ["red", "red circle"], "answer_type": "text"}
    assert vision_score("Red.", text).correct and vision_score("the red circle", text).correct
    assert not vision_score("der", text).correct and not vision_score("blue", text).correct
    num = {"golden_answers": ["5"], "answer_type": "math"}
    assert vision_score("5", num).correct and vision_score("5.0", num).correct
    assert not vision_score("6", num).correct
    choice = {"golden_answers": ["B", "4\\sqrt{3}"], "answer_type": "choice"}
    for ok in ("B", "(b)", "B.", "4\\sqrt{3}", "4*sqrt(3)"):
        assert vision_score(ok, choice).correct, ok
    for bad in ("A", "the", "", "6.93"):
        assert not vision_score(bad, choice).correct, bad


# ------------------------------------------------------------------ env contract
@pytest.mark.parametrize("kw", [{}, {"turn_format": "json"}, {"tools": ()},
                                {"tools": (), "turn_format": "json"}])
def test_check_env_and_contracts_are_clean(kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make("agentsearch/Vision-v0", **kw)
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught if "gymnasium" in str(w.filename)] == []
    env = gymnasium.make("agentsearch/Vision-v0", **kw).unwrapped
    assert check_text_env(env) == ["reset", "tool-calls", "malformed", "correct-answer",
                                   "truncation"]
    assert check_rollout_contract(gymnasium.make("agentsearch/Vision-v0", **kw).unwrapped) == []
    obs, info = env.reset(seed=0)
    assert obs in env.observation_space and obs["text"].count(TOKEN) == 1
    assert info["task_type"] in KINDS and env.observation_space["images"].sample() in ImageTuple(4)


def test_crop_returns_the_region_enlarged():
    env = VisionEnv(split="dev")
    task = synthetic_vision("dev", 5)[0]
    obs, _ = env.reset(options={"task": task})
    original = obs["images"][0]
    assert original.size == (96, 96) and np.array_equal(np.asarray(original), _pixels(task))
    obs, reward, term, trunc, info = env.step("<think>zoom</think>\n<crop> 10 20 50 40 </crop>")
    assert ((reward, term, trunc, info["tool"], info["tool_error"])
            == (0.0, False, False, "crop", False))
    (region,) = obs["images"]
    assert region.size == (80, 40) and obs["text"].count(TOKEN) == 1
    assert obs["text"].startswith(f"\n\n<information>{TOKEN}\nRegion 10 20 50 40")
    expected = original.crop((10, 20, 50, 40)).resize((80, 40), Image.Resampling.BICUBIC)
    assert np.array_equal(np.asarray(region), np.asarray(expected))
    obs, *_ = env.step("<crop> Top Left </crop>")
    assert obs["images"][0].size == (96, 96)  # 48x48 zoomed 2x
    for bad in ("1 2 3", "0 0 200 10", "30 30 10 10", "left-ish", "x0 y0 x1 y1"):
        env.reset(options={"task": task})
        obs, reward, term, _, info = env.step(f"<crop>{bad}</crop>")
        assert obs["images"] == () and "Error:" in obs["text"] and TOKEN not in obs["text"], bad
        assert not term and not info["malformed"] and reward == 0.0
    obs, reward, term, _, info = env.step("<crop></crop>")  # no box at all: a malformed turn
    assert obs["images"] == () and info["malformed"] and "empty <crop></crop>" in obs["text"]
    assert reward == -0.1 and not term
    env = VisionEnv(turn_format="json", tool_kwargs={"crop": {"zoom": 3, "max_side": 60}})
    env.reset(options={"task": task})
    call = json.dumps({"name": "crop", "arguments": {"box": "[0, 0, 10, 30]"}})
    obs, *_ = env.step(f"<tool_call>{call}</tool_call><|im_end|>")
    assert obs["images"][0].size == (20, 60) and "<tool_response>\n" + TOKEN in obs["text"]
    assert parse_box("lower right", (10, 8)) == (5, 4, 10, 8)
    with pytest.raises(ValueError, match="needs the episode's image"):
        asyncio.run(CropTool()(box="top"))


# ------------------------------------------------------------------ Geometry3K-style data
def _png(path: Path, size=(60, 40), colour=(20, 40, 200)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)
    return path


@pytest.fixture
def geo(tmp_path) -> Path:
    _png(tmp_path / "img" / "1.png")
    _png(tmp_path / "img" / "2.png", (30, 30))
    rows = [{"id": 1, "problem": "<image>Find x.", "choices": ["3", "4\\sqrt{3}", "8", "12"],
             "answer": "B", "image": "img/1.png"},
            {"id": 2, "problem_text": "Find the area.", "choices": ["10", "20"], "answer": "20",
             "image_path": "img/2.png"},
            {"id": 3, "question": "Find y.", "answer": "\\frac{1}{2}", "images": ["img/1.png"]}]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return tmp_path


def test_geometry3k_loader_and_env(geo):
    rows = load_geometry3k(geo / "train.jsonl")
    assert [r["id"] for r in rows] == ["geo3k-1", "geo3k-2", "geo3k-3"]
    assert rows[0]["golden_answers"] == ["B", "4\\sqrt{3}"] and rows[0]["answer_type"] == "choice"
    assert rows[0]["question"].startswith("Find x.\nChoices: (A) 3 (B) 4\\sqrt{3} (C) 8 (D) 12")
    assert (rows[1]["golden_answers"] == ["B", "20"]
            and rows[2]["golden_answers"] == ["\\frac{1}{2}"])
    assert rows[2]["answer_type"] == "math" and Path(rows[2]["image"]).is_absolute()
    (geo / "all.json").write_text(json.dumps([{"problem": "Q", "answer": "2",
                                               "image": "img/2.png"}]))
    assert load_geometry3k(geo / "all.json")[0]["image"] == str((geo / "img" / "2.png").resolve())
    folder = geo / "intergps"  # the original layout: <id>/data.json + <id>/img_diagram.png
    for i in (10, 9):
        _png(folder / str(i) / "img_diagram.png")
        (folder / str(i) / "data.json").write_text(json.dumps(
            {"id": i, "problem_text": f"Problem {i}", "choices": ["1", "2", "3", "4"],
             "answer": "C"}))
    assert [r["id"] for r in load_geometry3k(folder)] == ["geo3k-9", "geo3k-10"]
    env = VisionEnv(data_path=str(geo / "{split}.jsonl"), split="train")
    assert [t["id"] for t in env.tasks] == ["geo3k-1", "geo3k-2", "geo3k-3"]
    obs, info = env.reset(options={"task": env.tasks[0]})
    assert obs["images"][0].size == (60, 40) and "The image is 60x40 pixels" in obs["text"]
    assert obs["text"].count(TOKEN) == 1  # the record's own <image> was dropped
    _, reward, term, _, info = env.step("<answer> (B) </answer>")
    assert term and info["answer_correct"] and reward == 1.0
    env.reset(options={"task": env.tasks[2]})
    _, reward, *_ = env.step("\\boxed{0.5}")
    assert reward == 1.0


def test_bad_images_are_clear_errors(geo, caplog):
    (geo / "img" / "junk.png").write_bytes(b"this is not a png")
    good = (geo / "img" / "1.png").read_bytes()
    (geo / "img" / "cut.png").write_bytes(good[: len(good) // 2])  # header fine, pixels cut
    _png(geo / "img" / "big.png", (300, 200))

    def write(name, image, answer="1"):
        (geo / name).write_text(json.dumps({"problem": "Q", "answer": answer,
                                            "image": image}) + "\n")
        return geo / name

    with pytest.raises(ValueError, match=r"row 0.*img/missing\.png' does not exist"):
        load_geometry3k(write("a.jsonl", "img/missing.png"))
    with pytest.raises(ValueError, match=r"junk\.png' is not an image PIL can read"):
        load_geometry3k(write("b.jsonl", "img/junk.png"))
    with pytest.raises(ValueError, match=r"big\.png' is too large: 300x200 = 60000 pixels"):
        load_geometry3k(write("c.jsonl", "img/big.png"), max_image_pixels=50_000)
    with pytest.raises(ValueError, match="neither a choice letter"):
        (geo / "d.jsonl").write_text(json.dumps({"problem": "Q", "choices": ["1", "2"],
                                                 "answer": "E", "image": "img/1.png"}))
        load_geometry3k(geo / "d.jsonl")
    with pytest.raises(ValueError, match=r"e\.jsonl:1: not valid JSON"):
        (geo / "e.jsonl").write_text("{not json\n")
        load_geometry3k(geo / "e.jsonl")
    mixed = geo / "mixed.jsonl"
    mixed.write_text((geo / "a.jsonl").read_text() + (geo / "train.jsonl").read_text())
    assert (len(load_geometry3k(mixed, on_error="skip")) == 3
            and "skipped 1 bad record" in caplog.text)

    env = VisionEnv(data_path=str(write("f.jsonl", "img/cut.png")))
    with pytest.raises(ValueError, match=r"cut\.png' is corrupt"):
        env.reset(options={"task": env.tasks[0]})
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step("<answer>1</answer>")  # no half-started episode
    for image, match in [(str(geo / "img" / "gone.png"), "does not exist"),
                         (Image.new("RGB", (300, 300)), "too large"),
                         (None, "must be a file path")]:
        with pytest.raises(ValueError, match=match):
            VisionEnv(max_image_pixels=50_000).reset(
                options={"task": {"question": "Q", "golden_answers": ["1"], "image": image}})
    rgba = Image.new("RGBA", (8, 8), (0, 0, 0, 0))  # transparent -> white, not black
    obs, _ = VisionEnv().reset(options={"task": {"question": "Q", "golden_answers": ["1"],
                                                 "image": rgba}})
    assert obs["images"][0].getpixel((3, 3)) == (255, 255, 255)
    with pytest.raises(ValueError, match="image_token"):
        VisionEnv(image_token=" ")


# ------------------------------------------------------------------ rollout
@pytest.mark.parametrize("fmt", ["tags", "json"])
def test_scripted_rollout_crops_then_answers(fmt):
    from agentsearch.models import load_tokenizer

    tok = load_tokenizer("tiny")
    task = next(r for r in synthetic_vision("dev") if r["type"] == "bar")
    end = "" if fmt == "tags" else "<|im_end|>"
    if fmt == "tags":
        crop = "<think>The labels are small.</think>\n<crop> 0 0 48 48 </crop>"
    else:
        call = json.dumps({"name": "crop", "arguments": {"box": "0 0 48 48"}})
        crop = f"<tool_call>\n{call}\n</tool_call><|im_end|>"
    turns = [crop,
             f"<think>Now I see it.</think>\n<answer> {task['golden_answers'][0]} </answer>{end}"]
    texts: list[str] = []

    def policy(conversation: str) -> str:
        texts.append(turns[len(texts)])
        return texts[-1]

    episodes, stats = rollout(lambda: VisionEnv(turn_format=fmt), [task],
                              ScriptedBackend(tok, policy), SamplingParams(max_new_tokens=512))
    (ep,) = episodes
    assert (ep.reward, ep.answer_correct, ep.terminated, ep.num_turns) == (1.0, True, True, 2)
    assert ep.reward_components == {"reward/answer": 1.0, "reward/format": 0.0}
    picture, region = ep.info["images"]
    assert np.array_equal(np.asarray(picture), _pixels(task)) and region.size == (96, 96)
    expected = picture.crop((0, 0, 48, 48)).resize((96, 96), Image.Resampling.BICUBIC)
    assert np.array_equal(np.asarray(region), np.asarray(expected))
    runs: list[tuple[int, list[int]]] = []  # maximal runs of equal mask values
    for t, m in zip(ep.token_ids, ep.action_mask):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(t)
        else:
            runs.append((m, [t]))
    env_text = [tok.decode(ids, skip_special_tokens=False) for m, ids in runs if m == 0]
    policy_text = [tok.decode(ids, skip_special_tokens=False) for m, ids in runs if m == 1]
    assert policy_text == texts and len(env_text) == 2  # the prompt, then the crop's result
    assert env_text[0].count(TOKEN) == env_text[1].count(TOKEN) == 1  # one per image, masked 0
    assert "Region 0 0 48 48" in env_text[1] and all(TOKEN not in t for t in policy_text)
    assert all(lp == 0.0 for lp, m in zip(ep.gen_logprobs, ep.action_mask) if m == 0)
    assert stats.tool_calls == 1 and stats.tool_errors == 0


def test_images_of_a_dropped_observation_are_not_kept():
    """Out of turns after a crop: the crop's observation is not appended, nor its image."""
    from agentsearch.models import load_tokenizer

    tok = load_tokenizer("tiny")
    task = synthetic_vision("dev")[0]
    policy = lambda conversation: "<crop> top-left </crop>"  # noqa: E731
    (ep,), _ = rollout(lambda: VisionEnv(), [task], ScriptedBackend(tok, policy),
                       SamplingParams(max_new_tokens=64), max_turns=1)
    assert ep.truncated and ep.info["truncated_by"] == "max_turns"
    text = tok.decode(ep.token_ids, skip_special_tokens=False)
    assert len(ep.info["images"]) == text.count(TOKEN) == 1


def test_changed_task_generation_never_reuses_old_pictures(monkeypatch, tmp_path):
    """The picture cache is keyed by the rows' content: when a kind's generator changes (same
    seed, split and size), new PNGs are drawn instead of the old rows' pictures being served
    with the new rows' questions."""
    from agentsearch.envs.tasks import vision_tasks

    monkeypatch.setenv("AGENTSEARCH_CACHE", str(tmp_path))
    vision_tasks._rows.cache_clear()
    before = synthetic_vision("dev", n=6, size=64, kinds=("quarter",))
    quarter = vision_tasks._MAKERS["quarter"]

    def shifted(r, size):  # the same kind, drawn from a different point of the stream
        r.random()
        return quarter(r, size)

    monkeypatch.setitem(vision_tasks._MAKERS, "quarter", shifted)
    vision_tasks._rows.cache_clear()
    after = synthetic_vision("dev", n=6, size=64, kinds=("quarter",))
    vision_tasks._rows.cache_clear()
    assert Path(before[0]["image"]).parent != Path(after[0]["image"]).parent
    for row in after:
        assert np.array_equal(_pixels(row), np.asarray(render(row["spec"]))), row["id"]
