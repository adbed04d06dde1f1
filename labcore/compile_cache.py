"""JAX's persistent compilation cache, on by default for everything that imports labcore.

XLA compiles every jitted program the first time a process calls it: seconds to a minute for a
training loop, paid again in every new kernel or command. JAX can keep the compiled programs on
disk and load them in a later process instead (the persistent compilation cache). On the 2-core
reference CPU this roughly halves a second run: notebook 02 in quick mode goes from 68 s to 27 s,
and ``python -m labcore train ppo --total-steps 65536`` from 27 s to 15 s (the README has the
table and the command that measured it). So ``import labcore`` turns the cache on, before JAX is
imported where it can:

    folder   $XDG_CACHE_HOME/labcore/jax, else ~/.cache/labcore/jax
    off        LABCORE_COMPILATION_CACHE=0 (in the shell, or in os.environ before `import labcore`);
               off means off, even if JAX_COMPILATION_CACHE_DIR is set
    elsewhere  LABCORE_COMPILATION_CACHE=/some/folder (it wins over JAX_COMPILATION_CACHE_DIR)
    yours      JAX_COMPILATION_CACHE_DIR already set, and the switch unset: labcore leaves JAX's
               own settings alone

It sets JAX's own environment variables, so processes labcore starts (the launcher's workers, the
actor-learner's actors) inherit the same cache. Programs are cached whatever their compile time
(JAX's default keeps only those over one second; on a CPU many of a notebook's programs compile
faster than that and still add up). A cached program is the program XLA would compile: the
results are the same, only the compile is skipped. The cache is not pruned; ``status()`` reports
its size, and deleting the folder is always safe.

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


def _decide(environ: dict[str, str]) -> CacheSetting:
    switch = environ.get(SWITCH_ENV_VAR, "").strip()
    if switch.lower() in _OFF_VALUES:
        return CacheSetting(None, f"turned off by {SWITCH_ENV_VAR}={switch}")
    if switch.lower() not in ("", "1", "on", "true", "yes"):  # a folder: it wins over an inherited JAX setting
        return CacheSetting(Path(switch).expanduser().resolve(), f"{SWITCH_ENV_VAR}={switch}")
    if environ.get(JAX_DIR_ENV_VAR):
        return CacheSetting(Path(environ[JAX_DIR_ENV_VAR]), f"JAX's own setting {JAX_DIR_ENV_VAR} (labcore left it alone)")
    return CacheSetting(default_folder(), "labcore's default")


_setting: CacheSetting | None = None


def configure() -> CacheSetting:
    """Turn the cache on (or leave it off) as the environment says; ``import labcore`` calls this.

    Sets ``JAX_COMPILATION_CACHE_DIR`` and a zero minimum compile time in ``os.environ`` (read by
    JAX when it is imported, and inherited by child processes). If JAX is already imported the
    same settings go through ``jax.config``, and JAX's once-per-process decision whether to use
    the cache is reset, so that it is taken again at the next compile. A folder that cannot be
    created leaves the cache off (the reason says so) rather than failing the import.
    """
    global _setting
    setting = _decide(dict(os.environ))
    if not setting.enabled:
        _turn_off()
    elif os.environ.get(JAX_DIR_ENV_VAR) != str(setting.folder):
        try:
            setting.folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            setting = CacheSetting(None, f"could not create {setting.folder}: {err}")
            _turn_off()
        else:
            os.environ[JAX_DIR_ENV_VAR] = str(setting.folder)
            os.environ.setdefault(JAX_MIN_TIME_ENV_VAR, "0")
            if "jax" in sys.modules:
                _apply_to_imported_jax(setting.folder)
    _setting = setting
    return setting


def _turn_off() -> None:
    # A parent process that imported labcore passes JAX_COMPILATION_CACHE_DIR down to its
    # children; a child started with the switch off must not pick the cache up from there.
    os.environ.pop(JAX_DIR_ENV_VAR, None)
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    if "jax" in sys.modules:
        import jax
        from jax.experimental.compilation_cache import compilation_cache

        jax.config.update("jax_enable_compilation_cache", False)
        compilation_cache.reset_cache()


def _apply_to_imported_jax(folder: Path) -> None:
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ[JAX_MIN_TIME_ENV_VAR]))
    # JAX decides once per process, at its first compile, whether the cache is used; a compile
    # before labcore was imported would otherwise have decided "no" for good.
    compilation_cache.reset_cache()


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
    returns 0 and starts counting): compare two calls around a compile to tell a real compile
    from a read.
    """
    global _listening
    if not _listening:
        import jax

        jax.monitoring.register_event_listener(_count_hit)
        _listening = True
    return _hits


def status() -> dict[str, object]:
    """Whether the cache is on, its folder, why, and how many entries and bytes it holds now."""
    setting = _setting if _setting is not None else _decide(dict(os.environ))
    entries, size = 0, 0
    if setting.enabled and setting.folder.is_dir():
        for path in setting.folder.iterdir():
            if path.is_file():
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
