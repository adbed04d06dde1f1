"""labcore.tools.gpu_program: loops and kernels read from a compiled program; PPO's program compiled for a GPU."""

import json
import os
import pathlib
import platform
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from conftest import REPO_ROOT

from labcore.tools import gpu_program


def test_loops_their_turns_and_call_sites_are_read_from_a_compiled_program():
    def program(x):
        def step(carry, _):
            inner = jax.lax.scan(lambda c, _: (c * 2.0 + 1.0, None), carry, None, length=3)[0]
            return jnp.sin(inner), inner

        carry, stacked = jax.lax.scan(step, x, None, length=7)
        return jax.lax.while_loop(lambda c: c.sum() < 100.0, lambda c: c * 3.0 + 1.0, carry), stacked

    text = jax.jit(program).lower(jnp.ones(4)).compile().as_text()  # the CPU's HLO: the same text format
    loops = {loop.trips: loop for loop in gpu_program.kernel_loops(text)}
    assert sorted(loops, key=str) == [3, 7, None]
    assert (loops[7].depth, loops[3].depth, loops[None].depth) == (0, 1, 0)
    assert loops[7].where.startswith("program (") and loops[3].where.startswith("step (")
    assert "tests/test_gpu_program.py:" in loops[7].where
    assert loops[3].kernels >= 1 and loops[7].kernels >= loops[3].kernels * 3 + 1  # the inner loop unrolled, then sin
    assert loops[None].kernels >= 2  # its body, its test and the test's read-back
    assert gpu_program.kernels_per_call(text) >= 7 * loops[7].kernels + loops[None].kernels


def test_every_op_of_a_compiled_program_is_named_with_its_opcode_and_the_line_that_made_it():
    def program(x, y):
        return jnp.sort(x @ y, axis=-1), jnp.cumsum(x, axis=0)

    text = jax.jit(program).lower(jnp.ones((8, 8)), jnp.ones((8, 8))).compile().as_text()
    ops = gpu_program.ops(text)
    sorts = [op for name, op in ops.items() if op.opcode == "sort"]
    assert len(sorts) == 1 and sorts[0].where.startswith("program (") and "tests/test_gpu_program.py:" in sorts[0].where
    assert any(name.startswith("sort") for name, op in ops.items() if op.opcode == "sort")
    assert {op.opcode for op in ops.values()} >= {"parameter", "sort"}


HANDWRITTEN = """HloModule handwritten

%small (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %f = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused
}

%large (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %a = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused
  %b = f32[4]{0} copy(%a)
  ROOT %c = f32[4]{0} custom-call(%b), custom_call_target="__cublas$gemm"
}

%command_buffer (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %x = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused
  ROOT %y = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused
}

ENTRY %main (q: pred[], x: f32[4]) -> (f32[4], f32[4]) {
  %q = pred[] parameter(0)
  %x = f32[4]{0} parameter(1)
  %chosen = f32[4]{0} conditional(%q, %x, %x), branch_computations={%small, %large}
  %graph = f32[4]{0} call(%chosen), to_apply=%command_buffer
  ROOT %out = (f32[4]{0}, f32[4]{0}) tuple(%chosen, %graph)
}
"""


def test_a_branch_counts_its_larger_side_and_a_command_buffer_one_launch():
    # the predicate's read-back, the larger branch (a fusion, a copy, a library call), one graph launch
    assert gpu_program.kernels_per_call(HANDWRITTEN) == 1 + 3 + 1
    assert gpu_program.kernel_loops(HANDWRITTEN) == []
    with pytest.raises(ValueError, match="no ENTRY"):
        gpu_program.kernels_per_call("HloModule nothing\n")


def compiler_folder() -> pathlib.Path:
    """JAX's CUDA plugin for this jaxlib (make gpu-compiler), where JAX publishes one."""
    folder = pathlib.Path(os.environ.get("LABCORE_GPU_COMPILER", REPO_ROOT / ".venv" / "gpu-compiler"))
    if not (folder / "jax_plugins").is_dir():
        if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
            pytest.skip("JAX publishes its CUDA plugin for Linux on x86_64 and aarch64 only")
        pytest.fail(f"no CUDA plugin in {folder}: make gpu-compiler installs it")
    return folder


@pytest.mark.end_to_end
def test_default_ppo_launches_on_a_gpu_the_kernels_of_its_stripped_run(tmp_path):
    """Compiled for an H200, the default PPO (mask, truncation bootstrap, metrics callback) launches as
    many kernels per rollout step as the run stripped to PureJaxRL's computation, and per update at
    most 1% more: its features add work after the rollout, never inside it."""
    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "gpu_kernels.py"), "--programs", "ppo", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900, cwd=REPO_ROOT,
        env={**os.environ, "LABCORE_GPU_COMPILER": str(compiler_folder())},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads((tmp_path / "gpu_kernels.json").read_text())["rows"]
    for envs in (4, 64):
        stripped, default = ([row for row in rows if row["program"].startswith(f"PPO CartPole {envs}x128, {kind}")]
                             for kind in ("stripped", "default"))
        rollout = [[row["kernels per turn"] for row in program if "scan_packed" in row["loop"]] for program in (stripped, default)]
        assert rollout[0] and rollout[0] == rollout[1], (envs, rollout)
        assert default[0]["loop"] == stripped[0]["loop"] == "one update, every loop in it"
        assert default[0]["kernels per turn"] <= 1.01 * stripped[0]["kernels per turn"], (envs, default[0], stripped[0])
