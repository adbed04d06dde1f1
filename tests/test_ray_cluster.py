"""labcore.ray_cluster's start-up: a node started again when Ray's own wait for its raylet runs out."""

import signal
import subprocess
import sys
import time

import pytest

from labcore import ray_cluster

# What Ray raises when a new node's raylet has not registered with the GCS within its fixed 30 s.
RAYLET_LATE = ("The current node timed out during startup. This could happen because some of the raylet failed "
               "to startup or the GCS has become overloaded.")


def test_a_node_whose_raylet_registers_late_is_started_again_and_the_failed_tries_leave_no_process(capfd):
    tries = []

    def start():  # each try starts a process, as a Ray node does, and the first two time out
        tries.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]))
        if len(tries) < 3:
            raise Exception(RAYLET_LATE)
        return "up"

    cleaned = []
    try:
        assert ray_cluster._started("adding a Ray node", 60.0, start, clean_up=lambda: cleaned.append(1)) == "up"
        assert [process.wait(timeout=10) for process in tries[:2]] == [-signal.SIGKILL] * 2  # killed, not left
        assert tries[2].poll() is None  # the node that started stays
        assert cleaned == [1, 1]
    finally:
        for process in tries:
            process.kill()
    err = capfd.readouterr().err
    assert err.count("adding a Ray node: a raylet did not register within Ray's 30 s") == 2
    assert "(try 1;" in err and "(try 2;" in err


def test_a_start_that_fails_otherwise_is_not_started_again():
    tries = []

    def start():
        tries.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]))
        raise OSError("address already in use")

    try:
        with pytest.raises(OSError, match="address already in use"):
            ray_cluster._started("starting Ray", 60.0, start)
        assert len(tries) == 1 and tries[0].wait(timeout=10) == -signal.SIGKILL
    finally:
        for process in tries:
            process.kill()


def test_a_raylet_still_late_when_the_time_is_up_is_a_timeout_that_says_so():
    def start():
        time.sleep(0.5)
        raise Exception(RAYLET_LATE)

    with pytest.raises(TimeoutError, match=r"adding a Ray node: a Ray node's raylet did not register within 1 s "
                                           r"\(tries: 1; Ray's logs"):
        ray_cluster._started("adding a Ray node", 1.0, start)
