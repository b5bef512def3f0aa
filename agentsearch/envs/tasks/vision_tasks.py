"""Vision tasks: seeded synthetic pictures drawn with Pillow, and a Geometry3K-style loader.

``synthetic_vision(split, n, seed, size, kinds)`` makes small RGB pictures (``size`` x
``size`` pixels, 96 by default) with exact answers, of five kinds:

- ``bigger``: two shapes of different colours; which is bigger (answer: its colour);
- ``count``: 1-6 shapes; how many (answer: an integer, checked with math-verify);
- ``bar``: a bar chart with 3-5 bars labelled by letters; which is tallest (its label);
- ``left_of``: 3-4 shapes of distinct kinds and colours in a row; the colour of the shape
  directly left of a named one;
- ``quarter``: one shape in each quarter of the picture, four colours; the colour of the
  one in a named quarter (``top-left`` ...: a region name ``crop`` takes, so cropping that
  quarter leaves one shape and one colour in view).

Shapes are drawn without anti-aliasing on white, in the colours of ``COLOURS``, with gaps
between them, so every answer can be re-derived from the pixels. Each row keeps the
parameters it was drawn from (``spec``; ``render(spec)`` redraws the picture) and the path of
its PNG (``image``): the PNGs are written once into ``$AGENTSEARCH_CACHE/vision`` and rows
stay JSON-serialisable. The same seed, split and size give the same rows and the same
pixels; each split has its own random stream, and dev/test never repeat a train picture.

``load_geometry3k(path)`` reads Geometry3K-style records (see its docstring).
"""

from __future__ import annotations

import json
import logging
import os
import random
from functools import lru_cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from agentsearch.envs.images import DEFAULT_MAX_IMAGE_PIXELS, check_image

__all__ = ["synthetic_vision", "render", "load_geometry3k", "KINDS", "COLOURS", "SHAPES",
           "SPLIT_SIZES", "BAR_LABELS", "BACKGROUND", "QUARTERS"]

SPLIT_SIZES = {"train": 2000, "dev": 200, "test": 200}
KINDS = ("bar", "bigger", "count", "left_of", "quarter")
COLOURS = {"red": (230, 25, 75), "green": (60, 180, 75), "blue": (0, 130, 200),
           "yellow": (255, 200, 0), "orange": (245, 130, 48), "purple": (145, 30, 180)}
SHAPES = ("circle", "square", "triangle", "diamond")
BAR_LABELS = "BCDEFGHJKLMNPQRSTUVWXYZ"  # no A (an article to the answer normaliser), I, O
BACKGROUND = (255, 255, 255)
_INK = (0, 0, 0)
_AREA = {"circle": 0.785, "square": 1.0, "triangle": 0.5, "diamond": 0.5}  # x side^2
_VERSION = 1  # bump when drawing changes (names the cache folder; the rows' hash names it too)
log = logging.getLogger(__name__)


# ------------------------------------------------------------------ drawing
def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, x: int, y: int, s: int, colour) -> None:
    x1, y1, cx, cy = x + s - 1, y + s - 1, x + (s - 1) / 2, y + (s - 1) / 2
    if shape == "circle":
        draw.ellipse([x, y, x1, y1], fill=colour)
    elif shape == "square":
        draw.rectangle([x, y, x1, y1], fill=colour)
    elif shape == "triangle":
        draw.polygon([(cx, y), (x1, y1), (x, y1)], fill=colour)
    elif shape == "diamond":
        draw.polygon([(cx, y), (x1, cy), (cx, y1), (x, cy)], fill=colour)
    else:
        raise ValueError(f"unknown shape {shape!r}; shapes are {SHAPES}")


@lru_cache(maxsize=8)
def _font(px: int):
    return ImageFont.load_default(size=px)


def render(spec: dict) -> Image.Image:
    """The picture of a synthetic task, drawn from its ``spec`` (deterministic)."""
    size = spec["size"]
    img = Image.new("RGB", (size, size), BACKGROUND)
    draw = ImageDraw.Draw(img)
    for o in spec.get("shapes", ()):
        _draw_shape(draw, o["shape"], o["x"], o["y"], o["s"], COLOURS[o["colour"]])
    if "bars" in spec:
        base, colour = spec["baseline"], COLOURS[spec["colour"]]
        draw.line([(2, base), (size - 3, base)], fill=_INK)
        for b in spec["bars"]:
            draw.rectangle([b["x"], base - b["height"], b["x"] + b["width"] - 1, base - 1],
                           fill=colour)
            draw.text((b["x"] + b["width"] / 2, base + 2), b["label"], fill=_INK,
                      font=_font(spec["font_px"]), anchor="mt")
    return img


# ------------------------------------------------------------------ task kinds
def _place(r: random.Random, sides: list[int], size: int,
           gap: int = 4) -> list[tuple[int, int]] | None:
    """Top-left corners for squares of ``sides`` that keep ``gap`` pixels apart (or None)."""
    boxes: list[tuple[int, int, int]] = []
    for s in sides:
        for _ in range(200):
            x, y = r.randint(2, size - s - 2), r.randint(2, size - s - 2)
            if all(x + s + gap <= bx or bx + bs + gap <= x
                   or y + s + gap <= by or by + bs + gap <= y for bx, by, bs in boxes):
                boxes.append((x, y, s))
                break
        else:
            return None
    return [(x, y) for x, y, _ in boxes]


def _shapes(kinds, colours, sides, corners) -> list[dict]:
    return [{"shape": k, "colour": c, "x": x, "y": y, "s": s}
            for k, c, s, (x, y) in zip(kinds, colours, sides, corners)]


def _bigger(r: random.Random, size: int):
    while True:
        kinds, colours = [r.choice(SHAPES), r.choice(SHAPES)], r.sample(sorted(COLOURS), 2)
        sides = [r.randint(size // 10, size * 2 // 5) for _ in range(2)]
        areas = [_AREA[k] * s * s for k, s in zip(kinds, sides)]
        corners = _place(r, sides, size)
        if max(areas) >= 1.6 * min(areas) and corners:
            break
    big = areas.index(max(areas))
    q = (f"Which shape is bigger: the {colours[0]} {kinds[0]} or the {colours[1]} {kinds[1]}? "
         "Answer with its colour.")
    gold = [colours[big], f"{colours[big]} {kinds[big]}"]
    return {"size": size, "shapes": _shapes(kinds, colours, sides, corners)}, q, gold, "text"


def _count(r: random.Random, size: int):
    while True:
        n = r.randint(1, 6)
        sides = [r.randint(size // 10, size // 5) for _ in range(n)]
        corners = _place(r, sides, size)
        if corners:
            break
    kinds = [r.choice(SHAPES) for _ in range(n)]
    colours = [r.choice(sorted(COLOURS)) for _ in range(n)]
    spec = {"size": size, "shapes": _shapes(kinds, colours, sides, corners)}
    return spec, "How many shapes are there in the image?", [str(n)], "math"


def _bar(r: random.Random, size: int):
    k = r.randint(3, 5)
    labels, colour = r.sample(BAR_LABELS, k), r.choice(sorted(COLOURS))
    font_px = max(8, size // 9)
    base, top = size - font_px - 6, 4
    while True:
        heights = [r.randint(size // 12, base - top) for _ in range(k)]
        ranked = sorted(heights)
        if ranked[-1] - ranked[-2] >= max(3, size // 16):
            break
    slot = (size - 8) / k
    width = max(3, int(slot * 0.6))
    bars = [{"label": lab, "height": h, "x": 4 + int(i * slot + (slot - width) / 2), "width": width}
            for i, (lab, h) in enumerate(zip(labels, heights))]
    spec = {"size": size, "bars": bars, "colour": colour, "baseline": base, "font_px": font_px}
    q = "Which bar in the chart is the tallest? Answer with its label."
    return spec, q, [labels[heights.index(max(heights))]], "text"


def _left_of(r: random.Random, size: int):
    k = r.randint(3, 4)
    kinds, colours = r.sample(SHAPES, k), r.sample(sorted(COLOURS), k)
    slot = size // k
    sides = [r.randint(size // 10, min(size // 5, slot - 6)) for _ in range(k)]
    corners = [(i * slot + r.randint(2, slot - s - 3), r.randint(2, size - s - 2))
               for i, s in enumerate(sides)]
    j = r.randint(1, k - 1)
    q = f"What colour is the shape directly to the left of the {kinds[j]}? Answer with the colour."
    return ({"size": size, "shapes": _shapes(kinds, colours, sides, corners)}, q,
            [colours[j - 1]], "text")


QUARTERS = ("top-left", "top-right", "bottom-left", "bottom-right")  # crop's region names


def _quarter(r: random.Random, size: int):
    colours = r.sample(sorted(COLOURS), 4)
    half = size // 2
    sides = [r.randint(half * 3 // 5, half * 17 // 20) for _ in QUARTERS]
    corners = [((i % 2) * half + r.randint(2, half - s - 2),
                (i // 2) * half + r.randint(2, half - s - 2))
               for i, s in enumerate(sides)]
    kinds = [r.choice(SHAPES) for _ in QUARTERS]
    j = r.randrange(4)
    q = (f"What colour is the shape in the {QUARTERS[j]} quarter of the image? "
         "Answer with the colour.")
    return ({"size": size, "shapes": _shapes(kinds, colours, sides, corners)}, q, [colours[j]],
            "text")


_MAKERS = {"bar": _bar, "bigger": _bigger, "count": _count, "left_of": _left_of,
           "quarter": _quarter}


def _check_args(split: str, size: int, kinds: tuple[str, ...]) -> None:
    if split not in SPLIT_SIZES:
        raise ValueError(f"synthetic vision splits are {sorted(SPLIT_SIZES)}, got {split!r} "
                         "(Geometry3K-style data: VisionEnv(data_path=...))")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        raise ValueError(f"unknown vision task kind(s) {unknown or kinds}; kinds are {KINDS}")
    if size < 48:
        raise ValueError(f"image size must be >= 48 pixels, got {size}")


@lru_cache(maxsize=16)
def _rows(split: str, n: int, seed: int, size: int, kinds: tuple[str, ...]) -> tuple[dict, ...]:
    """The rows (without image paths) of a split; dev/test skip every train picture."""
    seen: set[str] = set()
    if split != "train":
        seen = {json.dumps(t["spec"], sort_keys=True) + t["question"]
                for t in _rows("train", SPLIT_SIZES["train"], seed, size, kinds)}
    r = random.Random(f"agentsearch-vision-{seed}-{size}-{split}")
    rows: list[dict] = []
    while len(rows) < n:
        kind = kinds[r.randrange(len(kinds))]
        spec, q, gold, answer_type = _MAKERS[kind](r, size)
        key = json.dumps(spec, sort_keys=True) + q
        if key in seen:
            continue
        seen.add(key)
        rows.append({"id": f"vision-{split}-{len(rows):05d}", "type": kind, "question": q,
                     "golden_answers": gold, "answer_type": answer_type, "spec": spec})
    return tuple(rows)


def _image_dir(split: str, n: int, seed: int, size: int, kinds: tuple[str, ...],
               rows: tuple[dict, ...]) -> Path:
    """The folder with one PNG per row, written on first use (to a temp folder, renamed). Its
    name holds a hash of the rows, so a change to how tasks are generated never reuses the
    pictures of the old rows."""
    import hashlib

    from agentsearch.core.cache import cache_dir, publish_dir

    digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:12]
    out = (cache_dir() / "vision" / f"v{_VERSION}-seed{seed}-{size}px-{'-'.join(kinds)}"
           / f"{split}-n{n}-{digest}")
    if (out / "tasks.jsonl").exists():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    with open(tmp / "tasks.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            render(row["spec"]).save(tmp / f"{row['id']}.png", optimize=False)
            f.write(json.dumps({**row, "image": f"{row['id']}.png"}) + "\n")
    return publish_dir(tmp, out)


def synthetic_vision(split: str = "train", n: int | None = None, seed: int = 0, size: int = 96,
                     kinds: tuple[str, ...] | list[str] = KINDS) -> list[dict]:
    """Seeded picture tasks: rows ``{id, type, question, golden_answers, answer_type, spec,
    image}`` (``image``: the path of the PNG, written into the cache on first use; ``n``:
    default 2000 train, 200 dev, 200 test; ``kinds``: a subset of ``KINDS``)."""
    kinds = tuple(sorted(set(kinds)))
    _check_args(split, size, kinds)
    n = SPLIT_SIZES[split] if n is None else int(n)
    rows = _rows(split, n, seed, size, kinds)
    folder = _image_dir(split, n, seed, size, kinds, rows)
    return [dict(json.loads(json.dumps(row)), image=str(folder / f"{row['id']}.png"))
            for row in rows]


# ------------------------------------------------------------------ Geometry3K-style data
_TEXT_FIELDS = ("problem", "problem_text", "question")
_IMAGE_FIELDS = ("image", "image_path", "img", "images")


def _records(path: Path) -> list[tuple[dict, Path, str]]:
    """(record, folder its relative paths start from, where it came from) of a file/folder."""
    from agentsearch.data.loaders import read_jsonl

    if path.is_dir():  # InterGPS layout: <id>/data.json + <id>/img_diagram.png
        files = sorted(path.glob("*/data.json"), key=lambda p: (len(p.parent.name), p.parent.name))
        if not files:
            raise ValueError(f"{path} is a folder without */data.json files (the Geometry3K "
                             "layout); pass a .jsonl/.json file or that folder")
        out = []
        for f in files:
            try:
                out.append((json.loads(f.read_text(encoding="utf-8")), f.parent, str(f)))
            except json.JSONDecodeError as e:
                raise ValueError(f"{f}: not valid JSON ({e.msg})") from None
        return out
    if not path.is_file():
        raise ValueError(f"Geometry3K data {str(path)!r} does not exist")
    if path.suffix == ".jsonl":
        return [(rec, path.parent, f"{path} row {i}") for i, rec in enumerate(read_jsonl(path))]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    data = data if isinstance(data, list) else [data]
    return [(rec, path.parent, f"{path} record {i}") for i, rec in enumerate(data)]


def _choice_index(answer, choices: list[str], where: str) -> int:
    text = str(answer).strip().strip("().").strip().upper()
    letters = [chr(ord("A") + i) for i in range(len(choices))]
    if text in letters:
        return letters.index(text)
    values = [str(c).strip() for c in choices]
    if str(answer).strip() in values:
        return values.index(str(answer).strip())
    raise ValueError(f"{where}: answer {answer!r} is neither a choice letter "
                     f"({'/'.join(letters)}) nor one of the choices {values}")


def _geometry_row(rec: dict, base: Path, where: str, index: int) -> dict:
    if not isinstance(rec, dict):
        raise ValueError(f"{where}: a record must be a JSON object, got {type(rec).__name__}")
    text = next((rec[k] for k in _TEXT_FIELDS if isinstance(rec.get(k), str)), None)
    if not text:
        raise ValueError(f"{where}: no problem text (fields {'/'.join(_TEXT_FIELDS)})")
    answer = rec.get("answer", rec.get("golden_answers"))
    if answer is None or answer == [] or answer == "":
        raise ValueError(f"{where}: no answer (field 'answer')")
    image = next((rec[k] for k in _IMAGE_FIELDS if rec.get(k)), "img_diagram.png")
    if isinstance(image, list):
        image = image[0]
    if not isinstance(image, str):
        raise ValueError(f"{where}: the image must be a path (str), got {type(image).__name__}")
    problem = " ".join(text.replace("<image>", " ").split())
    row = {"id": f"geo3k-{rec.get('id', index)}", "type": "geometry3k",
           "image": str((base / image).resolve())}
    choices = [str(c).strip() for c in rec.get("choices") or []]
    if choices:
        k = _choice_index(answer, choices, where)
        listing = " ".join(f"({chr(ord('A') + i)}) {c}" for i, c in enumerate(choices))
        row.update(question=f"{problem}\nChoices: {listing}\nAnswer with the letter of the choice.",
                   golden_answers=[chr(ord("A") + k), choices[k]], answer_type="choice",
                   choices=choices)
    else:
        gold = answer if isinstance(answer, list) else [answer]
        row.update(question=problem, golden_answers=[str(g) for g in gold], answer_type="math")
    return row


def load_geometry3k(path: str | Path, *, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
                    check_images: bool = True, on_error: str = "raise") -> list[dict]:
    """Geometry3K-style tasks: rows ``{id, type, question, golden_answers, answer_type,
    image, choices?}`` like ``synthetic_vision``'s.

    ``path``: a ``.jsonl`` file (one record a line), a ``.json`` file (a list of records),
    or a folder in the InterGPS layout (``<id>/data.json`` + ``<id>/img_diagram.png``).
    A record has the problem text in ``problem`` (or ``problem_text``/``question``; a
    ``<image>`` placeholder in it is dropped), the image path in ``image`` (or
    ``image_path``/``img``/``images[0]``; relative to the record's file; default
    ``img_diagram.png``), optional ``choices`` (a list) and ``answer``: with choices a letter
    (``"B"``) or the choice itself, golden answers then being ``[letter, value]``; without
    choices the value (checked with math-verify).

    ``check_images``: open every image's header now, so a missing file, a file that is not
    an image or one over ``max_image_pixels`` is found at load time. Every bad record is a
    ``ValueError`` naming it (``on_error="raise"``) or is left out with a warning
    (``on_error="skip"``). Decoding errors of a file with a valid header surface at reset.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    rows, bad = [], []
    for i, (rec, base, where) in enumerate(_records(Path(path))):
        try:
            row = _geometry_row(rec, base, where, i)
            if check_images:
                check_image(row["image"], max_pixels=max_image_pixels)
        except ValueError as e:
            if on_error == "raise":
                raise ValueError(f"{where}: {e}" if not str(e).startswith(where)
                                 else str(e)) from None
            bad.append(str(e))
            continue
        rows.append(row)
    if bad:
        log.warning("load_geometry3k(%s): skipped %d bad record(s), e.g. %s", path, len(bad),
                    bad[0])
    return rows
