"""``agentsearch serve`` as a child process, for benchmarks and fault trials.

>>> server = ServerProcess(index_dir, threads=1).start()   # waits for GET /health
>>> server.url                                               # http://127.0.0.1:PORT
>>> server.kill(); server.start()                            # SIGKILL, then the same port again
>>> server.rss_mb(); server.stop()

The port is chosen once (a free loopback port) and kept across restarts, so clients that
hold the URL see a dead server come back where it was. The child's stderr goes to ``log``
(appended) when given.

``command`` runs another server instead (e.g. Search-R1's, through
``scripts/search_r1_cpu.py``), with ``{port}`` in it replaced by the port; it counts as up
once ``GET /health`` gets any HTTP answer (Search-R1's has no ``/health``: a 404 is an answer).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["ServerProcess", "free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerProcess:
    """One ``agentsearch serve --index ...`` child (module notes)."""

    def __init__(self, index: str | Path | list, *, port: int | None = None, threads: int = 1,
                 args: tuple[str, ...] = (), log: Path | None = None,
                 start_timeout_s: float = 180.0, command: list[str] | None = None):
        self.indexes = [str(i) for i in (index if isinstance(index, (list, tuple)) else [index])]
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.threads, self.args, self.log = threads, tuple(args), log
        self.start_timeout_s = start_timeout_s
        self.command = [c.replace("{port}", str(self.port)) for c in command] if command else None
        self.proc: subprocess.Popen | None = None

    def start(self) -> ServerProcess:
        import httpx

        t = str(self.threads)
        env = {**os.environ, "OMP_NUM_THREADS": t, "AGENTSEARCH_JAVA_THREADS": t,
               "PYTHONWARNINGS": "ignore"}
        err = open(self.log, "ab") if self.log else subprocess.DEVNULL
        cmd = self.command or [sys.executable, "-m", "agentsearch", "serve", "--index",
                               *self.indexes, "--port", str(self.port), *self.args]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        if self.log:
            err.close()
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                status = httpx.get(self.url + "/health", timeout=2.0).status_code
                if status == 200 or (self.command and status < 500):
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                what = "the server" if self.command else "agentsearch serve"
                raise RuntimeError(f"{what} on port {self.port} did not start"
                                   + (f"; see {self.log}" if self.log else ""))
            time.sleep(0.2)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would: no shutdown, open requests cut."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def rss_mb(self) -> float | None:
        """The child's resident memory (MiB), from ``/proc``; ``None`` when it is not running."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except (OSError, AttributeError):
            return None
        return None

    def __enter__(self) -> ServerProcess:
        return self.start() if not self.alive() else self

    def __exit__(self, *exc) -> None:
        self.stop()
