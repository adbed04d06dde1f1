"""One call, ``labcore.compile_cache.configure()``, turns JAX's persistent compilation cache on (the
CLI and the notebooks' setup cell make it), with an off switch; ``import labcore`` changes nothing.

Each case runs in a fresh Python process (the cache is decided when JAX is imported and at the
first compile), with its own cache folder, and watches JAX's own monitoring events to see whether
a compile was written to or read from the cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from labcore import compile_cache

# Compiles one small program and reports what JAX's cache did, as JSON on the last line.
PROBE = """
import json, sys
{before}
import labcore
from labcore import compile_cache
{configure}
import jax, jax.numpy as jnp
events = []
jax.monitoring.register_event_listener(lambda event, **kw: events.append(event))
jax.jit(lambda x: jnp.tanh(x) * 3.0 + 1.0)(jnp.arange(5.0)).block_until_ready()
extra = None
{after}
import os
print(json.dumps({{"status": compile_cache.status(), "events": events, "extra": extra, "environ": dict(os.environ),
                  "jax_dir": jax.config.jax_compilation_cache_dir,
                  "enabled_flag": bool(jax.config.jax_enable_compilation_cache)}}))
"""


def _probe(env_changes: dict[str, str | None], before: str = "", after: str = "", cwd=None,
           configure: str = "compile_cache.configure()") -> dict:
    # A clean slate, but for the CPU check's answer, which this process's own import found
    # (the tests of the check itself take it out).
    env = {key: value for key, value in os.environ.items()
           if key not in (compile_cache.SWITCH_ENV_VAR, compile_cache.JAX_DIR_ENV_VAR, compile_cache.INHERITED_ENV_VAR,
                          compile_cache.JAX_MIN_TIME_ENV_VAR, "JAX_ENABLE_COMPILATION_CACHE")}
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    done = subprocess.run([sys.executable, "-c", PROBE.format(before=before, after=after, configure=configure)], env=env,
                          capture_output=True, text=True, timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


HIT = "/jax/compilation_cache/cache_hits"
USED = "/jax/compilation_cache/compile_requests_use_cache"


def test_on_by_default_in_the_user_cache_folder_and_a_second_process_reads_it(tmp_path):
    first = _probe({"XDG_CACHE_HOME": str(tmp_path)})
    folder = tmp_path / "labcore" / "jax"
    assert first["status"]["enabled"] and first["status"]["folder"] == str(folder)
    assert USED in first["events"] and HIT not in first["events"]
    written = sorted(path.name for path in folder.iterdir())
    assert written, "the first process wrote nothing to the cache"

    second = _probe({"XDG_CACHE_HOME": str(tmp_path)})
    assert HIT in second["events"], "the second process compiled again instead of reading the cache"
    assert sorted(path.name for path in folder.iterdir()) == written


def test_the_switch_turns_it_off_even_when_a_parent_passed_the_folder_down(tmp_path):
    inherited = tmp_path / "from-parent"
    result = _probe({"XDG_CACHE_HOME": str(tmp_path), compile_cache.SWITCH_ENV_VAR: "0",
                     compile_cache.JAX_DIR_ENV_VAR: str(inherited)})
    assert not result["status"]["enabled"] and "LABCORE_COMPILATION_CACHE=0" in result["status"]["reason"]
    assert USED not in result["events"] and not result["enabled_flag"]
    assert not inherited.exists() and not (tmp_path / "labcore").exists()


def test_the_switch_can_name_another_folder(tmp_path):
    result = _probe({"XDG_CACHE_HOME": str(tmp_path / "unused"), compile_cache.SWITCH_ENV_VAR: str(tmp_path / "mine")})
    assert result["status"]["folder"] == str(tmp_path / "mine")
    assert any((tmp_path / "mine").iterdir()) and not (tmp_path / "unused").exists()


def test_a_folder_named_by_the_switch_wins_over_one_a_parent_passed_down(tmp_path):
    # A notebook (which imported labcore, so JAX_COMPILATION_CACHE_DIR is set) starts a process
    # with its own cache folder: that process must use the folder it was given.
    result = _probe({compile_cache.SWITCH_ENV_VAR: str(tmp_path / "mine"),
                     compile_cache.JAX_DIR_ENV_VAR: str(tmp_path / "from-parent")})
    assert result["status"]["folder"] == result["jax_dir"] == str(tmp_path / "mine")
    assert any((tmp_path / "mine").iterdir()) and not (tmp_path / "from-parent").exists()


def test_jax_own_setting_is_left_alone(tmp_path):
    own = str(tmp_path / "jax-own")
    result = _probe({"XDG_CACHE_HOME": str(tmp_path / "unused"), compile_cache.JAX_DIR_ENV_VAR: own})
    assert result["status"]["folder"] == own and "left it alone" in result["status"]["reason"]
    assert result["jax_dir"] == own and not (tmp_path / "unused").exists()
    # labcore's zero minimum compile time is not forced on a user who chose JAX's settings: JAX's
    # default (one second) keeps this small program out of the cache.
    assert not (tmp_path / "jax-own").exists() or not any((tmp_path / "jax-own").iterdir())


def test_a_folder_that_cannot_be_created_leaves_it_off_without_failing(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = _probe({"XDG_CACHE_HOME": str(blocker)})
    assert not result["status"]["enabled"] and "could not create" in result["status"]["reason"]
    assert result["jax_dir"] is None and HIT not in result["events"]


def test_importing_labcore_changes_no_setting(tmp_path):
    """Importing labcore (and its library modules) sets no environment variable and no JAX option:
    the cache stays off until the process calls configure()."""
    after = """
extra = {"changed": sorted(key for key in set(os.environ) | set(start)
                           if os.environ.get(key) != start.get(key))}
"""
    before = "import os, jax; start = dict(os.environ)  # after jax's import, which sets variables of its own"
    result = _probe({"XDG_CACHE_HOME": str(tmp_path)}, before=before, configure="import labcore.loop, labcore.agents.ppo",
                    after="import os\n" + after)
    assert result["extra"]["changed"] == []
    assert not result["status"]["enabled"] and "configure()" in result["status"]["reason"]
    assert result["jax_dir"] is None and HIT not in result["events"] and not (tmp_path / "labcore").exists()


def test_a_child_process_uses_the_cache_its_parent_turned_on_without_a_call(tmp_path):
    # A worker of `python -m labcore launch`, an actor: their environment carries JAX's own
    # variables, which JAX reads at import.
    parent = _probe({"XDG_CACHE_HOME": str(tmp_path)})
    inherited = {key: parent["environ"][key] for key in (compile_cache.JAX_DIR_ENV_VAR, compile_cache.INHERITED_ENV_VAR,
                                                         compile_cache.JAX_MIN_TIME_ENV_VAR)}
    child = _probe({**inherited, "XDG_CACHE_HOME": str(tmp_path / "unused")}, configure="")
    assert HIT in child["events"] and child["jax_dir"] == str(tmp_path / "labcore" / "jax")
    assert child["status"]["enabled"] and not (tmp_path / "unused").exists()


def test_configure_after_jax_compiled_still_turns_it_on(tmp_path):
    # JAX takes its once-per-process decision at the first compile; labcore resets it.
    before = "import jax, jax.numpy as jnp; jax.jit(lambda x: x - 1.0)(jnp.ones(2)).block_until_ready()"
    result = _probe({"XDG_CACHE_HOME": str(tmp_path)}, before=before)
    assert result["status"]["enabled"] and result["jax_dir"] == str(tmp_path / "labcore" / "jax")
    assert any((tmp_path / "labcore" / "jax").iterdir())


def test_disabled_compiles_without_the_cache_and_restores_it(tmp_path):
    after = """
import pathlib
folder = pathlib.Path(compile_cache.status()["folder"])
count = lambda: len(list(folder.iterdir()))
events.clear(); start = count()
with compile_cache.disabled():
    jax.jit(lambda x: jnp.cos(x) * 5.0)(jnp.arange(3.0)).block_until_ready()
inside = {"events": list(events), "new_files": count() - start}
events.clear(); start = count()
jax.jit(lambda x: jnp.sin(x) * 7.0)(jnp.arange(3.0)).block_until_ready()
extra = {"inside": inside, "after": {"events": list(events), "new_files": count() - start}}
"""
    result = _probe({"XDG_CACHE_HOME": str(tmp_path)}, after=after)
    assert USED not in result["extra"]["inside"]["events"] and result["extra"]["inside"]["new_files"] == 0
    assert result["extra"]["after"]["new_files"] > 0 and result["enabled_flag"]


def test_the_default_folder_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.default_folder() == tmp_path / "labcore" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert compile_cache.default_folder().parts[-3:] == (".cache", "labcore", "jax")


@pytest.mark.parametrize("value", ["0", "off", "OFF", "false", "no"])
def test_off_values(value):
    assert not compile_cache._decide({compile_cache.SWITCH_ENV_VAR: value}).enabled


def test_hits_tells_a_read_from_a_compile(tmp_path):
    after = """
from labcore import compile_cache
x = jnp.arange(5.0)


def unrolled(x):  # a Python loop under jit: 300 copies of the body, a compile of a good fraction of a second
    for i in range(300):
        x = jnp.sin(x) * 1.01 + i
    return x


fn = jax.jit(unrolled)
compile_cache.hits()
fn(x).block_until_ready()                         # compiled, and written to the cache
start = compile_cache.hits()
fn(x).block_until_ready()                         # called again: JAX's in-memory cache, no disk read
in_memory = compile_cache.hits() - start
jax.clear_caches()
fn(x).block_until_ready()                         # the in-memory caches emptied: read from disk
from_disk = compile_cache.hits() - start
jax.jit(lambda x: jnp.sinh(x) - 2.0)(x).block_until_ready()  # never seen: compiled
extra = {"in_memory": in_memory, "from_disk": from_disk, "after_new": compile_cache.hits() - start}
"""
    result = _probe({"XDG_CACHE_HOME": str(tmp_path)}, after=after)
    assert result["extra"]["in_memory"] == 0
    assert result["extra"]["from_disk"] >= 1
    assert result["extra"]["after_new"] == result["extra"]["from_disk"]


def test_a_folder_switch_wins_over_an_off_inherited_from_a_parent(tmp_path):
    # A parent with the switch off leaves JAX_ENABLE_COMPILATION_CACHE=false for its children.
    result = _probe({compile_cache.SWITCH_ENV_VAR: str(tmp_path / "mine"), "JAX_ENABLE_COMPILATION_CACHE": "false"})
    assert result["enabled_flag"] and result["status"]["enabled"]
    assert any((tmp_path / "mine").iterdir())


def test_a_folder_set_through_jax_config_before_labcore_is_left_alone(tmp_path):
    before = f"import jax; jax.config.update('jax_compilation_cache_dir', {str(tmp_path / 'own')!r})"
    result = _probe({"XDG_CACHE_HOME": str(tmp_path / "unused")}, before=before)
    assert result["jax_dir"] == str(tmp_path / "own") and "left it alone" in result["status"]["reason"]
    assert not (tmp_path / "unused").exists()


def test_a_child_knows_the_folder_came_from_labcore_and_a_relative_switch_becomes_absolute(tmp_path):
    parent = _probe({compile_cache.SWITCH_ENV_VAR: "relative-cache"}, cwd=tmp_path)
    folder = str(tmp_path / "relative-cache")
    assert parent["status"]["folder"] == folder and parent["environ"][compile_cache.SWITCH_ENV_VAR] == folder
    inherited = {key: parent["environ"][key] for key in (compile_cache.JAX_DIR_ENV_VAR, compile_cache.INHERITED_ENV_VAR)}
    child = _probe({**inherited, "XDG_CACHE_HOME": str(tmp_path / "unused")})
    assert child["jax_dir"] == folder and "inherited" in child["status"]["reason"]


def test_the_cpu_check_runs_once_and_its_answer_is_kept(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path), compile_cache.CPU_CHECK_ENV_VAR: None}
    first = _probe(env)
    folder = tmp_path / "labcore" / "jax"
    (marker,) = folder.glob("labcore-cpu-check-*.txt")
    answer = marker.read_text().strip()
    assert answer in ("ok", "unreadable") and first["environ"][compile_cache.CPU_CHECK_ENV_VAR] == answer
    assert first["status"]["enabled"] == (answer == "ok")
    assert not list(folder.glob("labcore-cpu-check-*/")), "the check's scratch folder is removed"
    # The kept answer decides from now on: a machine found unreadable keeps labcore's default off.
    marker.write_text("unreadable\n")
    second = _probe(env)
    assert not second["status"]["enabled"] and "38445" in second["status"]["reason"]
    assert second["jax_dir"] is None and not second["enabled_flag"]


def test_an_unreadable_cpu_leaves_the_default_off_but_not_a_folder_asked_for(tmp_path):
    unreadable = {compile_cache.CPU_CHECK_ENV_VAR: "unreadable"}
    default = _probe({**unreadable, "XDG_CACHE_HOME": str(tmp_path)})
    assert not default["status"]["enabled"] and compile_cache.SWITCH_ENV_VAR in default["status"]["reason"]
    asked = _probe({**unreadable, compile_cache.SWITCH_ENV_VAR: str(tmp_path / "asked")})
    assert asked["status"]["enabled"] and any((tmp_path / "asked").iterdir())
