import pytest

import labcore


def test_budget_is_full_without_quick_mode(monkeypatch):
    monkeypatch.delenv("LABCORE_QUICK", raising=False)
    assert labcore.budget(full=200_000, quick=5_000) == 200_000
    assert not labcore.is_quick()


def test_budget_is_quick_when_labcore_quick_is_1(monkeypatch):
    monkeypatch.setenv("LABCORE_QUICK", "1")
    assert labcore.budget(full=200_000, quick=5_000) == 5_000
    assert labcore.is_quick()


def test_budget_zero_means_full(monkeypatch):
    monkeypatch.setenv("LABCORE_QUICK", "0")
    assert labcore.budget(full="full", quick="quick") == "full"


def test_budget_returns_any_value_unchanged(monkeypatch):
    monkeypatch.setenv("LABCORE_QUICK", "1")
    quick_config = {"steps": 10}
    assert labcore.budget(full={"steps": 10_000}, quick=quick_config) is quick_config


@pytest.mark.parametrize("bad", ["yes", "true", "2", " 1"])
def test_budget_rejects_ambiguous_values(monkeypatch, bad):
    monkeypatch.setenv("LABCORE_QUICK", bad)
    with pytest.raises(ValueError, match="LABCORE_QUICK"):
        labcore.budget(full=1, quick=0)


def test_import_labcore_does_not_import_jax():
    # Notebooks set XLA_FLAGS after `import labcore`; that only works if labcore leaves jax alone.
    import subprocess
    import sys

    code = "import sys, labcore; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
