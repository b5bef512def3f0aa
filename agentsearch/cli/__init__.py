"""The ``agentsearch`` command.

Subcommands: ``demo``, ``train``, ``eval``, ``diagnose``, ``index``, ``serve``,
``serve-encoder``, ``pareto``, ``report``, ``check-env``, ``openrlhf``, ``world``,
``wiki-corpus``. Every handler imports its heavy modules lazily, so ``--help`` is instant.
``main`` runs one command line; ``cli.parser`` holds the arguments of each subcommand,
``cli.commands`` their handlers.
"""

from __future__ import annotations

import os
import sys

from agentsearch.cli.parser import build_parser

__all__ = ["main", "build_parser"]


class _DropNotice:
    """A logging filter that drops records whose message starts with ``prefix``."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def filter(self, record) -> bool:
        return not str(record.msg).startswith(self.prefix)


def _quiet_env() -> None:
    """One progress line per phase is ours to print; the libraries' chatter is not shown.
    Each setting names what it silences (all are ``setdefault``: a user's own value wins)."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", message="The pynvml package is deprecated")
    # Before transformers/tokenizers import: no hub access, no fork warnings, no TF chatter.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # transformers' "Loading weights" / "Writing model shards" bars read huggingface_hub's switch
    # when transformers is imported; the GGUF conversion's bar (plain tqdm.auto) reads tqdm's.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    # DeepSpeed (imported by transformers' save_pretrained, via accelerate, when installed)
    # warns "Setting accelerator to CPU" on every machine without a GPU. Its logger sets its
    # own level on import, so a level set here would not hold; a filter on the logger does.
    logging.getLogger("DeepSpeed").addFilter(_DropNotice("Setting accelerator to CPU"))
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # "generated new fontManager"
    # vLLM's start-up notices (eager mode, no Triton on CPU, ...) print on stdout at WARNING,
    # around the one JSON line `openrlhf smoke` prints; its errors still show
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def main(argv: list[str] | None = None) -> int:
    _quiet_env()
    parser = build_parser()
    a = parser.parse_args(argv)
    if not getattr(a, "fn", None):
        parser.print_help()
        return 2
    if a.command == "index" and not a.index_command:
        parser.parse_args(["index", "--help"])
    from agentsearch.core.config import ConfigError
    from agentsearch.core.reliability import OutageError
    from agentsearch.retrievers.base import RetrieverError

    try:
        return a.fn(a) or 0
    except OutageError as e:  # the trainer checkpointed before it stopped
        print(f"agentsearch {a.command}: stopped: {e}", file=sys.stderr)
        return 3
    except (ConfigError, FileNotFoundError, FileExistsError, RetrieverError) as e:
        print(f"agentsearch {a.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # e.g. a model or encoder missing from the offline cache
        print(f"agentsearch {a.command}: error: {type(e).__name__}: {str(e).splitlines()[0]}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
