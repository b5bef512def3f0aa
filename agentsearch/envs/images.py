"""Images for vision environments: safe loading, the ``crop`` tool, and an observation space.

Representation: inside an environment and in its observations an image is an RGB
``PIL.Image.Image``, fully decoded and detached from any file (what transformers' image
processors take). Task rows keep only a *path* (``task["image"]``), so rows stay
JSON-serialisable; ``open_image`` turns it into pixels, and every way that can fail (no
such file, not an image, a truncated file, too many pixels) is a ``ValueError`` that names
the file, never an exception from deep inside PIL.

``CropTool`` (registered as ``crop``) zooms into a region of the episode's image and returns
an ``ImageResult``: a short text plus the enlarged region. A tool that sets
``needs_image = True`` is called with the episode's image as the keyword ``image``
(``VisionEnv`` does that); a box it cannot use is an ``"Error: ..."`` text the model reads,
like the calculator's syntax errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.spaces import Space
from PIL import Image, UnidentifiedImageError

__all__ = ["ImageResult", "CropTool", "ImageTuple", "open_image", "check_image", "parse_box", "REGIONS",
           "DEFAULT_MAX_IMAGE_PIXELS"]

DEFAULT_MAX_IMAGE_PIXELS = 2048 * 2048
"""Default bound on width x height of an image a task may use (larger is a ValueError)."""

REGIONS: dict[str, tuple[float, float, float, float]] = {
    "top-left": (0, 0, .5, .5), "top-right": (.5, 0, 1, .5),
    "bottom-left": (0, .5, .5, 1), "bottom-right": (.5, .5, 1, 1),
    "top": (0, 0, 1, .5), "bottom": (0, .5, 1, 1), "left": (0, 0, .5, 1), "right": (.5, 0, 1, 1),
    "center": (.25, .25, .75, .75), "full": (0, 0, 1, 1),
}
"""Named regions a crop box may be, as fractions (x0, y0, x1, y1) of the image."""

_ALIASES = {"upper": "top", "lower": "bottom", "centre": "center", "middle": "center",
            "whole": "full", "all": "full"}


@dataclass(frozen=True)
class ImageResult:
    """What an image tool returns: ``text`` for the model and the ``images`` it shows."""

    text: str
    images: tuple

    def __str__(self) -> str:  # a text-only env shows the text
        return self.text


def _rgb(img: Image.Image) -> Image.Image:
    """RGB pixels; transparent parts become white (not the black ``convert`` would give)."""
    if img.mode == "RGB":
        return img.copy()
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        out = Image.new("RGB", rgba.size, (255, 255, 255))
        out.paste(rgba, mask=rgba.getchannel("A"))
        return out
    return img.convert("RGB")


def check_image(path: Any, *, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> tuple[int, int]:
    """``(width, height)`` of an image file, from its header (no decoding): the cheap check a
    loader runs on every row. ``ValueError`` naming the file when it is missing, not an
    image, or larger than ``max_pixels``."""
    im, _ = _open(path, max_pixels)
    with im:
        return im.size


def open_image(source: Any, *, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> Image.Image:
    """A decoded RGB image from a path (or a PIL image, copied), at most ``max_pixels``.

    Raises ``ValueError`` naming the file when it does not exist, is not an image, is
    truncated or corrupt, or has more than ``max_pixels`` pixels (checked from the header,
    before decoding). Transparent pixels become white."""
    if isinstance(source, Image.Image):
        _check_pixels(source.size, max_pixels, "the task's in-memory image")
        return _rgb(source)
    im, where = _open(source, max_pixels)
    with im:
        try:
            im.load()
            return _rgb(im)
        except (OSError, SyntaxError, EOFError, ValueError) as e:  # truncated / corrupt data
            raise ValueError(f"{where} is corrupt: its pixels cannot be decoded "
                             f"({type(e).__name__}: {str(e)[:200]})") from None


def _open(source: Any, max_pixels: int) -> tuple[Image.Image, str]:
    """The opened (header-only) image file and how to name it in errors."""
    if not isinstance(source, (str, Path)) or not str(source):
        raise ValueError(f"a task's 'image' must be a file path or a PIL image, got "
                         f"{type(source).__name__} {source!r:.80}")
    path = Path(source)
    where = f"image file {str(path)!r}"
    if not path.is_file():
        raise ValueError(f"{where} does not exist (or is not a file)")
    try:
        im = Image.open(path)  # reads the header only
    except Image.DecompressionBombError as e:
        raise ValueError(f"{where} is too large ({e}); max_image_pixels={max_pixels}") from None
    except (UnidentifiedImageError, OSError, SyntaxError, EOFError, ValueError) as e:
        raise ValueError(f"{where} is not an image PIL can read ({type(e).__name__}: "
                         f"{str(e)[:200]})") from None
    try:
        _check_pixels(im.size, max_pixels, where)
    except ValueError:
        im.close()
        raise
    return im, where


def _check_pixels(size: tuple[int, int], max_pixels: int, where: str) -> None:
    w, h = size
    if w < 1 or h < 1:
        raise ValueError(f"{where} is empty ({w}x{h} pixels)")
    if w * h > max_pixels:
        raise ValueError(f"{where} is too large: {w}x{h} = {w * h} pixels > max_image_pixels="
                         f"{max_pixels}; shrink the image or raise max_image_pixels")


def parse_box(box: str, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """Pixel corners ``(x0, y0, x1, y1)`` of a crop box for an image of ``size`` (w, h).

    ``box`` is four numbers ``"x0 y0 x1 y1"`` (commas and brackets allowed) with
    ``0 <= x0 < x1 <= w`` and ``0 <= y0 < y1 <= h``, or a region name from ``REGIONS``
    (``top-left``, ``center``, ...; ``upper``/``lower``/``centre`` are understood).
    Raises ``ValueError`` with a sentence the model can act on."""
    w, h = size
    text = " ".join(str(box).strip().lower().replace("_", " ").split())
    name = "-".join(_ALIASES.get(p, p) for p in re.split(r"[\s-]+", text) if p)
    if name in REGIONS:
        fx0, fy0, fx1, fy1 = REGIONS[name]
        return round(fx0 * w), round(fy0 * h), round(fx1 * w), round(fy1 * h)
    parts = [p for p in re.split(r"[\s,;()\[\]]+", text) if p]
    try:
        nums = [float(p) for p in parts]
    except ValueError:
        nums = []
    if len(nums) != 4:
        raise ValueError(f"cannot read the box {str(box)[:60]!r}: write four pixel numbers "
                         f"x0 y0 x1 y1 (the image is {w}x{h}) or a region name "
                         f"({', '.join(REGIONS)})")
    x0, y0, x1, y1 = (int(round(v)) for v in nums)
    if not (0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h):
        raise ValueError(f"the box {x0} {y0} {x1} {y1} is not inside the {w}x{h} image: need "
                         f"0 <= x0 < x1 <= {w} and 0 <= y0 < y1 <= {h}")
    return x0, y0, x1, y1


_RESAMPLE = {"nearest": Image.Resampling.NEAREST, "bilinear": Image.Resampling.BILINEAR,
             "bicubic": Image.Resampling.BICUBIC, "lanczos": Image.Resampling.LANCZOS}


class CropTool:
    """Zoom into a region of the episode's image: crop it and enlarge it ``zoom`` times.

    The box is in pixels of the *original* image (a crop of a crop is not a thing: boxes
    always refer to the image the task showed), or a region name. The result is the
    region enlarged ``zoom`` times (at most ``max_side`` pixels on its longer side, resampled
    with ``resample``), and a line saying which region it is. A box that cannot be used comes
    back as an ``"Error: ..."`` text with no image (the episode goes on).
    """

    name = "crop"
    description = ("Zoom into part of the image. Give a box 'x0 y0 x1 y1' in pixels of the "
                   "original image, or a region: " + ", ".join(REGIONS) + ".")
    parameters = {"type": "object",
                  "properties": {"box": {"type": "string",
                                         "description": "'x0 y0 x1 y1' in pixels, or a region "
                                                        "name such as 'top-left'"}},
                  "required": ["box"]}
    needs_image = True

    def __init__(self, zoom: float = 2.0, max_side: int = 384, resample: str = "bicubic",
                 timeout_s: float = 5.0):
        if zoom <= 0 or max_side < 1:
            raise ValueError(f"crop needs zoom > 0 and max_side >= 1, got {zoom}, {max_side}")
        if resample not in _RESAMPLE:
            raise ValueError(f"crop resample must be one of {sorted(_RESAMPLE)}, got {resample!r}")
        self.zoom, self.max_side, self.resample = float(zoom), int(max_side), resample
        self.timeout_s = timeout_s

    def output_size(self, box: tuple[int, int, int, int]) -> tuple[int, int]:
        """The size of the image a crop of ``box`` returns."""
        w, h = box[2] - box[0], box[3] - box[1]
        scale = min(self.zoom, self.max_side / max(w, h))
        return max(1, round(w * scale)), max(1, round(h * scale))

    async def __call__(self, box: str, image: Image.Image | None = None) -> ImageResult | str:
        if image is None:
            raise ValueError("crop needs the episode's image: use it in an image env "
                             "(agentsearch/Vision-v0), which passes image=")
        try:
            xyxy = parse_box(box, image.size)
        except ValueError as e:
            return f"Error: {e}"
        region = image.crop(xyxy).resize(self.output_size(xyxy), _RESAMPLE[self.resample])
        x0, y0, x1, y1 = xyxy
        return ImageResult(f"Region {x0} {y0} {x1} {y1} of the image, enlarged to "
                           f"{region.width}x{region.height}.", (region,))


class ImageTuple(Space):
    """A Gymnasium space of tuples of at most ``max_images`` RGB ``PIL.Image`` images."""

    def __init__(self, max_images: int, seed=None):
        if max_images < 1:
            raise ValueError(f"max_images must be >= 1, got {max_images}")
        self.max_images = max_images
        super().__init__(None, None, seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        return (isinstance(x, tuple) and len(x) <= self.max_images
                and all(isinstance(i, Image.Image) and i.mode == "RGB" for i in x))

    def sample(self, mask: Any = None, probability: Any = None) -> tuple:
        n = int(self.np_random.integers(0, self.max_images + 1))
        out = []
        for _ in range(n):
            h, w = (int(v) for v in self.np_random.integers(1, 33, size=2))
            pixels = self.np_random.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            out.append(Image.fromarray(pixels, "RGB"))
        return tuple(out)

    def __repr__(self) -> str:
        return f"ImageTuple(max_images={self.max_images})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ImageTuple) and other.max_images == self.max_images
