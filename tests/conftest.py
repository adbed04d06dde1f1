"""Shared test set-up: paths, a quick-mode guard, and the processes below a process."""

from __future__ import annotations

import gc
import os
import pathlib
import sys

import pytest

# Before anything imports jax: 8 simulated CPU devices for the data-parallel tests (a process
# gets its device count once), the scheduler setting that avoids jax 0.10.2's CPU hang when whole
# training runs are vmapped (labcore/__main__.py sets the same flag and says why), then two settings
# that make XLA's CPU backend compile faster and compute the same functions (to the rounding of
# floats, for the second). The unit tests are compile-bound: most compile a small program and run
# it for well under a second.
# - LLVM at -O0: about 40% faster compiles (tests/ on the 2-core machine: 946 s -> 780 s).
# - XLA's older loop emitters instead of its MLIR fusion emitters (xla_cpu_use_fusion_emitters=false).
#   On a 2-core AMD EPYC (jax 0.10.2, LABCORE_QUICK=1, at -O0 either way; one run of each, one after
#   the other, on a machine whose speed varies from hour to hour), the smallest runs of PPO, PQN, the
#   jitted DQN, IQN and the GFlowNet trained in 67.2 s with the fusion emitters and 48.0 s without,
#   and 20 tests (test_equivalence's, the registry's PPO test, the pqn_update exercise's worked
#   solution) passed in 441 s and 294 s in one process.
#   The two emitters may round a fusion's floats differently, so two different programs that end
#   on the same bits under the default may not under this. The tests of such equalities (chunked
#   against one call, two layouts of the data-parallel DQN, ...) pass with it, but for one: IQN's
#   chunked run against its fused runner, 9.3e-10 apart, which compiles with the default emitters
#   (the ``xla_default_emitters`` fixture below).
# A test whose time goes to running one long program compiles that program at XLA's default level instead
# (jax.jit(..., compiler_options=...), as test_gflownet's learning tests do). Processes the tests
# launch inherit the flags. The notebooks run in their own pytest invocation (see the Makefile) and
# compile like a user's session, with XLA's defaults.
_FLAGS = (
    "--xla_force_host_platform_device_count=8",
    "--xla_cpu_enable_concurrency_optimized_scheduler=false",
    "--xla_backend_optimization_level=0",
    "--xla_cpu_use_fusion_emitters=false",
)
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", "")] + [flag for flag in _FLAGS if flag.split("=")[0] not in os.environ.get("XLA_FLAGS", "")]
).strip()

# The unit tests run with JAX's persistent compilation cache off (the notebooks, run by their own
# pytest invocation, and tests/test_compile_cache.py, which starts its own processes, use it).
# Writing a program to the cache serialises the compiled executable, and on the 2-core reference
# machine (jaxlib 0.10.2, LLVM at -O0 as set above, every program cached) three full runs of the
# suite on 2026-11-26 each lost a pytest-xdist worker to a segmentation fault inside that
# serialisation (jax's compilation_cache.put_executable_and_time -> executable.serialize()), in a
# different test each time; pytest-xdist then waited for the lost worker for ever. The same tests
# alone, with the cache, pass. Off, nothing is serialised, and a test compiles as a user's first
# run does. ``LABCORE_COMPILATION_CACHE`` set in the environment still decides.
os.environ.setdefault("LABCORE_COMPILATION_CACHE", "0")
from labcore import compile_cache  # noqa: E402  (does not import jax)

compile_cache.configure()

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"

# `make test-compat COMPAT_UNIT=1` runs these tests against labcore installed as the Colab cell installs it. If
# labcore came from this checkout instead (an editable install, or the repository on sys.path),
# the run would prove nothing about the installed package: refuse it.
if os.environ.get("LABCORE_EXPECT_INSTALLED") == "1":
    import labcore  # cheap: labcore does not import jax

    _location = pathlib.Path(labcore.__file__).resolve()
    if _location.is_relative_to(REPO_ROOT / "labcore"):  # an environment inside the checkout is fine
        raise pytest.UsageError(f"LABCORE_EXPECT_INSTALLED=1 but labcore was imported from the checkout: {_location}")


@pytest.fixture(scope="module", autouse=True)
def _drop_compiled_programs():
    """After each test module, drop every program JAX has compiled and cached in this process.

    A worker of `make test` runs hundreds of modules, and each compiled program stays cached (and
    its machine code mapped) for as long as the function it came from lives, which for a module's
    jitted functions is the whole run: a worker grew to 6 GB over the suite. A module's own tests
    still share their compilations."""
    yield
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
    gc.collect()


@pytest.fixture
def xla_default_emitters(monkeypatch):
    """Compile this test's programs with XLA's default CPU loop emitters (the fusion emitters), which
    the suite turns off (see _FLAGS): for a test whose claim is that two different programs end on
    the same bits, as they do in a user's session. XLA_FLAGS are read once per process, so this
    passes the setting with each compilation instead, through jax's own compile-options helper
    (private: if jax stops compiling through it, the test fails here, not silently)."""
    import jax
    from jax._src import compiler

    plain = compiler.get_compile_options
    compiled = []

    def with_default_emitters(*args, env_options_overrides=None, **kwargs):
        compiled.append(True)
        overrides = {**(env_options_overrides or {}), "xla_cpu_use_fusion_emitters": True}
        return plain(*args, env_options_overrides=overrides, **kwargs)

    jax.clear_caches()  # nothing compiled before this test is reused
    monkeypatch.setattr(compiler, "get_compile_options", with_default_emitters)
    yield
    jax.clear_caches()  # nor is anything compiled here reused after it
    assert compiled, "no program was compiled through jax._src.compiler.get_compile_options"


@pytest.fixture
def repo_root() -> pathlib.Path:
    return REPO_ROOT


def outside_xdist() -> dict[str, str]:
    """This process's environment without pytest-xdist's worker variables, for a pytest run a test
    starts itself: under `make test`'s workers it would otherwise take their count for its own."""
    return {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_XDIST_")}


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc): the scan labcore.ray_cluster cleans up a failed start with."""
    from labcore import ray_cluster

    return sorted(ray_cluster._descendants(pid))


def assert_same_tree(a, b):
    """Two pytrees (runner or train states) hold the same values, leaf by leaf; PRNG keys compare by their data."""
    import jax
    import numpy as np

    as_data = lambda tree: jax.tree_util.tree_map(  # noqa: E731
        lambda leaf: jax.random.key_data(leaf) if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key) else leaf, tree
    )
    for x, y in zip(jax.tree_util.tree_leaves(as_data(a)), jax.tree_util.tree_leaves(as_data(b)), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def rollout_step_body(train, num_steps: int, primitive: str = "dot_general"):
    """The jaxpr of the per-step body of ``train``'s rollout: the one ``num_steps``-long scan holding
    ``primitive`` (the network's matmuls; a backward scan over the same steps, GAE's or Q(lambda)'s,
    holds none)."""
    import jax

    from labcore.tools.introspection import count_primitives, scan_bodies

    program = jax.make_jaxpr(train)(jax.random.key(0))
    bodies = [body for body in scan_bodies(program, length=num_steps) if count_primitives(body, primitive)]
    assert len(bodies) == 1, f"expected one rollout scan of {num_steps} steps holding {primitive}, found {len(bodies)}"
    return bodies[0]
