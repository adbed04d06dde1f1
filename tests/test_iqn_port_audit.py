"""The mistakes a PyTorch-to-Flax port of the IQN learner can make, and where labcore avoids each.

Notebook 06 teaches the fix of each where it arises, and the IQN results page
(``docs/results/iqn.md``) names them all, by section; ``PITFALLS``
below is the list with, for each, the labcore code that avoids it and the tests that fail if it
comes back. These tests hold the list to the repository: every named function exists, every named
test exists, and the port's public functions carry the docstrings and annotations that the last two
entries promise.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
from typing import NamedTuple

import pytest

TESTS_DIR = pathlib.Path(__file__).resolve().parent


class Pitfall(NamedTuple):
    mistake: str
    code: tuple[str, ...]  # "module.path: name, Class.method": what avoids it
    tests: tuple[str, ...]  # "test_file.py: test_name": what fails if it comes back


# The port's modules: the last two mistakes are about all of them.
PORT_MODULES = ("labcore.agents.iqn.core", "labcore.agents.iqn.frame_buffer", "labcore.nets.iqn", "labcore.nets.noisy",
                "labcore.nets.functional")

PITFALLS = {
    1: Pitfall("factorised noise added to the layer's output; the original perturbs every weight independently",
               ("labcore.nets.noisy: NoisyLinear",),
               ("test_iqn.py: test_noisy_linear_without_a_key_uses_mean_weights_and_noise_comes_from_the_key",
                "test_iqn_parity.py: test_forward_quantiles_and_q_values_match")),
    2: Pitfall("layers created inside __call__ (a Linen @nn.compact habit); an NNX module builds them in __init__",
               ("labcore.nets.noisy: NoisyLinear.__init__", "labcore.nets.iqn: IQN.__init__"),
               ("test_iqn.py: test_noisy_linear_init_ranges_and_names",)),
    3: Pitfall("get_qvalues called on a module that does not hold the parameters being trained",
               ("labcore.nets.iqn: IQN.get_qvalues, q_values", "labcore.nets.functional: Functional.apply"),
               ("test_iqn.py: test_iqn_shapes_names_init_dueling_and_checks",
                "test_iqn_parity.py: test_acting_picks_the_same_action")),
    4: Pitfall("value_and_grad(lambda p: loss) of a constant",
               ("labcore.agents.iqn.core: loss_fn, train_step",),
               ("test_iqn.py: test_train_step_lowers_the_loss_on_a_fixed_batch",
                "test_iqn_parity.py: test_loss_gradients_and_clipped_adam_steps_match")),
    5: Pitfall("self inside jitted buffer functions",
               ("labcore.agents.iqn.frame_buffer: FrameBuffer, sample_indices, gather_batch",),
               ("test_iqn.py: test_sample_indices_range_uniqueness_and_lax_scan",)),
    6: Pitfall("k[0] of a PRNG key to stack keys",
               ("labcore.agents.iqn.core: init_agents",),
               ("test_iqn.py: test_vmapped_acting_equals_each_agent_alone",)),
    7: Pitfall("parallel training left as an empty function",
               ("labcore.agents.iqn.core: learn, train_step",),
               ("test_iqn.py: test_vmapped_training_equals_each_agent_alone",
                "test_iqn_modes.py: test_jax_parallel_equals_jax_sequential")),
    8: Pitfall("add_empty's behaviour (it moves the write position without clearing rows)",
               ("labcore.agents.iqn.frame_buffer: buffer_add_empty",),
               ("test_iqn.py: test_add_empty_and_current_state_across_the_wrap",
                "test_iqn_parity.py: test_buffers_match_through_adds_add_empty_and_the_wrap")),
    9: Pitfall("noise drawn from an RNG stream kept in the module, so the same call draws differently each time",
               ("labcore.nets.noisy: NoisyLinear.__call__, NoisyLinear.noise", "labcore.nets.iqn: layer_keys"),
               ("test_iqn.py: test_noisy_linear_without_a_key_uses_mean_weights_and_noise_comes_from_the_key",)),
    10: Pitfall("NoisyLinear without its input size",
                ("labcore.nets.noisy: NoisyLinear",),
                ("test_iqn.py: test_noisy_linear_checks_the_input_width",)),
    11: Pitfall("input shapes not checked",
                ("labcore.agents.iqn.core: check_params_shape, select_action",
                 "labcore.agents.iqn.frame_buffer: stacked_state", "labcore.nets.iqn: IQN.__call__"),
                ("test_iqn.py: test_check_params_shape_names_the_leaf_and_both_shapes",)),
    12: Pitfall("current_state across the wrap (a Python branch on a traced index)",
                ("labcore.agents.iqn.frame_buffer: buffer_current_state",),
                ("test_iqn.py: test_add_empty_and_current_state_across_the_wrap",
                 "test_iqn_parity.py: test_buffers_match_through_adds_add_empty_and_the_wrap",
                 "test_exercises.py: test_current_state_is_checked_under_jit_with_a_traced_index")),
    13: Pitfall("no gradient clipping",
                ("labcore.agents.iqn.core: make_optimizer",),
                ("test_iqn.py: test_the_optimizer_clips_the_global_norm",
                 "test_iqn_parity.py: test_loss_gradients_and_clipped_adam_steps_match")),
    14: Pitfall("device placement left as `pass`",
                ("labcore.agents.iqn.core: init_agent, init_agents",),
                ("test_iqn.py: test_device_placement_is_explicit",)),
    15: Pitfall("unclear errors",
                ("labcore.agents.iqn.core: IQNConfig", "labcore.agents.iqn.run_config: IQNRunConfig"),
                ("test_iqn.py: test_config_validation_names_the_field",
                 "test_iqn_modes.py: test_config_validation_names_the_field")),
    16: Pitfall("the comparison of the run modes left unwritten",
                ("labcore.agents.iqn.run: train", "labcore.agents.iqn.runners: make_runner"),
                ("test_iqn_modes.py: test_jax_fused_equals_jax_parallel",
                 "test_iqn_modes.py: test_learning_gems_per_epoch_rise")),
    17: Pitfall("missing type hints", PORT_MODULES,
                ("test_iqn_port_audit.py: test_the_ports_public_functions_are_documented_and_annotated",)),
    18: Pitfall("JAX patterns undocumented", PORT_MODULES,
                ("test_iqn_port_audit.py: test_the_ports_public_functions_are_documented_and_annotated",)),
}


def resolve(reference: str) -> list[object]:
    """'labcore.agents.iqn.core: a, B.c' -> the objects named; a bare module path -> [the module]."""
    module_name, _, names = reference.partition(":")
    module = importlib.import_module(module_name.strip())
    found = []
    for name in filter(None, (n.strip() for n in names.split(","))):
        obj = module
        for part in name.split("."):
            obj = getattr(obj, part)
        found.append(obj)
    return found or [module]


def absent_tests(named: list[str], tests_dir: pathlib.Path) -> list[str]:
    """The 'file.py: test_name' entries whose file does not define that function."""
    defined: dict[str, set[str]] = {}
    missing = []
    for entry in named:
        file, _, test = (part.strip() for part in entry.partition(":"))
        if file not in defined:
            path = tests_dir / file
            tree = ast.parse(path.read_text()) if path.exists() else ast.Module(body=[], type_ignores=[])
            defined[file] = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        if test not in defined[file]:
            missing.append(entry)
    return missing


@pytest.mark.parametrize("number", sorted(PITFALLS))
def test_every_pitfall_names_code_that_exists(number):
    for reference in PITFALLS[number].code:
        assert resolve(reference), reference  # ImportError or AttributeError if a name is gone


def test_every_pitfall_names_tests_that_exist():
    named = [test for pitfall in PITFALLS.values() for test in pitfall.tests]
    assert absent_tests(named, TESTS_DIR) == []


def test_the_audit_reports_a_test_that_does_not_exist():
    named = ["test_iqn_modes.py: test_defaults_are_the_reference_experiment", "test_iqn_modes.py: test_no_such_test",
             "test_nowhere.py: test_gone"]
    assert absent_tests(named, TESTS_DIR) == ["test_iqn_modes.py: test_no_such_test", "test_nowhere.py: test_gone"]


def test_the_ports_public_functions_are_documented_and_annotated():
    undocumented, unannotated = [], []
    for module_name in PORT_MODULES:
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and not inspect.getdoc(obj):
                undocumented.append(f"{module_name}.{name}")
            if inspect.isfunction(obj):
                signature = inspect.signature(obj)
                if signature.return_annotation is inspect.Signature.empty or any(
                        p.annotation is inspect.Parameter.empty for p in signature.parameters.values()):
                    unannotated.append(f"{module_name}.{name}")
    assert undocumented == [] and unannotated == []


def test_the_results_page_lists_every_pitfall():
    page = (TESTS_DIR.parent / "docs" / "results" / "iqn.md").read_text()
    assert "## Pitfalls of a port" in page
    section = page.split("## Pitfalls of a port", 1)[1].split("\n## ", 1)[0]
    spelled = {18: "eighteen", 19: "nineteen", 20: "twenty"}.get(len(PITFALLS), str(len(PITFALLS)))
    assert f"lists all {spelled}" in section  # the page's count is the audit's
    assert "tests/test_iqn_port_audit.py" in section
