"""The python tool's sandbox: each limit and isolation layer is attacked by a real program,
which must fail and leave nothing behind; a sandbox that cannot start is an InfraError.

A missing layer fails these tests (never skips): a sandbox weaker than it claims is a bug to
see, not a test to hide.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import socket
import time
import uuid
from pathlib import Path

import pytest

import agentsearch.core.reliability as reliability
import agentsearch.envs.tools.sandbox as sandbox
import agentsearch.envs.tools.sandbox_init as sandbox_init
from agentsearch.core.reliability import InfraError, OutageError, OutageTracker
from agentsearch.envs import MathEnv
from agentsearch.envs.tools.sandbox import isolation, network_isolation, run_python
from agentsearch.envs.tools.sandbox_isolation import MISSING

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def no_mount_leaks():
    yield
    with open("/proc/self/mountinfo") as f:
        assert "agentsearch-py-" not in f.read(), "a sandbox's tmpfs leaked into the host's mounts"


def run(code: str, **kw) -> str:
    return asyncio.run(run_python(code, **kw))


def tokened(body: str, token: str) -> str:
    """A program that re-executes itself with ``token`` in its command line (inherited by
    every process it forks), so the host can find its processes in /proc."""
    return (f"import os, sys\nif sys.argv[-1] != {token!r}:\n"
            f"    os.execv(sys.executable, [sys.executable, '-I', 'main.py', {token!r}])\n{body}")


def alive(token: str) -> list[int]:
    """Host pids whose command line holds ``token`` (zombies have none)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


def broken(monkeypatch, **changes):
    """Run with the layers found here, changed (a sandbox made to fail, or weaker)."""
    real = isolation()
    monkeypatch.setattr(sandbox, "isolation", lambda: dataclasses.replace(real, **changes))


def workdir(out: str) -> str:
    return next(w for w in out.split() if "agentsearch-py-" in w)


def test_every_layer_is_in_force_here():
    iso = isolation()
    assert not iso.missing(), f"the python sandbox lacks {iso.missing()} here: {iso}"
    assert network_isolation().startswith("network namespace")


def test_python_runs_in_a_temp_dir_that_is_removed():
    out = run("import os; print(sum(range(10))); print(os.getcwd())")
    lines = out.splitlines()
    assert lines[0] == "45" and "agentsearch-py-" in lines[1] and not os.path.exists(lines[1])
    assert "exit code 3" in run("import sys; sys.exit(3)")


def test_infinite_loop_is_killed_within_its_time_limit():
    token = uuid.uuid4().hex
    t0 = time.perf_counter()
    out = run(tokened("print('looping', flush=True)\nwhile True: pass", token), time_limit_s=1.0)
    assert time.perf_counter() - t0 < 3.0
    assert (out.startswith("looping") and "timed out after 1 s and was killed" in out
            and "unshare" not in out)
    assert alive(token) == []


def test_10gb_allocation_fails_within_its_memory_limit():
    token = uuid.uuid4().hex
    t0 = time.perf_counter()
    out = run(tokened("x = bytearray(10 * 1024**3)\nprint('allocated')", token), memory_mb=512,
              time_limit_s=10.0)
    assert time.perf_counter() - t0 < 3.0
    assert "MemoryError" in out and "allocated" not in out and alive(token) == []


def test_printing_100mb_is_stopped_at_the_output_limit():
    t0 = time.perf_counter()
    out = run("import os\nfor _ in range(100): os.write(1, b'x' * 1_000_000)\nprint('done')",
              max_output_chars=1000, time_limit_s=10.0)
    assert time.perf_counter() - t0 < 3.0
    assert len(out) < 1200 and "[output truncated]" in out and "done" not in out
    assert "output size limit" in out  # SIGXFSZ, or the limit reached (python ignores SIGXFSZ)
    out = run("print('x' * 100000)", max_output_chars=1000)
    assert len(out) < 1200 and "[output truncated]" in out


@pytest.mark.parametrize("size", [60_000, 10])
def test_filling_its_temp_dir_stops_at_the_disk_bound(size):
    t0 = time.perf_counter()
    code = ("import os\nprint(os.getcwd(), flush=True)\ni = 0\ntry:\n    while True:\n"
            f"        with open(f'f{{i}}', 'wb') as f: f.write(b'x' * {size})\n        i += 1\n"
            "except OSError as e:\n    print('stopped after', i, 'files:', e.strerror)")
    out = run(code, time_limit_s=10.0, disk_mb=4)
    assert time.perf_counter() - t0 < 5.0
    assert "No space left on device" in out, out
    n = int(out.split("stopped after ")[1].split()[0])
    assert n * size <= 4 * 2**20 and n <= 1024
    root = workdir(out)
    assert not os.path.exists(root)
    with open("/proc/self/mountinfo") as f:
        assert root not in f.read()  # the tmpfs lived in the sandbox's mount namespace only
    assert "File too large" in run("open('big', 'wb').write(b'x' * 10**6)")  # RLIMIT_FSIZE per file


def _escape_program(target: str, victim: str) -> str:
    return f"""import os
t, victim = {target!r}, {victim!r}
def attempt(name, fn):
    try:
        fn()
        print(name, 'DONE')
    except OSError as e:
        print(name, 'refused', e.strerror)
attempt('write', lambda: open(t, 'w').write('x'))
attempt('mkdir', lambda: os.mkdir(t + '.d'))
attempt('mkfifo', lambda: os.mkfifo(t + '.fifo'))
os.symlink(t + '.via-link', 'link')
attempt('symlink', lambda: open('link', 'w').write('x'))
open('inner', 'w').write('x')
attempt('rename', lambda: os.rename('inner', t + '.renamed'))
attempt('hardlink-out', lambda: os.link('inner', t + '.linked'))
attempt('hardlink-in', lambda: (os.link(victim, 'h'), open('h', 'a').write('x')))
"""


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm", "project", "home"])
def test_writes_outside_its_temp_dir_are_refused(where, tmp_path):
    assert isolation().filesystem != "none", (
        "no filesystem isolation here: not letting a program try")
    base = {"project": str(PROJECT), "home": os.path.expanduser("~")}.get(where, where)
    target = os.path.join(base, f"agentsearch-escape-{uuid.uuid4().hex}")
    victim = tmp_path / "victim.txt"  # a file outside that it links in, then appends to
    victim.write_text("intact")
    out = run(_escape_program(target, str(victim)))
    for name in ("write", "mkdir", "mkfifo", "symlink", "rename", "hardlink-out", "hardlink-in"):
        assert f"{name} refused" in out, out
    leaked = [p for p in os.listdir(base) if p.startswith(os.path.basename(target))]
    assert leaked == [] and victim.read_text() == "intact", leaked


def test_it_can_neither_unmount_its_tmpfs_nor_mount_nor_write_proc():
    code = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print('umount', libc.umount2(os.getcwd().encode(), 2), os.strerror(ctypes.get_errno()))
print('mount', libc.mount(b'none', b'/mnt', b'tmpfs', 0, None), os.strerror(ctypes.get_errno()))
try:
    open('/proc/self/comm', 'w').write('x')
    print('proc DONE')
except OSError as e:
    print('proc refused', e.strerror)
"""
    out = run(code)
    assert "umount -1" in out and "mount -1" in out and "proc refused" in out, out


def test_it_cannot_read_the_parents_environment_or_signal_it():
    code = (f"import os, signal\n"
            f"try:\n    open('/proc/{os.getpid()}/environ').read(); print('READ')\n"
            f"except OSError as e: print('environ', e.strerror)\n"
            f"try:\n    os.kill({os.getpid()}, 0); print('SIGNALLED')\n"
            f"except OSError as e: print('kill', e.strerror)")
    out = run(code)
    assert "READ" not in out and "SIGNALLED" not in out and "environ Permission denied" in out, out


def test_it_has_no_network():
    assert network_isolation() != "none", ("the python sandbox has no network isolation here "
                                           "(`unshare -rn` / `unshare -n` fail); its programs can "
                                           "open sockets")
    with socket.socket() as server:  # a port the parent can reach: the child must not
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass  # reachable from here
        code = (f"import socket\nfor kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):\n    try:\n"
                "        s = socket.socket(socket.AF_INET, kind); s.settimeout(1); "
                f"s.connect(('127.0.0.1', {port}))\n"
                "        s.send(b'x'); print('connected')\n"
                "    except OSError as e:\n        print('blocked', e.errno)\n"
                "print(sorted(n for _, n in socket.if_nameindex()))")
        out = run(code)
    # Landlock, then the netns
    assert out.splitlines() == ["blocked 13", "blocked 101", "['lo']"], out


@pytest.mark.parametrize("ending", ["exits", "times out", "exits, pid namespace alone"])
def test_no_grandchild_outlives_it(ending, monkeypatch):
    if ending.endswith("alone"):  # without the cgroup, which kills its leftovers too
        broken(monkeypatch, cgroup_base=None)
    token = uuid.uuid4().hex
    body = ("import subprocess, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', sys.argv[-1]],"
            " start_new_session=True)\n"
            "if os.fork() == 0:\n    os.setsid()\n"
            "    if os.fork() == 0:\n        time.sleep(60)\n    os._exit(0)\n"
            "time.sleep(0.3)\nprint('started', flush=True)\n")
    body += "while True: time.sleep(1)\n" if ending == "times out" else ""
    t0 = time.perf_counter()
    out = run(tokened(body, token), time_limit_s=1.5)
    assert out.startswith("started") and time.perf_counter() - t0 < 4.0, out
    assert alive(token) == []


def test_a_fork_bomb_is_bounded_and_leaves_nothing():
    assert isolation().process_limit != "none", "no process limit here: not running a fork bomb"
    token = uuid.uuid4().hex
    body = ("import time\nwhile True:\n    try:\n"
            "        if os.fork() == 0:\n            print('forked', flush=True)\n"
            "    except OSError:\n        time.sleep(0.01)\n")
    t0 = time.perf_counter()
    out = run(tokened(body, token), time_limit_s=2.0, max_processes=16)
    wall = time.perf_counter() - t0
    forks = out.count("forked")
    assert wall < 5.0 and "timed out after 2 s" in out, out
    assert 5 <= forks <= 16 - 3, forks  # unshare, the sandbox's init and the program count too
    assert alive(token) == []


@pytest.mark.parametrize("how", ["no unshare binary", "unshare fails",
                                 "no mount namespace for the tmpfs", "no pid namespace for pid_max",
                                 "no cgroup"])
def test_a_sandbox_that_cannot_start_is_an_infra_error(monkeypatch, how):
    changes = {"no unshare binary": {"prefix": ("/nonexistent/unshare", "-n")},
               "unshare fails": {"prefix": (shutil.which("false"),)},
               "no mount namespace for the tmpfs": {"prefix": ()},  # it must not mount on the host
               "no pid namespace for pid_max": {"prefix": (), "disk": "none"},
               "no cgroup": {"cgroup_base": "/nonexistent/cgroup"}}[how]
    broken(monkeypatch, **changes)
    with pytest.raises(InfraError, match="python sandbox") as e:
        run("print('ran')")
    assert "ran" not in str(e.value)


@pytest.mark.parametrize("code", ["import os; os._exit(70)", "raise SystemExit(1)",
                                  "import os; os.kill(os.getpid(), 9)"])
def test_a_program_that_fails_at_once_is_the_policys(code):
    assert "ran" not in run(code)  # an observation, no InfraError


def test_an_env_waits_on_a_sandbox_that_cannot_start(monkeypatch):
    broken(monkeypatch, prefix=("/nonexistent/unshare",))
    monkeypatch.setattr(reliability, "outages",
                        OutageTracker(budget_s=0.3, backoff_s=0.05, backoff_max_s=0.1))
    env = MathEnv(tools=("python",),
                  tasks=[{"id": "t", "question": "6*7?", "golden_answers": ["42"]}])
    env.reset(seed=0)
    t0 = time.perf_counter()
    with pytest.raises(OutageError, match="tool 'python'"):
        env.step("<python>print(6 * 7)</python>")
    assert 0.3 < time.perf_counter() - t0 < 3.0
    assert reliability.outages.errors >= 2  # retried, never shown to the policy


def test_layers_are_logged_once_with_a_warning_per_missing_one(monkeypatch, caplog):
    isolation.cache_clear()
    try:
        with caplog.at_level("INFO", logger="agentsearch.sandbox"):
            isolation()
            isolation()
        assert [r.levelname for r in caplog.records] == ["INFO"]  # everything in force: one line
        assert all(k in caplog.records[0].getMessage()
                   for k in ("network", "filesystem", "pid namespace"))
        caplog.clear()
        monkeypatch.setattr(shutil, "which", lambda name: None)  # no unshare binary
        monkeypatch.setattr(sandbox_init, "landlock_abi", lambda: 0)  # no Landlock
        isolation.cache_clear()
        with caplog.at_level("INFO", logger="agentsearch.sandbox"):
            iso = isolation()
            out = run("print(6 * 7)")  # still runs, weaker, and said so
            isolation()
        assert out == "42"
        assert set(iso.missing()) == {"network", "filesystem", "processes", "disk"}
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 4 and "NO network isolation" in warnings[0]
        assert all(f"NO {MISSING[name][0]} " in w
                   for name, w in zip(iso.missing(), warnings, strict=True))
    finally:
        isolation.cache_clear()  # the next caller probes the real system again
