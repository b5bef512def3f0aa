"""keep_freed_memory: after it, a large tensor freed and allocated again reuses the heap's pages
instead of faulting fresh ones in (glibc's defaults map and unmap each such block)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="glibc malloc only")

PROBE = """
import json, os, resource, sys
import torch
from agentsearch.core.cpu_memory import keep_freed_memory
did = keep_freed_memory() if sys.argv[1] == "keep" else {"malloc": "default"}
for _ in range(20):  # 64 MiB allocated and freed until the heap's free space fits one
    torch.empty(16 * 2**20).fill_(1.0)  # (an aligned request is a little larger than the last)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):  # what a forward pass does layer after layer
    torch.empty(16 * 2**20).fill_(1.0)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({**did, "faults": faults, "env": os.environ.get("MALLOC_MMAP_MAX_")}))
"""


def _probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         check=True, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    return json.loads(out.stdout.strip().splitlines()[-1])


@glibc
def test_keep_freed_memory_reuses_pages_default_faults_them_in():
    default, keep = _probe("default"), _probe("keep")
    pages = 10 * 64 * 2**20 // 4096  # ten 64 MiB tensors in 4 KiB pages
    assert default["faults"] > pages // 2, default  # each allocation faulted in afresh
    assert keep == {"malloc": "keep", "faults": keep["faults"], "env": "0"}, keep
    assert keep["faults"] < pages // 20, (keep, default)  # the freed pages reused


def test_train_config_keeps_freed_memory_by_default():
    from agentsearch.trainer.train_config import TrainConfig

    assert TrainConfig().keep_freed_memory is True
