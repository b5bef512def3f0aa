"""The seam between a VLM's processor and code written for text tokenizers.

The rollout, the trainer and the warm start tokenize env text with ``tokenizer(texts,
add_special_tokens=False)`` and decode with ``tokenizer.decode``. For a vision-language
model, ``ImageTextTokenizer`` is that tokenizer: it expands every ``<image>`` placeholder to
the processor's ``tokens_per_image`` image tokens before tokenizing (so an episode's
``token_ids`` hold exactly the tokens the model reads, image tokens masked 0 like any
environment token), and ``pixel_values(images)`` turns an episode's PIL images into the
processor's pixels (stored with each replay group, so rescoring and the replay scan
re-encode the same inputs). Everything else is the processor's text tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["ImageTextTokenizer", "is_vlm_source", "is_vlm_model"]


def is_vlm_source(name_or_path: str) -> bool:
    """Whether ``name_or_path`` names a VLM: ``tiny-vlm`` or a folder whose config has a
    ``vision_config``."""
    if name_or_path == "tiny-vlm":
        return True
    cfg = Path(name_or_path) / "config.json"
    return cfg.is_file() and "vision_config" in json.loads(cfg.read_text())


def is_vlm_model(model) -> bool:
    """Whether ``model`` (peft-wrapped or not) has a vision tower config."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(getattr(base, "config", None), "vision_config", None) is not None


class ImageTextTokenizer:
    """A text tokenizer that expands image placeholders (module doc)."""

    def __init__(self, processor, max_pixels: int | None = None):
        self.processor = processor
        self.tok = processor.tokenizer
        self.max_pixels = max_pixels

    def __call__(self, text, add_special_tokens: bool = False, **kwargs):
        from agentsearch.models.vlm import expand_image_tokens

        if isinstance(text, str):
            return self.tok(expand_image_tokens(text, self.processor),
                            add_special_tokens=add_special_tokens, **kwargs)
        return self.tok([expand_image_tokens(t, self.processor) for t in text],
                        add_special_tokens=add_special_tokens, **kwargs)

    def pixel_values(self, images) -> Any:
        """``[n, 3, H, W]`` float32 pixels of ``images`` (None for none)."""
        from agentsearch.models.vlm import DEFAULT_MAX_PIXELS, prepare_images

        return prepare_images(self.processor, list(images),
                              max_pixels=self.max_pixels or DEFAULT_MAX_PIXELS)

    def save_pretrained(self, folder) -> None:
        self.processor.save_pretrained(folder)

    def __len__(self) -> int:
        return len(self.tok)

    def __getattr__(self, name: str):  # decode, eos_token_id, pad_token_id, ...
        if name in ("tok", "processor") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.tok, name)
