"""Importing OpenRLHF on machines without CUDA.

OpenRLHF 0.11.2 imports ``flash_attn`` at module load; the flash-attn 2.8.3 wheel built
with ``FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE`` (the only way it builds without CUDA, see
the Makefile) is Python-only and its interface module imports the compiled extension
``flash_attn_2_cuda``. On a CPU-only machine we register an empty module under that
name so the import succeeds; nothing calls into it (flash attention is never selected
on CPU). On CUDA machines with a real flash-attn build the stub is never installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

SUPPORTED_VERSION = "0.11.2"
"""The OpenRLHF release whose extension points agentsearch uses
(``tests/test_openrlhf_pins.py``)."""


def check_version() -> str:
    """The installed OpenRLHF version; a clear ``ImportError`` when it is missing or another."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("openrlhf")
    except PackageNotFoundError:
        raise ImportError("OpenRLHF is not installed: the `openrlhf` extra needs openrlhf=="
                          f"{SUPPORTED_VERSION}; `make install-test` installs it (--no-deps, see "
                          "the Makefile), on GPUs `pip install openrlhf[vllm]=="
                          + SUPPORTED_VERSION + "`") from None
    if found != SUPPORTED_VERSION:
        raise ImportError(f"OpenRLHF {found} is installed; agentsearch's OpenRLHF engine supports "
                          f"{SUPPORTED_VERSION} only (it subclasses OpenRLHF's experience maker, "
                          "sample generator and trainer): pip install "
                          f"openrlhf=={SUPPORTED_VERSION}")
    return found


def import_openrlhf():
    """Import and return the ``openrlhf`` package, with the CPU shim if needed."""
    if "flash_attn_2_cuda" not in sys.modules \
            and importlib.util.find_spec("flash_attn_2_cuda") is None:
        stub = types.ModuleType("flash_attn_2_cuda")
        stub.__doc__ = "agentsearch CPU stub: flash-attn was built without CUDA kernels"
        sys.modules["flash_attn_2_cuda"] = stub
    try:
        return importlib.import_module("openrlhf")
    except ImportError as e:
        raise ImportError("OpenRLHF is not installed: `make install-test` installs "
                          "openrlhf==0.11.2 (--no-deps) with the Python-only flash-attn "
                          "build") from e
