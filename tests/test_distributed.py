"""Real multi-process JAX on loopback: the launcher, a cross-process psum, failures that end cleanly."""

import os
import sys
import re
import textwrap
import time

import pytest

from labcore import distributed, is_quick

# Several busy processes at once, with timeouts that assume the cores are theirs: `make test` runs
# these alone, after the tests that share the cores between two pytest workers.
pytestmark = pytest.mark.several_processes


def python(script: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(script)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_two_processes_of_two_devices_psum_across_processes():
    result = distributed.launch(["cluster-check"], num_processes=2, devices_per_process=2, timeout_s=120, stream=None)
    assert result.returncode == 0, result.message + "\n" + "\n".join(sum(result.output, []))
    # The workers' stdout and stderr share one pipe, so a C++ log line (Gloo's) can land on the same
    # line as a report, before or after it: find the report inside the line, and read its tokens.
    reports = [match.group(0) for lines in result.output for line in lines
               for match in re.finditer(r"cluster-check \{[^}]*\}", line)]
    assert len(reports) == 2, "\n".join(sum(result.output, []))
    for report in reports:
        assert "'devices': 4" in report and "'psum': 10.0" in report and "'local_devices': 2" in report
    fingerprints = [re.search(r"'mean_fingerprint': '([0-9a-f]+)'", report) for report in reports]
    assert all(fingerprints), reports
    assert len({match.group(1) for match in fingerprints}) == 1  # same bits in both


def test_a_dead_worker_ends_the_run_quickly_and_leaves_no_process_behind(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = f"""
        import os, subprocess, sys, time
        from labcore import distributed
        rank, _ = distributed.initialize()
        # a grandchild in the worker's process group: the launcher must stop it too
        child = subprocess.Popen(["sleep", "300"])
        open("{pid_file}." + str(rank), "w").write(str(child.pid))
        if rank == 1:
            time.sleep(1.0)
            os._exit(3)  # dies without a word
        from jax.experimental import multihost_utils
        import numpy as np
        multihost_utils.process_allgather(np.zeros(1))  # rank 0 waits here for a peer that is gone
        time.sleep(300)
    """
    started = time.monotonic()
    result = distributed.launch(python(script), num_processes=2, devices_per_process=1, timeout_s=120, stream=None)
    assert time.monotonic() - started < 60
    assert result.returncode != 0
    assert "worker 1 died with exit status 3" in result.message
    for rank in range(2):
        pid = int((tmp_path / f"child.pid.{rank}").read_text())
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pid), f"rank {rank}'s child process survived"


def test_a_worker_that_never_joins_times_out():
    script = """
        import os, time
        if os.environ["LABCORE_PROCESS_ID"] == "0":
            from labcore import distributed
            distributed.initialize(timeout_s=30)  # waits for a peer that never comes
        time.sleep(300)
    """
    started = time.monotonic()
    result = distributed.launch(python(script), num_processes=2, devices_per_process=1, join_timeout_s=3, stream=None)
    assert time.monotonic() - started < 20
    assert result.returncode != 0 and "did not join the cluster within 3 s" in result.message


def test_initialize_needs_all_three_arguments_together(monkeypatch):
    for name in (distributed.ENV_COORDINATOR, distributed.ENV_NUM_PROCESSES, distributed.ENV_PROCESS_ID):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="together"):
        distributed.initialize(coordinator_address="127.0.0.1:1234")
    with pytest.raises(ValueError, match=r"process_id must be in \[0, 2\)"):
        distributed.initialize("127.0.0.1:1234", 2, 5)


def test_launcher_command_line_reports_failure(capsys):
    from labcore import __main__ as cli

    code = cli.main(["launch", "--num-processes", "2", "--devices-per-process", "1", "--join-timeout", "20",
                     "--", "train", "dqn-data-parallel", "--env", "NoSuchGame-v0"])
    assert code == 1
    assert "died with exit status 2" in capsys.readouterr().err


# Every process labcore starts runs JAX on the CPU platform, whatever the parent's environment asks
# for: a notebook kernel holding a GPU or TPU must not have its children claim the chip again.
# The parent's environment names an accelerator this machine lacks ("tpu"): a child that inherited
# it would fail to start JAX, so these tests fail if the child's environment is not set.


def test_child_environments_say_cpu_and_leave_this_process_alone(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    assert distributed.cpu_only_env()["JAX_PLATFORMS"] == "cpu"
    assert distributed.cpu_only_env({"JAX_PLATFORMS": "cuda", "X": "1"}) == {"JAX_PLATFORMS": "cpu", "X": "1"}
    assert distributed._worker_env(0, 2, 2, 1234)["JAX_PLATFORMS"] == "cpu"
    assert os.environ["JAX_PLATFORMS"] == "tpu"


def test_launched_workers_run_on_the_cpu_when_the_parent_names_an_accelerator(monkeypatch):
    import jax

    jax.devices()  # this process's JAX starts before the environment below names a TPU
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    script = """
        import os, jax
        print("child sees", os.environ["JAX_PLATFORMS"], jax.default_backend())
    """
    result = distributed.launch(python(script), num_processes=1, devices_per_process=1, timeout_s=60, stream=None)
    assert result.returncode == 0, result.message + "\n" + "\n".join(sum(result.output, []))
    assert "child sees cpu cpu" in result.output[0]


DP_FLAGS = ["train", "dqn-data-parallel", "--env", "CartPole-v1", "--total-steps", "20000", "--learning-starts", "1000",
            "--buffer-size", "5000", "--exploration-fraction", "0.3"]


def summaries(result):
    import json

    rows = [json.loads(line) for lines in result.output for line in lines if line.startswith('{"process"')]
    return sorted(rows, key=lambda row: row["process"])


@pytest.mark.end_to_end
def test_data_parallel_dqn_across_two_processes_learns_with_identical_parameters(tmp_path):
    """2 processes x 2 devices, 2,000 updates (100 of them the replay warm-up): after every chunk
    the parameters agree bit for bit across processes (the run raises otherwise), the policy
    improves, only process 0 writes, a run stopped after a checkpoint resumes exactly (the same
    final parameters and the same re-logged rows as the run that was not stopped), and the same
    seed with another chunking gives the same bits, as does one process of four devices. Under
    LABCORE_QUICK=1 (as in CI) one run checks both: one process of four devices, chunked by 500
    updates instead of 200."""
    import json
    import shutil

    run_dir = tmp_path / "dp"
    first = distributed.launch([*DP_FLAGS, "--log-every", "200", "--run-dir", str(run_dir), "--checkpoint-every", "800"],
                               2, 2, timeout_s=300, stream=None)
    assert first.returncode == 0, first.message + "\n" + "\n".join(first.output[0][-30:])
    a, b = summaries(first)
    assert (a["devices"], a["processes"], a["updates"], a["timesteps"]) == (4, 2, 2000, 80_000)
    assert a["params_fingerprint"] == b["params_fingerprint"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["update"] for row in rows] == list(range(200, 2001, 200))  # written once (process 0 only)
    returns = [row["episode_return"] for row in rows]  # the last 20 episodes of each replica
    assert a["eval_return_mean"] > 5 * 20 and returns[-1] > 5 * returns[0], (a, returns)  # random play: ~20
    assert sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir()) == [1600, 2000]
    # stopped after the checkpoint at 1,600 updates: the resume finishes the last 400 exactly
    shutil.rmtree(run_dir / "checkpoints" / "2000")
    resumed = distributed.launch([*DP_FLAGS, "--log-every", "200", "--run-dir", str(run_dir), "--resume"], 2, 2,
                                 timeout_s=300, stream=None)
    assert resumed.returncode == 0, resumed.message
    c, d = summaries(resumed)
    assert c["updates"] == 2000 and c["params_fingerprint"] == d["params_fingerprint"] == a["params_fingerprint"]
    assert [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()] == rows
    if not is_quick():  # under LABCORE_QUICK=1 the one-process run below, chunked by 500 too, checks both
        again = distributed.launch([*DP_FLAGS, "--log-every", "500"], 2, 2, timeout_s=300, stream=None)
        assert again.returncode == 0, again.message
        assert summaries(again)[0]["params_fingerprint"] == a["params_fingerprint"]
    # one process of four devices runs the same four replicas: the same bits as two processes of two
    one_process = distributed.launch([*DP_FLAGS, "--log-every", "500"], 1, 4, timeout_s=300, stream=None)
    assert one_process.returncode == 0, one_process.message
    assert (summaries(one_process)[0]["processes"], summaries(one_process)[0]["replicas"]) == (1, 4)
    assert summaries(one_process)[0]["params_fingerprint"] == a["params_fingerprint"]
    # a resume on another layout is refused by name before anything runs
    other = distributed.launch([*DP_FLAGS, "--run-dir", str(run_dir), "--resume"], 1, 2, timeout_s=120, stream=None)
    assert other.returncode != 0 and "devices=4" in "\n".join(sum(other.output, [])), other.output


@pytest.mark.end_to_end
def test_eight_replicas_on_one_device_run_as_on_eight_devices(tmp_path):
    """--replicas-per-device 8 on one device vmaps the eight replicas inside it, the gradient mean
    over the vmapped axis: the same run as one replica on each of a mesh of 8 simulated CPU
    devices, to float rounding (the mean adds in another order). Measured after 50 gradient updates
    (1,500 steps per replica): 6.0e-8; the test allows 1e-5. (A longer run eventually flips a greedy
    action, and the two runs then see different data: at 2,000 steps one 2-core machine flipped one
    and ended 1.3e-4 apart, another did not.)"""
    import jax
    import numpy as np

    from labcore.agents.dqn import multi_process

    flags = [*DP_FLAGS[:5], "1500", *DP_FLAGS[6:], "--log-every", "500"]  # 1,000 warm-up steps, 50 gradient updates
    mesh = distributed.launch([*flags, "--run-dir", str(tmp_path / "devices")], 1, 8, timeout_s=300, stream=None)
    one_device = distributed.launch([*flags, "--replicas-per-device", "8", "--run-dir", str(tmp_path / "vmapped")], 1, 1,
                                    timeout_s=300, stream=None)
    assert mesh.returncode == 0 and one_device.returncode == 0, mesh.message + one_device.message
    (spread,), (vmapped,) = summaries(mesh), summaries(one_device)
    assert (spread["devices"], spread["replicas"], vmapped["devices"], vmapped["replicas"]) == (8, 8, 1, 8)
    assert spread["timesteps"] == vmapped["timesteps"] == 8 * 1500 and spread["updates"] == vmapped["updates"] == 150
    (_, spread_carry), (_, vmapped_carry) = (multi_process.load_checkpoint(tmp_path / name)
                                             for name in ("devices", "vmapped"))
    assert spread_carry.step.shape == (8, 1) and vmapped_carry.step.shape == (1, 8)  # [devices, replicas_per_device]
    a, b = (multi_process.first_replica(carry) for carry in (spread_carry, vmapped_carry))
    difference = max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
                     for x, y in zip(jax.tree_util.tree_leaves(multi_process.params(spread_carry)),
                                     jax.tree_util.tree_leaves(multi_process.params(vmapped_carry))))
    print(f"largest difference in the final parameters: {difference:.2e}")
    assert 0.0 <= difference <= 1e-5
    assert int(a.train_state.update_count) == int(b.train_state.update_count) == 50
    assert int(a.step) == int(b.step) == 1500  # replica 0's agent steps
