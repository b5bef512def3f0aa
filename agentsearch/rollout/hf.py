"""transformers ``generate`` as a generation backend, with sampled-token logprobs.

One ``generate()`` call = one batched ``model.generate`` (left padding + attention mask;
chunks of ``max_batch`` only if more prompts come at once). Logprobs are recorded while
sampling by a logits processor that sees the raw logits (it runs before the temperature,
top-k and top-p warpers): the logprob of each sampled token under ``log_softmax(logits /
temperature)``, the same quantity a teacher-forced forward computes. Only one step's
``[batch, vocab]`` log-softmax is alive at a time, never the whole ``[steps, batch,
vocab]`` stack that ``output_logits=True`` would keep.

Sequences are cut right after their first eos token or the token that completes a stop
string, whichever comes first; a token that runs past the stop string still ends the turn.
Stop strings only count inside the generated text (transformers' own ``stop_strings``
would also stop on one that began in the prompt). The model's own
generation config (e.g. an instruct model's temperature 0.2) is ignored: only
``SamplingParams`` decide how to sample.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
    StopStringCriteria,
)

from agentsearch.rollout.backends import Generation, SamplingParams

__all__ = ["HFBackend"]


class _LogprobRecorder(LogitsProcessor):
    """Keeps log p(sampled token) per step; sees raw logits (custom processors run first)."""

    def __init__(self, temperature: float):
        self.temperature = temperature if temperature > 0 else 1.0
        self.prev: torch.Tensor | None = None  # [B, V] log-softmax of the last step
        self.steps: list[torch.Tensor] = []  # each [B]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prev is not None:  # input_ids now ends with the token sampled from self.prev
            self.steps.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
        self.prev = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, sequences: torch.LongTensor) -> torch.Tensor:
        if self.prev is not None:
            self.steps.append(self.prev.gather(1, sequences[:, -1:]).squeeze(1))
            self.prev = None
        return (torch.stack(self.steps, dim=1) if self.steps                 # [B, T]
                else sequences.new_zeros((len(sequences), 0), dtype=torch.float32))


class _StopInGenerated(StoppingCriteria):
    """transformers' ``StopStringCriteria`` (token-level, handles tokens that overhang the
    stop string), except that a match must lie inside the generated text: the stock one
    also fires on a stop string that starts in the prompt."""

    def __init__(self, stop: tuple[str, ...], tokenizer, start: int):
        self.inner = StopStringCriteria(tokenizer=tokenizer, stop_strings=list(stop))
        self.stop, self.tokenizer, self.start = stop, tokenizer, start

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        hit = self.inner(input_ids, scores)
        for b in hit.nonzero().flatten().tolist():  # rare: verify on the generated text
            text = self.tokenizer.decode(input_ids[b, self.start:].tolist(),
                                         skip_special_tokens=False)
            if not any(s in text for s in self.stop):
                hit[b] = False
        return hit


class HFBackend:
    """Batched sampling with a transformers causal LM (``model``) and its ``tokenizer``.

    A vision-language model (``agentsearch.models.vlm``) takes the episodes' images: its
    ``tokenizer`` must be an ``agentsearch.models.processor.ImageTextTokenizer``; each prompt's
    images (all of its episode's so far, in order) are encoded with it, and the image token is never
    sampled (it is masked before the logprobs are recorded, as ``token_logprobs`` does for images).
    """

    def __init__(self, model, tokenizer, device: Any = None, max_batch: int = 1024):
        from agentsearch.models.processor import is_vlm_model

        self.model, self.tokenizer = model, tokenizer
        self.accepts_images = is_vlm_model(model)
        if self.accepts_images and not hasattr(tokenizer, "pixel_values"):
            raise ValueError("a vision-language model needs an ImageTextTokenizer "
                             "(agentsearch.models.processor) as its tokenizer")
        self.device = (torch.device(device) if device is not None
                       else next(model.parameters()).device)
        self.max_batch = max_batch
        self.pad_id = (tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                       else tokenizer.eos_token_id)
        eos = model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        self.eos_ids = sorted({*eos, *([tokenizer.eos_token_id]
                                       if tokenizer.eos_token_id is not None else [])})
        if not self.eos_ids:
            raise ValueError("the tokenizer has no eos token; set tokenizer.eos_token")

    def sync(self, model) -> None:
        """Copy ``model``'s weights into this backend's model when it holds its own copy (a run
        that generates while the trainer updates, ``async.max_staleness >= 1``); a no-op when
        it generates with the trainer's model itself."""
        if model is not self.model:
            with torch.no_grad():
                self.model.load_state_dict(model.state_dict())

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 images: list[list] | None = None) -> list[Generation]:
        if images is not None and not self.accepts_images:
            raise ValueError("the env gives images but this model is text-only; use a "
                             "vision-language model (model=tiny-vlm)")
        out: list[Generation] = []
        for s in range(0, len(prompts), self.max_batch):
            out += self._generate(prompts[s:s + self.max_batch], params,
                                  None if images is None else images[s:s + self.max_batch])
        return out

    def _vision_inputs(self, ids: torch.Tensor, images: list[list] | None) -> tuple[list, dict]:
        """(logits processors, generate kwargs) for a VLM; nothing for a text model. The
        pixels are collated as for scoring (``vlm.collate_pixel_values``), so a prompt whose
        image tokens its images do not cover is a ValueError, not a silent text prompt."""
        if not self.accepts_images:
            return [], {}
        from agentsearch.models.vlm import (
            ImageTokenSuppressor,
            collate_pixel_values,
            image_token_id,
        )

        rows = [self.tokenizer.pixel_values(imgs) if imgs else None
                for imgs in (images or [None] * len(ids))]
        pixels = collate_pixel_values(ids, rows, self.model)
        kwargs = {"pixel_values": pixels.to(self.device)} if pixels is not None else {}
        return [ImageTokenSuppressor(image_token_id(self.model))], kwargs

    def _config(self, p: SamplingParams) -> GenerationConfig:
        sample = p.temperature > 0
        warp = dict(temperature=p.temperature, top_p=p.top_p, top_k=p.top_k) if sample else {}
        return GenerationConfig(max_new_tokens=p.max_new_tokens, do_sample=sample, **warp,
                                repetition_penalty=1.0, num_beams=1, eos_token_id=self.eos_ids,
                                pad_token_id=self.pad_id, return_dict_in_generate=True,
                                use_cache=True)

    @torch.no_grad()
    def _generate(self, prompts: list[list[int]], p: SamplingParams,
                  images: list[list] | None = None) -> list[Generation]:
        if not prompts:
            return []
        if any(len(x) == 0 for x in prompts):
            raise ValueError("empty prompt: every prompt needs at least one token")
        width = max(len(x) for x in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, x in enumerate(prompts):
            ids[i, width - len(x):] = torch.tensor(x, dtype=torch.long)
            mask[i, width - len(x):] = 1
        if p.seed is not None:
            torch.manual_seed(p.seed)
        recorder = _LogprobRecorder(p.temperature)
        model, was_training = self.model, self.model.training
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
        saved_cfg = base.generation_config
        base.generation_config = GenerationConfig()  # ignore the checkpoint's sampling defaults
        model.eval()
        stops = StoppingCriteriaList([_StopInGenerated(p.stop, self.tokenizer, width)] if p.stop
                                     else [])
        processors, vision = self._vision_inputs(ids, images)
        try:
            res = model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                 generation_config=self._config(p),
                                 logits_processor=LogitsProcessorList([*processors, recorder]),
                                 stopping_criteria=stops, **vision)
        finally:
            base.generation_config = saved_cfg
            model.train(was_training)
        new = res.sequences[:, width:].cpu()  # [B, T]
        logprobs = recorder.finish(res.sequences).cpu()  # [B, T]
        assert logprobs.shape == new.shape, (logprobs.shape, new.shape)
        return [self._cut(new[i].tolist(), logprobs[i].tolist(), p) for i in range(len(prompts))]

    def _cut(self, ids: list[int], lps: list[float], p: SamplingParams) -> Generation:
        end, reason = len(ids), "length"
        for j, t in enumerate(ids):
            if t in self.eos_ids:
                end, reason = j + 1, "eos"
                break
        if p.stop:
            k = self._stop_index(ids[:end], p.stop)
            if k is not None and (reason != "eos" or k < end):
                end, reason = k, "stop"
        return Generation(token_ids=ids[:end], logprobs=lps[:end], finish_reason=reason)

    def _stop_index(self, ids: list[int], stop: tuple[str, ...]) -> int | None:
        """Smallest ``k`` such that ``ids[:k]`` decodes to text containing a stop string."""
        def hit(k: int) -> bool:
            text = self.tokenizer.decode(ids[:k], skip_special_tokens=False)
            return any(s and s in text for s in stop)

        if not ids or not hit(len(ids)):
            return None
        lo, hi = 1, len(ids)  # hit(hi) is True
        while lo < hi:
            mid = (lo + hi) // 2
            if hit(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo
