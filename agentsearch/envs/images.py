"""Images for vision environments: safe loading, tool results, and an observation space.

Representation: inside an environment and in its observations an image is an RGB
``PIL.Image.Image``, fully decoded and detached from any file (what transformers' image
processors take). Task rows keep only a *path* (``task["image"]``), so rows stay
JSON-serialisable; ``open_image`` turns it into pixels, and every way that can fail (no
such file, not an image, a truncated file, too many pixels) is a ``ValueError`` that names
the file, never an exception from deep inside PIL.

An image tool (``agentsearch.envs.tools.crop.CropTool``, registered as ``crop``) returns an
``ImageResult``: a short text plus the images it shows. ``REGIONS`` names the regions a
crop box may be.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.spaces import Space
from PIL import Image, UnidentifiedImageError

__all__ = ["ImageResult", "ImageTuple", "open_image", "check_image", "REGIONS",
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
