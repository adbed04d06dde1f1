"""labcore.checkpoint: every file of a checkpoint verified against the digests recorded when it was
written; a damaged step named and the newest intact one read, or a refusal."""

from __future__ import annotations

import json
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from labcore import checkpoint, runs

LIKE = {"x": jnp.zeros(1000), "n": np.int32(0)}


def save(folder, step):
    return checkpoint.save(folder, step, {"x": jnp.arange(1000.0) + step, "n": np.int32(step)}, {"config": {"a": 1}})


def largest_data_file(step_dir):
    return max((p for p in (step_dir / "state").rglob("*") if p.is_file() and "/d/" in p.as_posix()),
               key=lambda p: p.stat().st_size)


def invert_middle(path, count=64):
    """The bytes a bad sector or a stray write changes: ``count`` bytes in the middle, inverted."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + count] = bytes(b ^ 0xFF for b in data[middle:middle + count])
    path.write_bytes(bytes(data))


def test_a_saved_step_records_the_digest_of_every_file_and_verifies(tmp_path):
    step_dir = save(tmp_path, 3)
    manifest = json.loads((step_dir / checkpoint.DIGESTS_NAME).read_text())
    on_disk = {p.relative_to(step_dir).as_posix() for p in step_dir.rglob("*") if p.is_file()}
    assert set(manifest["files"]) == on_disk - {checkpoint.DIGESTS_NAME}
    assert manifest["algorithm"] == "blake2b-128" and checkpoint.verify(step_dir) is True
    state, metadata = checkpoint.restore(tmp_path, LIKE)
    assert int(state["n"]) == 3 and metadata["config"] == {"a": 1} and metadata["digests"] == "blake2b-128"


@pytest.mark.parametrize("damage", ["inverted", "truncated", "emptied", "deleted", "digests deleted"])
def test_damaged_array_bytes_are_named_and_the_step_before_is_read(tmp_path, damage, capfd):
    save(tmp_path, 2)
    newest = save(tmp_path, 4)
    target = largest_data_file(newest)
    if damage == "inverted":
        invert_middle(target)
    elif damage == "truncated":
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    elif damage == "emptied":
        target.write_bytes(b"")
    elif damage == "deleted":
        target.unlink()
    else:
        (newest / checkpoint.DIGESTS_NAME).unlink()  # killed between orbax's commit and the digests
    with pytest.raises(checkpoint.DamagedCheckpoint, match="^4"):
        checkpoint.restore(tmp_path, LIKE, step=4)  # asked for by number: refused, never read
    state, _ = checkpoint.restore(tmp_path, LIKE)  # the newest intact one
    assert int(state["n"]) == 2 and float(state["x"][0]) == 2.0
    assert checkpoint.restore_metadata(tmp_path)["config"] == {"a": 1}
    lines = [line for line in capfd.readouterr().err.splitlines() if "is damaged" in line]
    assert len(lines) == 1 and lines[0].startswith("labcore: checkpoint 4 in "), lines  # named once, read twice


def test_with_every_step_damaged_the_load_is_refused_naming_each(tmp_path):
    for step in (2, 4):
        invert_middle(largest_data_file(save(tmp_path, step)))
    with pytest.raises(checkpoint.DamagedCheckpoints, match=r"no intact checkpoint in .*step 4 \(.*step 2 \("):
        checkpoint.restore(tmp_path, LIKE)


def test_a_checkpoint_written_before_digests_loads_and_says_so_once(tmp_path, capfd):
    for step in (2, 4):
        step_dir = save(tmp_path, step)
        (step_dir / checkpoint.DIGESTS_NAME).unlink()  # as an older labcore wrote it: no digests, none promised
        metadata = step_dir / "metadata" / "metadata"
        metadata.write_text(json.dumps({k: v for k, v in json.loads(metadata.read_text()).items() if k != "digests"}))
    assert checkpoint.verify(tmp_path / "4") is False
    assert int(checkpoint.restore(tmp_path, LIKE)[0]["n"]) == 4
    assert int(checkpoint.restore(tmp_path, LIKE, step=2)[0]["n"]) == 2
    said = [line for line in capfd.readouterr().err.splitlines() if "no digests" in line]
    assert len(said) == 1 and "written before labcore recorded them" in said[0]


def test_an_unreadable_digest_file_is_damage(tmp_path):
    save(tmp_path, 2)
    step_dir = save(tmp_path, 4)
    (step_dir / checkpoint.DIGESTS_NAME).write_text('{"algorithm": "blake2b-128", "files": {"state/_MET')
    with pytest.raises(checkpoint.DamagedCheckpoint, match="cannot be read"):
        checkpoint.verify(step_dir)
    assert int(checkpoint.restore(tmp_path, LIKE)[0]["n"]) == 2


def test_a_resume_sets_the_damaged_step_aside_and_the_reader_does_not(tmp_path, capfd):
    run_path = tmp_path / "run"
    config = {"a": 1}
    for step in (2, 4):
        save(run_path / "checkpoints", step)
    invert_middle(largest_data_file(run_path / "checkpoints" / "4"))
    state, _ = checkpoint.restore(run_path / "checkpoints", LIKE)  # a reader: reads step 2, moves nothing
    assert int(state["n"]) == 2 and (run_path / "checkpoints" / "4").is_dir()
    run = runs.RunDir.open(run_path, config, step_key="update", resume=True, like=LIKE)
    assert run.resume_step == 2 and (run_path / "damaged-checkpoints" / "4").is_dir()
    err = capfd.readouterr().err
    assert "has changed since it was written" in err and "resuming from checkpoint 2" in err
    run.finish()
    shutil.rmtree(run_path)
