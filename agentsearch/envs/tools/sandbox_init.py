"""The first process inside a python-tool sandbox: sets up the inner layers, runs the program.

Run as a script (``python -I -S sandbox_init.py CONFIG_JSON``), never imported by the
package; standard library only. ``sandbox.run_python`` starts it under ``unshare`` (new
user, network, mount and pid namespaces), so it is pid 1 of the sandbox's pid namespace:

1. ``tmpfs_mb``: mounts a private tmpfs (``size``, ``nr_inodes``) on the working directory
   and copies the ``carry`` files (``main.py``) into it: the disk the program may fill is
   bounded by the kernel and disappears with the mount namespace;
2. ``pid_max``: writes the pid namespace's own ``kernel.pid_max`` (Linux >= 6.14), so the
   namespace holds fewer than that many processes and threads;
3. ``landlock``: ``PR_SET_NO_NEW_PRIVS``, then a Landlock domain that handles every
   write-like filesystem right (write, truncate, make/remove anything, refer, device
   ioctls), TCP bind/connect (ABI >= 4) and signal / abstract-socket scoping (ABI >= 6),
   allowing the writes only beneath the working directory and to ``/dev/null``. Reads and
   execution stay allowed. Inherited by everything started afterwards; a landlocked
   process cannot mount, unmount or leave the domain;
4. writes ``ready {applied layers as JSON}`` to the report fd, forks the program (the fd
   closed in it), reaps every orphan of the namespace until the program exits, writes
   ``status WAITSTATUS`` and exits, whereupon the kernel kills whatever the program left.

A layer that cannot be set up writes ``error ...`` to the report fd and exits 70 (EX_SOFTWARE)
before the program runs, so the parent tells a sandbox that failed (infra) from a program
that failed (the policy's). ``probe: true`` (the isolation probe) applies what it can instead.
"""

import ctypes
import json
import os
import sys

EX_SETUP = 70
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446  # same numbers on x86_64 and aarch64
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_MS_NOSUID, _MS_NODEV = 2, 4
_FS_WRITE_FILE, _FS_REMOVE_DIR, _FS_REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
_FS_MAKE = sum(1 << b for b in (6, 7, 8, 9, 10, 11, 12))  # char, dir, reg, sock, fifo, block, sym
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def die_with_parent() -> None:
    """``PR_SET_PDEATHSIG`` = SIGKILL: this process dies when its parent does."""
    _check(_libc.prctl(ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(9), ctypes.c_ulong(0),
                       ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl(PR_SET_PDEATHSIG)")


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none)."""
    ret = _libc.syscall(ctypes.c_long(_SYS_CREATE), None, ctypes.c_long(0), ctypes.c_long(1))
    return max(int(ret), 0)


def landlock(writable_dir: str) -> int:
    """Restrict this process and its future children: writes only beneath ``writable_dir``
    and to /dev/null; no TCP, no signals or abstract sockets out of the domain. Returns the ABI."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError(ctypes.get_errno() or 38, "Landlock is not available in this kernel")
    fs = _FS_WRITE_FILE | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE
    fs |= ((_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
           | (_FS_IOCTL_DEV if abi >= 5 else 0))
    attr = _RulesetAttr(fs, _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0,
                        _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0)
    ruleset = _check(_libc.syscall(ctypes.c_long(_SYS_CREATE), ctypes.byref(attr),
                                   ctypes.c_long(ctypes.sizeof(attr)), ctypes.c_long(0)),
                     "landlock_create_ruleset")
    try:
        for path, allowed in ((writable_dir, fs),
                              ("/dev/null", fs & (_FS_WRITE_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV))):
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(allowed, fd)
                _check(_libc.syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_long(ruleset),
                                     ctypes.c_long(1), ctypes.byref(rule), ctypes.c_long(0)),
                       f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        _check(_libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0),
                           ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(_libc.syscall(ctypes.c_long(_SYS_RESTRICT), ctypes.c_long(ruleset),
                             ctypes.c_long(0)),
               "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def tmpfs(root: str, size_mb: int, inodes: int, carry: list, host_mnt_ns: int) -> None:
    """Mount a bounded tmpfs on ``root`` (this mount namespace only), keeping ``carry`` files.
    Refuses in the parent's mount namespace (``host_mnt_ns``, its inode): the mount would
    leak there."""
    if not host_mnt_ns or os.stat("/proc/self/ns/mnt").st_ino == host_mnt_ns:
        raise OSError(1, "no private mount namespace to mount the temp dir's tmpfs in")
    files = {}
    for name in carry:
        with open(os.path.join(root, name), "rb") as f:
            files[name] = f.read()
    opts = f"size={int(size_mb)}m,nr_inodes={int(inodes)},mode=0700".encode()
    _check(_libc.mount(b"tmpfs", root.encode(), b"tmpfs",
                       ctypes.c_ulong(_MS_NOSUID | _MS_NODEV), opts),
           f"mount tmpfs on {root}")
    os.chdir(root)  # the old cwd is the directory now hidden under the mount
    for name, data in files.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)


def setup(cfg: dict) -> dict:
    """Apply the configured layers; returns those applied (all of them, unless probing)."""
    probe, applied = bool(cfg.get("probe")), {}
    steps = [("tmpfs_mb", lambda: tmpfs(cfg["root"], cfg["tmpfs_mb"], cfg.get("tmpfs_inodes", 1024),
                                         cfg.get("carry", []), cfg.get("host_mnt_ns", 0))),
             ("pid_max", lambda: _write("/proc/sys/kernel/pid_max", cfg["pid_max"])),
             ("landlock", lambda: landlock(cfg["root"]))]
    for key, step in steps:  # in this order: a landlocked process can neither mount nor write /proc
        if not cfg.get(key):
            continue
        try:
            if key == "pid_max" and os.getpid() != 1:
                raise OSError(1, "pid_max is only set by the first process of a new pid namespace")
            result = step()
            applied[key] = cfg[key] if result is None else result
        except OSError:
            if not probe:
                raise
    return applied


def _write(path: str, value) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def main() -> int:
    cfg = json.loads(sys.argv[1])
    fd = int(cfg["fd"])
    try:
        applied = setup(cfg)
    except Exception as e:  # noqa: BLE001 - any setup failure is reported, then the sandbox stops
        os.write(fd, f"error {type(e).__name__}: {e}\n".encode(errors="replace"))
        return EX_SETUP
    os.write(fd, f"ready {json.dumps(applied)}\n".encode())
    argv = cfg["argv"]
    pid = os.fork()
    if pid == 0:
        try:
            if fd > 2:
                os.close(fd)
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    while True:  # reap orphans (we are pid 1) until the program itself exits
        try:
            child, status = os.wait()
        except ChildProcessError:
            status = 0
            break
        if child == pid:
            break
    os.write(fd, f"status {status}\n".encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
