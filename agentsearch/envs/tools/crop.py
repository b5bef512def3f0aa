"""The ``crop`` tool: zoom into a region of the episode's image.

It returns an ``ImageResult`` (``agentsearch.envs.images``): a short text plus the enlarged
region. A tool that sets ``needs_image = True`` is called with the episode's image as the
keyword ``image`` (``VisionEnv`` does that); a box it cannot use is an ``"Error: ..."`` text
the model reads, like the calculator's syntax errors.
"""

from __future__ import annotations

import re

from PIL import Image

from agentsearch.envs.images import REGIONS, ImageResult

__all__ = ["CropTool", "parse_box"]

_ALIASES = {"upper": "top", "lower": "bottom", "centre": "center", "middle": "center",
            "whole": "full", "all": "full"}


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
