"""What the policy is: text models and tokenizers, the shipped base, the tiny VLM, LoRA,
and the one teacher-forced ``token_logprobs`` (images optional), all loadable offline.

- ``text``: ``load_model`` / ``load_tokenizer`` (``tiny``, ``tiny-s``, ``small``,
  ``tiny-base``, ``smollm2``, folders), ``tiny_config``, the world tokenizer;
- ``tiny_base``: the shipped base's recipe and build record (``check_base``);
- ``vlm`` and ``processor``: the tiny LLaVA and the tokenizer seam for images;
- ``lora``: peft LoRA or full fine-tuning; ``logprobs``: ``token_logprobs``, ``make_score_fn``.

Importing this package imports neither torch nor transformers (each function does).
"""

from agentsearch.models.text import (
    MODEL_SIZES,
    load_base,
    load_model,
    load_tokenizer,
    smollm2_path,
    tiny_config,
    train_world_tokenizer,
)

__all__ = ["MODEL_SIZES", "load_base", "load_model", "load_tokenizer", "smollm2_path",
           "tiny_config", "train_world_tokenizer"]
