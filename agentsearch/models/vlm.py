"""Vision-language models, all loadable offline: a tiny LLaVA, saved folders, HF VLMs.

``load_vlm(name)`` returns ``(model, processor)`` for:

- ``"tiny-vlm"``: ``tiny_vlm()``, a random-init LLaVA built from transformers' own classes
  (``LlavaForConditionalGeneration``): a small CLIP vision tower (2 layers, hidden 64,
  16x16 patches on 64x64 images), the LLaVA two-layer projector, and the Qwen2-shaped
  text model of ``agentsearch.models.tiny_config``, with the shipped world tokenizer plus
  one special token ``<image>`` (``IMAGE_TOKEN``; the text embedding grows by one row);
- a folder written by ``save_vlm`` (or ``model.save_pretrained`` + ``processor.save_pretrained``);
- any other string: a Hugging Face VLM (Qwen2.5-VL, SmolVLM, ...) already in the local
  cache or a folder of one, through ``AutoModelForImageTextToText`` / ``AutoProcessor`` with
  ``local_files_only`` (nothing is downloaded; not exercised by the tests, which run offline).

Images in text: an environment writes ``<image>`` once per image where it belongs; the
processor (``processor(text=..., images=[...])``, or ``expand_image_tokens`` on text alone)
repeats it ``tokens_per_image`` times (16 for ``tiny-vlm``: a 64x64 image cut into 16x16
patches is a 4x4 grid; the CLIP class token is dropped, LLaVA's ``"default"`` feature
strategy), and the model writes one projected patch feature over each repeated token, images
in row-major order of the batch. The image processor is transformers' PIL one
(``CLIPImageProcessorPil``: no torchvision), resizing the whole image to 64x64 (no crop:
a task about the left edge keeps its left edge).

Scoring and sampling: ``agentsearch.models.logprobs.token_logprobs`` takes the images
(``pixel_values``) with the same positions, padding and temperature conventions as text. The image
token is not an action of the policy: ``ImageTokenSuppressor`` keeps generation from sampling it (a
sampled ``<image>`` would have no image to fill it), and ``token_logprobs`` takes the
softmax over the same vocabulary without it and never scores a position whose token is an
image token, so generation-time and teacher-forced logprobs are the same quantity.
Sampling goes through the rollout's ``HFBackend``, which passes each prompt's images.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

# torch and transformers are imported where used: environments import IMAGE_TOKEN, check_images

__all__ = ["IMAGE_TOKEN", "DEFAULT_MAX_PIXELS", "tiny_vlm", "load_vlm", "save_vlm",
           "image_token_id", "tokens_per_image", "expand_image_tokens", "check_images",
           "prepare_images", "collate_pixel_values", "check_image_inputs", "ImageTokenSuppressor"]

IMAGE_TOKEN = "<image>"
"""The placeholder an environment writes once per image (``agentsearch.envs.vision`` too)."""
DEFAULT_MAX_PIXELS = 2048 * 2048
"""Largest image (width x height) the processor accepts; a larger one is a ValueError."""


def _image_size(im) -> tuple[int, int]:
    """(width, height) of a PIL image, or of an [H, W, C] / [C, H, W] array or tensor."""
    if isinstance(getattr(im, "size", None), tuple):
        return im.size
    shape = tuple(getattr(im, "shape", ()))
    if len(shape) == 3 and shape[-1] in (1, 3, 4) and shape[0] not in (1, 3, 4):
        return shape[1], shape[0]
    if len(shape) < 2:
        raise ValueError(f"not an image: {type(im).__name__} (pass PIL images or [H, W, C] arrays)")
    return shape[-1], shape[-2]


def check_images(images: Sequence[Any], n_placeholders: int | None = None, *,
                 max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
    """ValueError unless every image is at most ``max_pixels`` and, if given, the text
    holds exactly one ``<image>`` placeholder per image."""
    for i, im in enumerate(images):
        w, h = _image_size(im)
        if w * h > max_pixels:
            raise ValueError(f"image {i} is {w}x{h} = {w * h} pixels, over the limit of "
                             f"{max_pixels}; downscale it first "
                             "(PIL: image.thumbnail((1024, 1024))) or raise max_pixels")
    if n_placeholders is not None and n_placeholders != len(images):
        raise ValueError(f"the text has {n_placeholders} {IMAGE_TOKEN} placeholder(s) but "
                         f"{len(images)} image(s) were given: write {IMAGE_TOKEN} once where each "
                         "image goes")


_PROCESSOR_CLASS = None


def _processor_class():
    """``TinyVLMProcessor``: ``LlavaProcessor`` that checks its inputs (placeholders vs images,
    image size) before processing them; built on first use (transformers imports slowly)."""
    global _PROCESSOR_CLASS
    if _PROCESSOR_CLASS is None:
        from transformers import LlavaProcessor

        class TinyVLMProcessor(LlavaProcessor):
            max_pixels = DEFAULT_MAX_PIXELS

            def __call__(self, images=None, text=None, **kwargs):
                texts = [text] if isinstance(text, str) else list(text or [])
                imgs = ([] if images is None
                        else [images] if not isinstance(images, (list, tuple))
                        else [im for x in images
                              for im in (x if isinstance(x, (list, tuple)) else [x])])
                check_images(imgs, sum(t.count(self.image_token) for t in texts),
                             max_pixels=self.max_pixels)
                return super().__call__(images=images if imgs else None, text=text, **kwargs)

        TinyVLMProcessor.__module__ = __name__
        TinyVLMProcessor.__qualname__ = "TinyVLMProcessor"
        _PROCESSOR_CLASS = TinyVLMProcessor
    return _PROCESSOR_CLASS


def __getattr__(name: str):
    if name == "TinyVLMProcessor":
        return _processor_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tiny_vlm(seed: int | None = 0, image_size: int = 64, *, patch_size: int = 16,
             text: str = "tiny", vision_hidden: int = 64, vision_layers: int = 2,
             vision_heads: int = 4):
    """``(model, processor)``: a random-init LLaVA (CLIP tower + projector + Qwen2 text model).

    ``text`` is a size of ``agentsearch.models.MODEL_SIZES`` (random text weights), or
    ``"tiny-base"`` to start the text model from the shipped base's weights (its embedding
    grows by the ``<image>`` row). ``(image_size // patch_size) ** 2`` tokens per image.
    """
    import torch
    from transformers import (
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

    from agentsearch.models.text import load_tokenizer, tiny_config

    if image_size % patch_size:
        raise ValueError(f"image_size {image_size} is not a multiple of patch_size {patch_size}")
    tok = load_tokenizer("tiny")
    tok.add_tokens([IMAGE_TOKEN], special_tokens=True)
    image_id = tok.convert_tokens_to_ids(IMAGE_TOKEN)
    text_cfg = tiny_config("tiny" if text == "tiny-base" else text, vocab_size=len(tok))
    vision_cfg = CLIPVisionConfig(hidden_size=vision_hidden, intermediate_size=2 * vision_hidden,
                                  num_hidden_layers=vision_layers, num_attention_heads=vision_heads,
                                  image_size=image_size, patch_size=patch_size,
                                  projection_dim=vision_hidden)
    n_tokens = (image_size // patch_size) ** 2
    cfg = LlavaConfig(vision_config=vision_cfg, text_config=text_cfg, image_token_index=image_id,
                      image_seq_length=n_tokens, vision_feature_layer=-1,
                      vision_feature_select_strategy="default", projector_hidden_act="gelu",
                      tie_word_embeddings=True)
    if seed is not None:
        torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(cfg)
    if text == "tiny-base":
        from agentsearch.models.text import load_base

        base, _ = load_base()
        base.resize_token_embeddings(len(tok))  # new <image> row: mean of the others
        model.model.language_model.load_state_dict(base.model.state_dict())
        model.tie_weights()
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    ip = CLIPImageProcessorPil(size={"height": image_size, "width": image_size},
                               do_center_crop=False,
                               crop_size={"height": image_size, "width": image_size})
    # CLIP's class token (num_additional_image_tokens=1) is dropped by the "default" strategy
    processor = _processor_class()(image_processor=ip, tokenizer=tok, patch_size=patch_size,
                                   vision_feature_select_strategy="default",
                                   num_additional_image_tokens=1, image_token=IMAGE_TOKEN)
    return model.eval(), processor


def save_vlm(model, processor, folder: str | Path) -> Path:
    """Write ``model`` and ``processor`` to ``folder`` (``load_vlm(folder)`` reads them back)."""
    folder = Path(folder)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def load_vlm(name_or_path: str = "tiny-vlm", *, dtype: Any = None, device: str | None = None,
             seed: int | None = 0):
    """``(model, processor)``: ``"tiny-vlm"``, a saved folder, or a locally cached HF VLM."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    if name_or_path == "tiny-vlm":
        model, processor = tiny_vlm(seed=seed)
    else:
        path = Path(name_or_path)
        cfg_file = path / "config.json"
        cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
        if cfg and "vision_config" not in cfg:
            raise ValueError(f"{name_or_path} is a text-only model ({cfg.get('model_type', '?')}: "
                             "no vision_config); load it with agentsearch.models.load_model, and "
                             "use a VLM ('tiny-vlm', Qwen2.5-VL, SmolVLM) for image tasks")
        if cfg.get("model_type") == "llava" and (path / "processor_config.json").is_file():
            from transformers import CLIPImageProcessorPil, LlavaForConditionalGeneration

            from agentsearch.models.text import load_tokenizer

            pcfg = json.loads((path / "processor_config.json").read_text())
            tok = load_tokenizer(str(path))  # exactly the folder's tokenizer.json
            processor = _processor_class()(
                image_processor=CLIPImageProcessorPil.from_pretrained(path), tokenizer=tok,
                patch_size=pcfg["patch_size"], image_token=pcfg.get("image_token", IMAGE_TOKEN),
                vision_feature_select_strategy=pcfg["vision_feature_select_strategy"],
                num_additional_image_tokens=pcfg.get("num_additional_image_tokens", 0))
            model = LlavaForConditionalGeneration.from_pretrained(
                path, dtype=dtype or torch.float32)
        elif path.exists() or "/" in name_or_path:
            # a real HF VLM (Qwen2.5-VL, SmolVLM, ...): its own processor; their image processors
            # fall back to PIL when torchvision is missing
            model = AutoModelForImageTextToText.from_pretrained(name_or_path, local_files_only=True,
                                                                dtype=dtype or torch.float32)
            processor = AutoProcessor.from_pretrained(name_or_path, local_files_only=True)
        else:
            raise ValueError(f"unknown VLM {name_or_path!r}: use 'tiny-vlm', a folder written by "
                             "save_vlm, or a Hugging Face VLM already in the local cache")
        model.eval()
    if dtype is not None:
        model = model.to(dtype)
    if device is not None:
        model = model.to(device)
    image_token_id(model)  # a clear error now for a model without one
    return model, processor


def _config(model):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    return base, base.config


def image_token_id(model_or_processor) -> int:
    """The image token's id; ValueError for a text-only model or tokenizer."""
    if hasattr(model_or_processor, "parameters"):
        _, cfg = _config(model_or_processor)
        tid = getattr(cfg, "image_token_id", getattr(cfg, "image_token_index", None))
        if tid is None:
            raise ValueError(f"{type(model_or_processor).__name__} "
                             f"({getattr(cfg, 'model_type', '?')}) has no image token: it is a "
                             "text-only model. Use a VLM for image tasks (load_vlm('tiny-vlm'), "
                             "Qwen2.5-VL, SmolVLM), or a text-only environment")
        return int(tid)
    tid = getattr(model_or_processor, "image_token_id", None)
    if tid is None or not hasattr(model_or_processor, "image_processor"):
        raise ValueError(f"{type(model_or_processor).__name__} has no image token and no image "
                         "processor: it is a text-only tokenizer. Use the processor from "
                         "load_vlm(...) for image tasks")
    return int(tid)


def tokens_per_image(model_or_processor) -> int:
    """How many image tokens one image expands to (LLaVA-style models with a fixed grid)."""
    if hasattr(model_or_processor, "parameters"):
        _, cfg = _config(model_or_processor)
        v = getattr(cfg, "vision_config", None)
        if v is None or getattr(cfg, "model_type", None) != "llava":
            raise ValueError("tokens_per_image needs a LLaVA-style config; other VLMs vary per "
                             "image")
        return (v.image_size // v.patch_size) ** 2 + (cfg.vision_feature_select_strategy == "full")
    p = model_or_processor
    image_token_id(p)
    if not hasattr(p, "patch_size"):
        raise ValueError(f"{type(p).__name__} does not use a fixed number of tokens per image")
    crop = p.image_processor.crop_size if getattr(p.image_processor, "do_center_crop", False) \
        else p.image_processor.size
    n = ((crop["height"] // p.patch_size) * (crop["width"] // p.patch_size)
         + p.num_additional_image_tokens)
    return n - (p.vision_feature_select_strategy == "default")


def expand_image_tokens(text: str, processor) -> str:
    """``text`` with each ``<image>`` repeated ``tokens_per_image`` times, ready to tokenize
    (for observation text whose images go through ``processor.image_processor`` separately)."""
    tok = processor.image_token
    return text.replace(tok, tok * tokens_per_image(processor))


def prepare_images(processor, images: Sequence[Any], n_placeholders: int | None = None, *,
                   max_pixels: int = DEFAULT_MAX_PIXELS) -> Tensor | None:
    """``pixel_values`` [N, 3, H, W] float32 of ``images`` (None if there are none), after
    ``check_images``; ValueError if ``processor`` is a text-only tokenizer. For observation
    images whose ``<image>`` placeholders were expanded with ``expand_image_tokens``."""
    image_token_id(processor)
    check_images(images, n_placeholders, max_pixels=max_pixels)
    if not images:
        return None
    return processor.image_processor(list(images), return_tensors="pt")["pixel_values"].float()


def collate_pixel_values(input_ids: Tensor, row_pixel_values: Sequence[Tensor | None],
                         model_or_processor) -> Tensor | None:
    """``pixel_values`` for a [B, T] batch: row b's images (``row_pixel_values[b]``, [n_b, 3, H, W]
    or None) in row order, each row keeping as many of its first images as its ids hold image
    blocks (a row cut after its last policy token keeps only the images before the cut). Rows
    that a packer reorders must come with their own images: this follows ``input_ids``' order."""
    import torch

    iid, per = image_token_id(model_or_processor), tokens_per_image(model_or_processor)
    if len(row_pixel_values) != input_ids.shape[0]:
        raise ValueError(f"{len(row_pixel_values)} rows of images for {input_ids.shape[0]} rows of "
                         "ids")
    out = []
    for b, pv in enumerate(row_pixel_values):
        n_tok, have = int((input_ids[b] == iid).sum()), 0 if pv is None else len(pv)
        if n_tok % per or n_tok // per > have:
            raise ValueError(f"row {b} holds {n_tok} image tokens, not a whole number of images of "
                             f"{per} tokens out of its {have} image(s): cut rows between images, "
                             "not inside one")
        if n_tok:
            out.append(pv[:n_tok // per])
    return torch.cat(out) if out else None


def check_image_inputs(model, input_ids: Tensor, pixel_values: Tensor | None) -> int:
    """The image token id of ``model``, after checking that ``input_ids`` hold exactly the image
    tokens of ``pixel_values`` (LLaVA: ``tokens_per_image`` per image, at the tower's size);
    a ValueError that says how to fix it otherwise (a text-only model too)."""
    image_id = image_token_id(model)
    n_tokens = int((input_ids == image_id).sum())
    n_images = 0 if pixel_values is None else int(pixel_values.shape[0])
    _, cfg = _config(model)
    if getattr(cfg, "model_type", None) != "llava":
        return image_id  # other VLMs: their forward checks their own layout
    per = tokens_per_image(model)
    if n_tokens != per * n_images:
        raise ValueError(f"input_ids hold {n_tokens} image tokens but {n_images} image(s) need "
                         f"{per * n_images} ({per} each): expand each {IMAGE_TOKEN} with the "
                         "processor (or expand_image_tokens) and pass exactly the images of the "
                         "batch, in order")
    size = cfg.vision_config.image_size
    if n_images and tuple(pixel_values.shape[-2:]) != (size, size):
        raise ValueError(f"pixel_values are {tuple(pixel_values.shape[-2:])}, the vision tower "
                         f"takes {size}x{size}: preprocess images with processor.image_processor")
    return image_id


class ImageTokenSuppressor:
    """Sets the image token's logit to -inf, so generation never samples it (a sampled
    ``<image>`` would have no image to fill it). Pass it first in ``logits_processor`` (custom
    processors run before transformers' temperature / top-k / top-p warpers; ``HFBackend``
    records the sampled tokens' logprobs after it); it is a plain callable, which
    ``LogitsProcessorList`` accepts."""

    def __init__(self, image_token_id: int):
        self.image_token_id = image_token_id

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        scores = scores.clone()
        scores[:, self.image_token_id] = float("-inf")
        return scores
