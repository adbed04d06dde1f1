"""JAX's persistent compilation cache, turned on by one call: ``compile_cache.configure()``.

XLA compiles every jitted program the first time a process calls it: seconds to a minute for a
training loop, paid again in every new kernel or command. JAX can keep the compiled programs on
disk and load them in a later process instead (the persistent compilation cache). What a second
run saves, notebook by notebook and command by command, is measured by benchmarks/compile_cache.py
(docs/results/devices.md has the table, its machine and its date). ``configure()`` turns the
cache on, before JAX is imported where it can; the CLI (``python -m labcore ...``), every
notebook's setup cell and the test suite call it, and a program of yours opts in the same way.
``import labcore`` itself changes no setting:

    folder     $XDG_CACHE_HOME/labcore/jax, else ~/.cache/labcore/jax
    off        LABCORE_COMPILATION_CACHE=0 (in the shell, or in os.environ before `import labcore`);
               off means off, even if JAX_COMPILATION_CACHE_DIR is set
    elsewhere  LABCORE_COMPILATION_CACHE=/some/folder (it wins over JAX_COMPILATION_CACHE_DIR)
    yours      JAX_COMPILATION_CACHE_DIR (or jax.config's jax_compilation_cache_dir) already set,
               and the switch unset: labcore leaves JAX's own settings alone

It sets JAX's own environment variables, so processes started afterwards (the launcher's workers,
the actor-learner's actors) inherit the same cache without a call of their own. Programs are cached whatever their compile time
(JAX's default keeps only those over one second, and many of a notebook's programs compile in less). A cached program is the program XLA would compile: the
results are the same, only the compile is skipped. The cache is not pruned; ``status()`` reports
its size, and deleting the folder is always safe. On a few x86 CPUs jaxlib cannot read back the
CPU programs it cached (see ``cpu_check``); there labcore's default leaves the cache off.

Measuring a compile needs the cache out of the way, or the "compile" is a file read:
``with compile_cache.disabled(): ...`` turns it off for the block, in this process. Or keep it and
say which it was: ``hits()`` counts the programs this process has read from the cache so far.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterator
from pathlib import Path

SWITCH_ENV_VAR = "LABCORE_COMPILATION_CACHE"
JAX_DIR_ENV_VAR = "JAX_COMPILATION_CACHE_DIR"
JAX_MIN_TIME_ENV_VAR = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
_OFF_VALUES = ("0", "off", "false", "no")


@dataclasses.dataclass(frozen=True)
class CacheSetting:
    """What ``configure()`` decided: ``folder`` is None when the cache is off, ``reason`` says why."""

    folder: Path | None
    reason: str

    @property
    def enabled(self) -> bool:
        return self.folder is not None


def default_folder() -> Path:
    """``$XDG_CACHE_HOME/labcore/jax``, else ``~/.cache/labcore/jax`` (the usual per-user cache place)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "labcore" / "jax"


def _decide(environ: dict[str, str], jax_config_dir: str | None = None) -> CacheSetting:
    """What the environment asks for. jax_config_dir: a folder already set through jax.config."""
    switch = environ.get(SWITCH_ENV_VAR, "").strip()
    if switch.lower() in _OFF_VALUES:
        return CacheSetting(None, f"turned off by {SWITCH_ENV_VAR}={switch}")
    if switch.lower() not in ("", "1", "on", "true", "yes"):  # a folder: it wins over an inherited JAX setting
        return CacheSetting(Path(switch).expanduser().resolve(), f"{SWITCH_ENV_VAR}={switch}")
    if environ.get(INHERITED_ENV_VAR) and environ.get(JAX_DIR_ENV_VAR) == environ[INHERITED_ENV_VAR]:
        return CacheSetting(Path(environ[JAX_DIR_ENV_VAR]), "labcore's choice, inherited from the process that started this one")
    if environ.get(JAX_DIR_ENV_VAR):
        return CacheSetting(Path(environ[JAX_DIR_ENV_VAR]), f"JAX's own setting {JAX_DIR_ENV_VAR} (labcore left it alone)")
    if jax_config_dir:
        return CacheSetting(Path(jax_config_dir), "JAX's own setting jax_compilation_cache_dir (labcore left it alone)")
    return CacheSetting(default_folder(), "labcore's default")


# Set by labcore to the folder it chose, so that a child process tells labcore's choice (which it
# may report as such) from a JAX_COMPILATION_CACHE_DIR the user set.
INHERITED_ENV_VAR = "LABCORE_COMPILATION_CACHE_CHOSEN"
_setting: CacheSetting | None = None


def configure() -> CacheSetting:
    """Turn the cache on (or leave it off) as the environment says: the one call that opts a
    process in (the CLI, the notebooks' setup cell and tests/conftest.py make it).

    Sets ``JAX_COMPILATION_CACHE_DIR`` and a zero minimum compile time in ``os.environ`` (read by
    JAX when it is imported, and inherited by child processes). If JAX is already imported the
    same settings go through ``jax.config``, and JAX's once-per-process decision whether to use
    the cache is reset, so that it is taken again at the next compile. A folder that cannot be
    created leaves the cache off (the reason says so) rather than failing the import, and so does a
    CPU whose cached programs JAX cannot read back (``cpu_check``).
    """
    global _setting
    jax_config_dir = None
    if "jax" in sys.modules and not os.environ.get(JAX_DIR_ENV_VAR):
        import jax

        jax_config_dir = jax.config.jax_compilation_cache_dir  # set by the user before importing labcore
    setting = _decide(dict(os.environ), jax_config_dir)
    chosen_by_labcore = setting.reason == "labcore's default" or setting.reason.startswith(SWITCH_ENV_VAR)
    if setting.enabled and chosen_by_labcore:
        try:
            setting.folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            setting = CacheSetting(None, f"could not create {setting.folder}: {err}")
    if setting.enabled and setting.reason == "labcore's default" and not cpu_check(setting.folder):
        setting = CacheSetting(None, UNREADABLE_REASON)
    if not setting.enabled:
        _turn_off()
    elif chosen_by_labcore:
        os.environ[JAX_DIR_ENV_VAR] = os.environ[INHERITED_ENV_VAR] = str(setting.folder)
        if setting.reason.startswith(SWITCH_ENV_VAR):  # absolute, so a child in another folder finds the same
            os.environ[SWITCH_ENV_VAR] = str(setting.folder)
        os.environ.setdefault(JAX_MIN_TIME_ENV_VAR, "0")
        # A parent started with the switch off leaves this at "false" for its children; a child
        # given a folder of its own must not inherit that.
        os.environ.pop("JAX_ENABLE_COMPILATION_CACHE", None)
        if "jax" in sys.modules:
            _apply_to_imported_jax(setting.folder)
    _setting = setting
    return setting


def _turn_off() -> None:
    # A parent process that imported labcore passes JAX_COMPILATION_CACHE_DIR down to its
    # children; a child started with the switch off must not pick the cache up from there.
    os.environ.pop(JAX_DIR_ENV_VAR, None)
    os.environ.pop(INHERITED_ENV_VAR, None)
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    if "jax" in sys.modules:
        import jax
        from jax.experimental.compilation_cache import compilation_cache

        jax.config.update("jax_enable_compilation_cache", False)
        compilation_cache.reset_cache()


def _apply_to_imported_jax(folder: Path) -> None:
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ[JAX_MIN_TIME_ENV_VAR]))
    # JAX decides once per process, at its first compile, whether the cache is used; a compile
    # before labcore was imported would otherwise have decided "no" for good.
    compilation_cache.reset_cache()


# ---------------------------------------------------------------------------------------------
# Can JAX read back the CPU programs it caches on this machine?
# ---------------------------------------------------------------------------------------------

# On some x86 CPUs, jaxlib's CPU loader rejects every cached program it wrote itself: LLVM adds
# tuning attributes (+prefer-no-gather, +prefer-no-scatter) to the compile-time features, and the
# loader requires every one of them on the host, where they never appear (jax-ml/jax#38445,
# openxla/xla#44565, open as of jax 0.10.2). There the cache never hits, and each read logs an
# error. labcore finds out once per CPU and jaxlib, in a child process, and leaves its default
# cache off on such a machine; a folder named with LABCORE_COMPILATION_CACHE skips the check.
CPU_CHECK_ENV_VAR = "LABCORE_CPU_CACHE_CHECK"  # "ok" or "unreadable"; child processes inherit it
UNREADABLE_REASON = ("off: on this CPU, JAX cannot read back the CPU programs it caches (jax-ml/jax#38445); "
                     f"{SWITCH_ENV_VAR}=/a/folder turns it on anyway")
_CPU_CHECK_PROGRAM = """
import jax, jax.numpy as jnp
hits = []
jax.monitoring.register_event_listener(lambda event, **_: hits.append(event == "/jax/compilation_cache/cache_hits"))
step = jax.jit(lambda w, x: jnp.tanh(x @ w).sum())
step(jnp.ones((8, 8)), jnp.ones((4, 8))).block_until_ready()
jax.clear_caches()  # the second call reads the program back from the cache folder
step(jnp.ones((8, 8)), jnp.ones((4, 8))).block_until_ready()
print("ok" if any(hits) else "unreadable")
"""


def _machine_key() -> str:
    """A name for this CPU model and jaxlib version: the check's result holds for both."""
    import hashlib
    import importlib.metadata
    import platform

    try:
        jaxlib = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        jaxlib = "none"
    cpu = platform.machine() + platform.processor()
    try:
        with open("/proc/cpuinfo") as info:
            cpu += "".join(line for line in info if line.startswith(("model name", "flags")))
    except OSError:
        pass
    return f"{jaxlib}-{hashlib.sha1(cpu.encode()).hexdigest()[:12]}"


def cpu_check(folder: Path) -> bool:
    """Whether JAX reads back the CPU programs it caches here; run once per CPU and jaxlib.

    The answer is kept in ``folder`` (``labcore-cpu-check-<jaxlib>-<cpu>.txt``) and in the
    environment (``LABCORE_CPU_CACHE_CHECK``) for child processes. The check is a child process
    that compiles one small program on the CPU into a scratch folder, empties JAX's in-memory
    caches and compiles it again: about two seconds, the first time only. A check that cannot run
    (no jax, a timeout) answers True and is tried again next time.
    """
    known = os.environ.get(CPU_CHECK_ENV_VAR)
    if known in ("ok", "unreadable"):
        return known == "ok"
    marker = folder / f"labcore-cpu-check-{_machine_key()}.txt"
    try:
        answer = marker.read_text().strip()
    except OSError:
        answer = _run_cpu_check(folder)
        if answer in ("ok", "unreadable"):
            scratch = marker.with_suffix(f".{os.getpid()}.tmp")
            try:
                scratch.write_text(answer + "\n")
                scratch.replace(marker)  # atomic: processes checking at the same time agree anyway
            except OSError:
                pass
    if answer not in ("ok", "unreadable"):
        return True
    os.environ[CPU_CHECK_ENV_VAR] = answer
    return answer == "ok"


def _run_cpu_check(folder: Path) -> str:
    import shutil
    import subprocess
    import tempfile

    scratch = tempfile.mkdtemp(prefix="labcore-cpu-check-", dir=folder)
    env = {key: value for key, value in os.environ.items() if key != "JAX_ENABLE_COMPILATION_CACHE"}
    env.update({"JAX_PLATFORMS": "cpu", JAX_DIR_ENV_VAR: scratch, JAX_MIN_TIME_ENV_VAR: "0"})
    try:
        done = subprocess.run([sys.executable, "-c", _CPU_CHECK_PROGRAM], env=env, capture_output=True,
                              text=True, timeout=120)
        lines = done.stdout.split()
        return lines[-1] if done.returncode == 0 and lines else "failed"
    except (OSError, subprocess.TimeoutExpired):
        return "failed"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Compile without the persistent cache inside the block (this process only), e.g. to time a compile."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    previous = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()  # the once-per-process decision, taken again at the next compile
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", previous)
        compilation_cache.reset_cache()


_hits = 0
_listening = False


def _count_hit(event: str, **_: object) -> None:
    global _hits
    if event == "/jax/compilation_cache/cache_hits":
        _hits += 1


def hits() -> int:
    """How many programs this process has read from the persistent cache instead of compiling.

    Counted from JAX's own monitoring events, from the first call of ``hits()`` on (the first call
    returns 0 and starts counting): compare two calls around a cell to see whether what it
    compiled came from the cache. (JAX records each entry's compile time in whole seconds, so its
    own "time saved" event is no use for programs that compile in under a second.)
    """
    global _listening
    if not _listening:
        import jax

        jax.monitoring.register_event_listener(_count_hit)
        _listening = True
    return _hits


def _unconfigured() -> CacheSetting:
    """What JAX does in a process that has not called configure(): what its environment says."""
    if os.environ.get("JAX_ENABLE_COMPILATION_CACHE", "").lower() in _OFF_VALUES:
        return CacheSetting(None, "off: turned off by the process that started this one")
    if os.environ.get(JAX_DIR_ENV_VAR):  # a parent's configure(), or the user's own JAX setting
        return _decide({key: value for key, value in os.environ.items() if key != SWITCH_ENV_VAR})
    return CacheSetting(None, "off: this process has not turned it on (labcore.compile_cache.configure(); "
                              "the CLI and the notebooks' setup cell call it)")


def status() -> dict[str, object]:
    """Whether the cache is on, its folder, why, and how many entries and bytes it holds now."""
    setting = _setting if _setting is not None else _unconfigured()
    entries, size = 0, 0
    if setting.enabled and setting.folder.is_dir():
        for path in setting.folder.iterdir():
            if path.is_file() and not path.name.startswith("labcore-"):
                entries += 1
                size += path.stat().st_size
    return {
        "enabled": setting.enabled,
        "folder": None if setting.folder is None else str(setting.folder),
        "reason": setting.reason,
        "entries": entries,
        "bytes": size,
        "off_switch": f"{SWITCH_ENV_VAR}=0",
    }
