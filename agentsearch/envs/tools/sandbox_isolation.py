"""The python sandbox's isolation layers: which work here (probed once per process), the per-run
pids cgroup, and the logging that makes a missing layer loud.

Layers (``sandbox.run_python`` applies all that the probe found; ``sandbox_init`` sets up the
inner ones):

- **network**: ``unshare -r -n -m -p -f --kill-child`` (``-r`` user namespace where the kernel
  allows it, else as root ``-n -m -p -f``): a private network namespace with only a down
  loopback. Landlock (ABI >= 4) also refuses TCP bind/connect, a second wall.
- **filesystem**: Landlock (``sandbox_init.landlock``): writes, truncation, creating, removing,
  linking or renaming anything are refused everywhere but the temp dir and ``/dev/null``, for
  the program and all it starts (needed: the sandbox runs as root here, so file permissions are
  no barrier). Reads stay allowed. The domain also blocks ptrace-style access (e.g.
  ``/proc/PID/environ``) and signals to processes outside it.
- **processes**: the pid namespace: its first process (``sandbox_init``) exits when the program
  does, and the kernel then kills every process left in the namespace (a grandchild that
  ``setsid()``-ed or double-forked included); ``--kill-child`` does the same when ``unshare``
  is killed, and ``PR_SET_PDEATHSIG`` when the parent dies.
- **process limit**: a pids cgroup per run (``pids.max``, default 64 processes and threads;
  cgroup v1 ``pids`` as here, or a cgroup v2 tree with the ``pids`` controller), plus the
  namespace's own ``kernel.pid_max`` = 301 (Linux >= 6.14; at most 300 pids) where cgroups are
  not writable. RLIMIT_NPROC is no option as root (root is exempt), and running the child
  under another uid fails here: the interpreter lives under ``/root`` (mode 0700).
- **disk**: a tmpfs (``size``, ``nr_inodes``) mounted on the temp dir in the sandbox's mount
  namespace, before Landlock (a landlocked process cannot mount); each file is also capped by
  ``RLIMIT_FSIZE``, the same limit that caps the program's output.

Measured here (Linux 6.18, Landlock ABI 7, root, cgroup v1 pids, 2 busy cores): all five layers
in force; the probe takes 0.16-0.22 s; ``print(1)`` takes 0.14-0.17 s against 0.07 s for a bare
``python -I -c 'print(1)'`` (two interpreter starts); a fork bomb gets 61 forks with
``max_processes=64``, 298 with ``pid_max`` alone.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Isolation", "isolation", "PidsCgroup", "INIT", "PID_MAX", "MISSING"]

log = logging.getLogger("agentsearch.sandbox")

INIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_init.py")
PID_MAX = 301  # the smallest kernel.pid_max the kernel accepts
UNSHARE_FLAGS = (("-r", "-n", "-m", "-p", "-f", "--kill-child"),
                 ("-n", "-m", "-p", "-f", "--kill-child"), ("-r", "-n"), ("-n",))
MISSING = {  # layer: (what is missing, what that means)
    "network": ("network isolation",
                "programs run by the python tool can open sockets (UDP, Unix; TCP too without "
                "Landlock). Run inside a container without network, or allow user namespaces"),
    "filesystem": ("filesystem isolation",
                   "programs can write anywhere this user can (as root: everywhere); "
                   "Landlock (Linux >= 5.13, lsm=landlock) is needed"),
    "processes": ("pid namespace",
                  "a process the program starts and detaches (setsid, double fork) can outlive "
                  "it unless the pids cgroup catches it; only its process group is killed"),
    "process limit": ("process limit",
                      "a fork bomb is stopped only by the time limit; give this process a "
                      "writable pids cgroup"),
    "disk": ("disk bound",
             "files in the temp dir are capped one by one (RLIMIT_FSIZE), not in number or total"),
}


@dataclass(frozen=True)
class Isolation:
    """The layers ``run_python`` applies in this process ("none": missing, and warned about)."""

    prefix: tuple[str, ...] = ()  # the unshare command line the sandbox starts under ((): none)
    network: str = "none"
    filesystem: str = "none"
    processes: str = "none"
    process_limit: str = "none"
    disk: str = "none"
    landlock_abi: int = 0
    pid_max: int = 0  # written into the pid namespace (0: not)
    cgroup_base: str | None = None  # where per-run pids cgroups are made (None: not)

    def layers(self) -> dict[str, str]:
        return {"network": self.network, "filesystem": self.filesystem, "processes": self.processes,
                "process limit": self.process_limit, "disk": self.disk}

    def missing(self) -> list[str]:
        return [name for name, how in self.layers().items() if how == "none"]


@lru_cache(maxsize=1)
def isolation() -> Isolation:
    """The sandbox's layers here: probed once per process (a real sandboxed program checks
    them from inside), logged once: an info line naming those in force, a warning per
    missing one."""
    iso = _probe()
    log.info("python sandbox: %s",
             "; ".join(f"{k}: {v}" for k, v in iso.layers().items() if v != "none"))
    for name in iso.missing():
        what, means = MISSING[name]
        log.warning("python sandbox: NO %s on %s: %s.", what, sys.platform, means)
    return iso


_CHECK = """import json, os, socket, sys
r = {"pid": os.getpid(), "ifaces": sorted(n for _, n in socket.if_nameindex())}
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
    r["tcp"] = "connected"
except OSError as e:
    r["tcp"] = str(e)
try:
    open(os.path.join(sys.argv[2], "x"), "w").close()
    r["write"] = "written"
except OSError as e:
    r["write"] = str(e)
print("check " + json.dumps(r), flush=True)
"""


def _probe() -> Isolation:
    linux = sys.platform.startswith("linux")
    abi = 0
    if linux:
        from agentsearch.envs.tools.sandbox_init import landlock_abi

        abi = landlock_abi()
    base = _pids_cgroup_base() if linux else None
    unshare = shutil.which("unshare") if linux else None
    prefixes = [(unshare, *flags) for flags in UNSHARE_FLAGS] if unshare else []
    outside = tempfile.mkdtemp(prefix="agentsearch-probe-out-")
    try:
        with socket.socket() as server:  # a port the parent reaches: the probe program must not
            server.bind(("127.0.0.1", 0))
            server.listen(4)
            for prefix in [*prefixes, ()]:
                got = _probe_run(prefix, abi, server.getsockname()[1], outside)
                if got is not None:
                    break
            else:
                return Isolation(cgroup_base=base,
                                 process_limit=f"pids cgroup ({base})" if base else "none")
        wrote = os.path.exists(os.path.join(outside, "x"))
    finally:
        shutil.rmtree(outside, ignore_errors=True)
    ready, check = got
    limits = [f"pids cgroup ({base})"] if base else []
    if ready.get("pid_max"):
        limits.append(f"pid_max={PID_MAX} in the pid namespace")
    netns = "-n" in prefix and check["ifaces"] == ["lo"] and check["tcp"] != "connected"
    fs = bool(ready.get("landlock")) and check["write"] != "written" and not wrote
    return Isolation(
        prefix=tuple(prefix),
        network=f"network namespace (`unshare {' '.join(prefix[1:])}`)" if netns else "none",
        filesystem=(f"Landlock ABI {ready['landlock']} (writes only in the temp dir)" if fs
                    else "none"),
        processes="pid namespace" if "-p" in prefix and check["pid"] == 2 else "none",
        process_limit=" + ".join(limits) or "none",
        disk="tmpfs on the temp dir" if ready.get("tmpfs_mb") else "none",
        landlock_abi=int(ready.get("landlock", 0)) if fs else 0,
        pid_max=PID_MAX if ready.get("pid_max") else 0, cgroup_base=base)


def _probe_run(prefix: tuple, abi: int, port: int, outside: str) -> tuple[dict, dict] | None:
    """Start the sandbox under ``prefix`` applying what it can (init ``probe`` mode) and run the
    check program in it; (applied layers, what the program saw), or None if it did not start."""
    root = tempfile.mkdtemp(prefix="agentsearch-probe-")
    try:
        with open(os.path.join(root, "main.py"), "w") as f:
            f.write(_CHECK)
        cfg = {"fd": 1, "probe": True, "root": root, "carry": ["main.py"], "landlock": abi > 0,
               "tmpfs_mb": 1 if "-m" in prefix else 0, "tmpfs_inodes": 64,
               "host_mnt_ns": os.stat("/proc/self/ns/mnt").st_ino if "-m" in prefix else 0,
               "pid_max": PID_MAX if "-p" in prefix else 0,
               "argv": [sys.executable, "-I", "main.py", str(port), outside]}
        res = subprocess.run([*prefix, sys.executable, "-I", "-S", INIT, json.dumps(cfg)], cwd=root,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                             stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        log.debug("sandbox probe under %s failed: %s", prefix, e)
        return None
    finally:
        shutil.rmtree(root, ignore_errors=True)
    found = {}
    for line in res.stdout.decode(errors="replace").splitlines():
        key, _, rest = line.partition(" ")
        if key in ("ready", "check") and key not in found:
            try:
                found[key] = json.loads(rest)
            except ValueError:
                pass
    if len(found) < 2:
        log.debug("sandbox probe under %s did not run (rc %s): %s", prefix, res.returncode,
                  (res.stdout + res.stderr)[-300:])
        return None
    return found["ready"], found["check"]


_runs = itertools.count()


def _write(path: str, value) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


class PidsCgroup:
    """One run's pids cgroup: it and everything it starts hold at most ``limit`` pids."""

    def __init__(self, base: str, limit: int):
        self.path = os.path.join(base, f"run-{os.getpid()}-{next(_runs)}")
        os.mkdir(self.path)
        try:
            _write(os.path.join(self.path, "pids.max"), int(limit))
        except OSError:
            os.rmdir(self.path)
            raise

    def join(self) -> None:
        """Move the calling process in (a ``preexec_fn``: the forked child, before exec)."""
        _write(os.path.join(self.path, "cgroup.procs"), os.getpid())

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            return []

    async def close(self, timeout_s: float = 5.0) -> bool:
        """Kill what is left in it and remove it; False (and a warning) if it stays busy."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if loop.time() > deadline:
                    log.warning("python sandbox: cgroup %s still holds processes %s", self.path,
                                self.pids())
                    return False
            await asyncio.sleep(0.005)


def _pids_cgroup_base() -> str | None:
    """A directory where this process can make pids cgroups (its own cgroup's
    ``agentsearch-sandbox`` child, v1 ``pids`` hierarchy or v2), checked by moving a child in."""
    try:
        with open("/proc/self/cgroup") as f:
            own = {}
            for line in f.read().splitlines():
                _, ctrls, path = line.split(":", 2)
                for c in ctrls.split(","):
                    own[c] = path
        with open("/proc/self/mountinfo") as f:
            mounts = f.read().splitlines()
    except (OSError, ValueError):
        return None
    for line in mounts:
        pre, _, post = line.partition(" - ")
        fields, sup = pre.split(), post.split()
        if len(fields) < 5 or len(sup) < 3:
            continue
        mroot, mpoint = fields[3], fields[4]
        if sup[0] == "cgroup" and "pids" in sup[2].split(","):
            path = own.get("pids")
        elif sup[0] == "cgroup2":
            path = own.get("")
        else:
            continue
        if path is None or not (path + "/").startswith(mroot.rstrip("/") + "/"):
            continue
        parent = os.path.join(mpoint, path[len(mroot.rstrip("/")):].lstrip("/"))
        base = os.path.join(parent, "agentsearch-sandbox")
        try:
            _enable_pids(parent)
            os.makedirs(base, exist_ok=True)
            _enable_pids(base)
            _sweep(base)
            cg = PidsCgroup(base, 8)
            try:
                subprocess.run([sys.executable, "-S", "-c", ""], preexec_fn=cg.join, check=True,
                               timeout=10)
            finally:
                os.rmdir(cg.path)
            return base
        except (OSError, subprocess.SubprocessError) as e:
            log.debug("no pids cgroup under %s: %s", parent, e)
    return None


def _enable_pids(d: str) -> None:
    ctl = os.path.join(d, "cgroup.subtree_control")  # cgroup v2 only
    if os.path.exists(ctl):
        with open(ctl) as f:
            if "pids" not in f.read().split():
                _write(ctl, "+pids")


def _sweep(base: str) -> None:
    """Remove run cgroups left by processes that died (a crash between mkdir and rmdir)."""
    for name in os.listdir(base):
        parts = name.split("-")
        if (len(parts) == 3 and parts[0] == "run" and parts[1].isdigit()
                and not os.path.exists(f"/proc/{parts[1]}")):
            try:
                os.rmdir(os.path.join(base, name))
            except OSError:
                pass
