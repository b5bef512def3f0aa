"""The ``--search-r1`` arm's retrieval server for ``replay_suite.py``: the world's Pyserini
index built (or found), served by ``agentsearch serve`` on 127.0.0.1 until the suite stops it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from agentsearch.recipes.runner import subprocess_env

__all__ = ["free_port", "start_server", "stop_server"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(out: Path, world_seed: int, port: int) -> tuple[subprocess.Popen, str]:
    """Build (or find) the world's Pyserini index and serve it on 127.0.0.1:PORT."""
    env = {**subprocess_env(1), "AGENTSEARCH_JAVA_THREADS": "1"}
    code = ("from agentsearch.retrievers import world_index; "
            f"print(world_index({world_seed}, 'bm25'))")
    index = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if index.returncode != 0:
        raise SystemExit("replay_suite: building the world's Pyserini index failed:\n"
                         f"{index.stderr[-2000:]}")
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "server.log", "a", encoding="utf-8")
    path = index.stdout.strip().splitlines()[-1]  # Lucene logs to stdout too; the path comes last
    proc = subprocess.Popen([sys.executable, "-m", "agentsearch", "serve", "--index", path,
                             "--host", "127.0.0.1", "--port", str(port), "--threads", "1"],
                            env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 180
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"replay_suite: agentsearch serve exited ({proc.returncode}); "
                             f"see {out / 'server.log'}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            stop_server(proc)
            raise SystemExit(f"replay_suite: agentsearch serve did not answer on {url} in 180 s")
        time.sleep(0.5)


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
