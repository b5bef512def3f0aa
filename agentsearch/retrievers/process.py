"""``agentsearch serve`` as a child process, for benchmarks and fault trials.

>>> server = ServerProcess(index_dir, threads=1).start()   # waits for GET /health
>>> server.url                                               # http://127.0.0.1:PORT
>>> server.kill(); server.start()                            # SIGKILL, then the same port again
>>> server.rss_mb(); server.stop()

The port is chosen once (a free loopback port) and kept across restarts, so clients that
hold the URL see a dead server come back where it was. The child's stderr goes to ``log``
(appended) when given.
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
                 args: tuple[str, ...] = (), log: Path | None = None, start_timeout_s: float = 180.0):
        self.indexes = [str(i) for i in (index if isinstance(index, (list, tuple)) else [index])]
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.threads, self.args, self.log = threads, tuple(args), log
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None

    def start(self) -> ServerProcess:
        import httpx

        t = str(self.threads)
        env = {**os.environ, "OMP_NUM_THREADS": t, "AGENTSEARCH_JAVA_THREADS": t, "PYTHONWARNINGS": "ignore"}
        err = open(self.log, "ab") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen([sys.executable, "-m", "agentsearch", "serve", "--index", *self.indexes,
                                      "--port", str(self.port), *self.args],
                                     env=env, stdout=subprocess.DEVNULL, stderr=err)
        if self.log:
            err.close()
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"agentsearch serve on port {self.port} did not start"
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
