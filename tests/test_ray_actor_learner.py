"""The actor-learner on a real Ray cluster: two Ray nodes on loopback (each its own raylet, object
store and worker processes), started by these tests; learning, node ids, killed actors, a killed
learner and its resume, and nothing listening beyond 127.0.0.1. Each test is bounded in time."""

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import descendants

from labcore import ray_cluster
from labcore.agents.dqn import actor_learner, actor_pool
from labcore.agents.dqn import core as dqn

# Several busy processes at once, with timeouts that assume the cores are theirs: `make test` runs
# these alone, after the tests that share the cores between two pytest workers.
pytestmark = pytest.mark.several_processes

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def config(**overrides) -> dqn.DQNConfig:
    settings = dict(env_id="CartPole-v1", total_steps=40_000, learning_starts=1000, buffer_size=10_000,
                    exploration_fraction=0.3)
    settings.update(overrides)
    return dqn.DQNConfig(**settings)


def listening_addresses(pids: set[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket the processes ``pids`` listen on (/proc/net/tcp, tcp6)."""
    listening = {}  # socket inode -> (address, port)
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            hex_address, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_address)
            if width == 4:
                address = ".".join(str(b) for b in raw[::-1])
            else:  # four little-endian 32-bit words
                ipv6 = ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
                address = f"::ffff:{ipv6.ipv4_mapped}" if ipv6.ipv4_mapped else str(ipv6)
            listening[fields[9]] = (address, int(hex_port, 16))
    found = []
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        for link in links:
            if link.startswith("socket:[") and link[8:-1] in listening:
                found.append((pid, *listening[link[8:-1]]))
    return found


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes on loopback, started while JAX_PLATFORMS names a TPU: a worker that inherited
    it would fail at its first JAX call, so the actors prove they run with their own setting (cpu)."""
    import jax

    jax.devices()  # this process's platform is fixed before the variable changes
    before = os.environ.get("JAX_PLATFORMS")
    os.environ["JAX_PLATFORMS"] = "tpu"
    try:
        with ray_cluster.local_cluster(num_nodes=2, cpus_per_node=2) as address:
            if before is None:
                os.environ.pop("JAX_PLATFORMS")
            else:
                os.environ["JAX_PLATFORMS"] = before
            with ray_cluster.connect(address):
                ray_cluster.wait_for_nodes(2)  # both listed alive before any run places its actors
                yield address
    finally:
        if before is None:
            os.environ.pop("JAX_PLATFORMS", None)
        else:
            os.environ["JAX_PLATFORMS"] = before


@pytest.fixture(scope="module")
def two_node_run(cluster, tmp_path_factory):
    """One run with an actor on each node. At the first metrics row (every 125 updates) after both
    actors delivered, what listens is recorded while they are alive, then actor 0's process is
    killed (SIGKILL)."""
    seen = {"started": time.monotonic()}

    def hold(row, seconds_left):
        """Hold the learner at this metrics row so that ``seconds_left`` can pass before the run ends.
        This runs only at a row, so the wait is spread over the rows still to come (at least 2 s a
        row, none at the last, where it cannot help): held a fixed 2 s a row, a run on a loaded machine
        ran out of rows, once before actor 0's first start delivered and once before its restart did."""
        rows_to_come = (updates - row["update"]) // 125
        if seconds_left > 0 and rows_to_come > 0:
            time.sleep(min(seconds_left, max(2.0, seconds_left / rows_to_come)))

    def look_then_kill(row, actors):
        # Before the kill the learner waits for both actors' first rollouts, up to 300 s (a start is
        # a new process that imports JAX and compiles: 6 to 15 s measured, more with the compilation
        # cache off, as under the unit tests; minutes on a loaded machine; an actor silent past the
        # run's deadline is killed and restarted meanwhile). After the kill it waits for actor 0's
        # restarted process to deliver, for three times as long as both actors took to deliver and
        # at least 180 s (the restart also waits for Ray to notice the death).
        now = time.monotonic()
        if "killed" not in seen:
            if all(actor["pid"] for actor in actors):  # both have delivered
                seen["listening"] = listening_addresses(set(descendants(os.getpid())) | {os.getpid()})  # the learner too
                seen["actors"] = actors
                seen["niceness"] = [os.getpriority(os.PRIO_PROCESS, actor["pid"]) for actor in actors]
                os.kill(actors[0]["pid"], signal.SIGKILL)
                seen.update(killed=actors[0]["pid"], killed_at=now, start_s=now - seen["started"])
            else:
                hold(row, 300.0 - (now - seen["started"]))
            return
        if "back_after" not in seen and actors[0]["pid"] != seen["killed"]:
            seen["back_after"] = now - seen["killed_at"]  # the restarted actor delivered
            seen["niceness_restarted"] = os.getpriority(os.PRIO_PROCESS, actors[0]["pid"])
        if "back_after" not in seen:
            hold(row, max(180.0, 3 * seen["start_s"]) - (now - seen["killed_at"]))

    run_dir = tmp_path_factory.mktemp("two-node")
    run_config = config(train_frequency=4)
    updates = (run_config.total_steps - run_config.learning_starts) // run_config.train_frequency
    result = actor_learner.train(run_config, num_actors=2, log_every=125, address=cluster, run_dir=run_dir,
                                 on_log=look_then_kill, timeout_s=900, stall_timeout_s=60, progress=False)
    return result, seen, run_dir


def test_learning_improves_on_a_two_node_cluster(two_node_run):
    result, _, _ = two_node_run
    # The actors' own returns (mean of their last 20 episodes): random play is about 22; the last
    # rows reached 68-160 in measured runs. Asynchronous: no two runs are the same, so the check
    # is on the curve's end, not on one evaluation of the final parameters.
    assert max(row["episode_return"] for row in result.metrics[-3:]) > 60, result.metrics
    assert result.metrics[0]["episode_return"] < 40
    assert [row["update"] for row in result.metrics][:3] == [125, 250, 375]
    summary = result.summary
    # the entries every driver writes first (labcore.training_run.run_summary), then the actor-learner's own
    assert list(summary)[:8] == ["env", "seeds", "timesteps", "updates", "compile_s", "run_s", "steps_per_second",
                                 "final_episode_return"]
    last = result.metrics[-1]
    assert summary["updates"] == last["update"] and summary["timesteps"] >= last["timesteps"]
    # the evaluation the record's evaluate (and `eval dqn-actor-learner`) makes of the final parameters
    assert {key: summary[key] for key in ("eval_episodes", "eval_epsilon")} == {"eval_episodes": 20, "eval_epsilon": 0.05}
    assert {key: summary[key] for key in summary if key.startswith("eval_")} == actor_learner.evaluate(
        result.config, actor_learner.params(result.state), result.config.seed)
    assert summary["steps_per_second"] > 0 and summary["learner_updates_per_second"] > 0  # all actors together
    assert summary["mean_staleness"] > 0  # actors always act with parameters some updates old


def test_actors_on_both_nodes_contribute_and_their_node_ids_are_in_the_metrics(two_node_run):
    import ray

    result, seen, run_dir = two_node_run
    node_ids = {node["node_id"] for node in ray_cluster.nodes() if node["alive"]}
    assert len(node_ids) == 2
    by_node = result.summary["transitions_by_node"]
    assert set(by_node) == node_ids  # spread: one actor per node
    # At least one whole rollout each (the killed actor may come back on either node).
    assert all(count >= 4 * 32 for count in by_node.values())
    last = result.metrics[-1]
    assert sum(by_node.values()) >= last["timesteps"]  # rollouts keep arriving after the last row
    assert {f"transitions_node_{node[:12]}" for node in node_ids} <= set(last)
    assert sum(last[f"transitions_node_{node[:12]}"] for node in node_ids) == last["timesteps"]
    assert {actor["node_id"] for actor in seen["actors"]} == node_ids  # placed one per node
    # Ray restarts a killed actor wherever a CPU is free: at the end both may share a node.
    assert {actor["node_id"] for actor in result.summary["actors"]} <= node_ids
    assert json.loads((run_dir / "summary.json").read_text()) == result.summary  # the result's summary is the file's
    assert (run_dir / "metrics.png").is_file()
    assert ray.is_initialized()  # a run that joined a cluster leaves the connection to its caller


def test_the_actors_run_jax_on_the_platform_they_were_given(two_node_run, cluster):
    import ray

    result, _, _ = two_node_run
    assert all(actor["transitions"] > 0 for actor in result.summary["actors"])  # they acted (a TPU platform would have failed)

    @ray.remote(num_cpus=0)
    def inherited() -> str | None:
        return os.environ.get("JAX_PLATFORMS")

    assert ray.get(inherited.remote()) == "tpu"  # what the actors would have had without their own setting


def test_nothing_labcore_starts_listens_beyond_loopback(two_node_run):
    _, seen, _ = two_node_run
    listening = seen["listening"]
    pids = {pid for pid, _, _ in listening}
    # The GCS, both raylets (node manager, object manager), the workers: a dozen or more servers.
    assert len(listening) >= 6 and len(pids) >= 4, listening
    assert {pid for actor in seen["actors"] for pid in [actor["pid"]] if pid} <= pids
    outside = [entry for entry in listening if entry[1] not in LOOPBACK]
    assert not outside, f"listening beyond loopback: {outside}"


def test_the_actors_run_at_the_learners_priority(two_node_run):
    # Ray's workers default to niceness 15: actors at 15 starved behind any busy process (a start
    # or restart of 9 s took over 120 s while a docs build ran beside them).
    _, seen, _ = two_node_run
    learner = os.getpriority(os.PRIO_PROCESS, 0)
    assert seen["niceness"] == [learner, learner]
    assert seen["niceness_restarted"] == learner  # the process Ray started again, too


def test_a_killed_actor_is_restarted_by_ray_and_the_run_completes(two_node_run):
    result, seen, run_dir = two_node_run
    summary, actors = result.summary, result.summary["actors"]
    assert summary["actor_restarts"] == 1 and actors[0]["restarts"] == 1, actors
    assert "back_after" in seen, seen  # it delivered again (12.5 s after the kill when measured)
    assert actors[0]["pid"] != seen["killed"]  # a new process, which delivered rollouts afterwards
    assert actors[1]["restarts"] == 0
    # One rollout (4 envs x 32 steps) per death, or none: an actor killed after every rollout asked
    # of it had come back loses nothing (seen once, on a loaded machine).
    assert summary["transitions_lost"] in (0, 4 * 32)
    assert result.metrics[-1]["update"] == (40_000 - 1000) // 4
    assert result.metrics[-1]["transitions_lost"] == summary["transitions_lost"]
    assert json.loads((run_dir / "summary.json").read_text()) == summary


def test_the_learner_takes_every_rollout_that_is_back_oldest_first():
    """ray.wait(num_returns=1) hands back a newer ready object, not the oldest (200 times in 200 with
    two older and three newer ready): a wait that always prefers the newest must starve no rollout."""
    back = ["a0", "b0", "a1", "b1"]  # in the order they were asked for; "c0" is still running

    def newest_first(pending, num_returns, timeout):
        ready = [ref for ref in reversed(pending) if ref in back]
        return ready[:num_returns], [ref for ref in pending if ref not in ready[:num_returns]]

    assert actor_pool.every_ready(["a0", "b0", "c0", "a1", "b1"], newest_first) == back
    assert actor_pool.every_ready(["c0"], newest_first) == [] and actor_pool.every_ready([], newest_first) == []


def test_ape_x_gives_each_actor_the_papers_rate():
    """Horgan et al. (2018), section 4.1: 0.4 ** (1 + 7 i / (N - 1)), 0.4 for the first actor and 0.4 ** 8 for
    the last, falling in between; a lone actor explores at 0.4 (the formula would divide by zero)."""
    rates = [actor_pool.ape_x_epsilon(i, 8) for i in range(8)]
    np.testing.assert_allclose([rates[0], rates[-1]], [0.4, 0.4**8])
    np.testing.assert_allclose(rates[3], 0.4 ** (1 + 7 * 3 / 7))
    assert all(a > b for a, b in zip(rates, rates[1:]))
    assert actor_pool.ape_x_epsilon(0, 1) == 0.4


@pytest.mark.end_to_end
def test_ape_x_exploration_reaches_each_actor(cluster):
    """exploration='ape_x': every request to actor i carries actor i's own constant rate, however far
    the run has gone (the linear schedule would give both actors the same, falling rate)."""
    seen = []
    result = actor_learner.train(config(total_steps=4_000, learning_starts=500), num_actors=2, exploration="ape_x",
                                 log_every=50, address=cluster, evaluate=False, timeout_s=600,
                                 on_log=lambda row, actors: seen.append([actor["epsilon"] for actor in actors]), progress=False)
    assert result.summary["timesteps"] >= 4_000 and len(seen) >= 2
    for epsilons in seen:
        np.testing.assert_allclose(epsilons, [0.4, 0.4**8])


def test_an_actor_that_keeps_dying_stops_the_run_with_its_name(cluster):
    def kill_actor_1(row, actors):
        if actors[1]["pid"]:
            try:
                os.kill(actors[1]["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass

    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"actor 1 died and Ray will not restart it \(restarted 0 times, max_restarts=0\)"):
        actor_learner.train(config(total_steps=1_000_000), num_actors=2, log_every=50, address=cluster, max_restarts=0,
                            on_log=kill_actor_1, timeout_s=60, stall_timeout_s=30, progress=False)
    assert time.monotonic() - started < 60


class Seen(Exception):
    """Raised from on_log to end a run once what a test waits for has happened."""


def test_a_silent_actor_is_killed_and_restarted_through_the_same_path(cluster, capfd):
    """Actor 1 stopped (SIGSTOP: alive, holding its rollouts, never failing them) after it delivered:
    past actor_deadline_s the learner kills it, Ray restarts it, and the new process delivers. The
    test waits on that event (a row whose actor 1 has a new pid), not on a guess of how long it takes."""
    seen = {}

    def stop_actor_1(row, actors):
        if "stopped" not in seen and actors[1]["pid"]:
            os.kill(actors[1]["pid"], signal.SIGSTOP)
            seen["stopped"], seen["at"] = actors[1]["pid"], time.monotonic()
        elif "stopped" in seen and actors[1]["pid"] != seen["stopped"]:
            seen["back_after"], seen["actors"], seen["row"] = time.monotonic() - seen["at"], actors, row
            raise Seen

    with pytest.raises(Seen):
        actor_learner.train(config(total_steps=10_000_000), num_actors=2, log_every=25, address=cluster,
                            on_log=stop_actor_1, actor_deadline_s=5, stall_timeout_s=60, timeout_s=180, progress=False)
    actors, row = seen["actors"], seen["row"]
    assert actors[1]["silent_restarts"] == 1 and actors[1]["restarts"] == 1, actors
    assert actors[0]["silent_restarts"] == 0 and actors[0]["restarts"] == 0, actors
    assert row["silent_restarts"] == 1 and row["actor_restarts"] == 1 and row["transitions_lost"] > 0
    said = [line for line in capfd.readouterr().err.splitlines() if "delivered no rollout" in line]
    assert said == [line for line in said if line.startswith(f"labcore: actor 1 (pid {seen['stopped']})")] and said


def test_a_learner_held_past_the_deadlines_kills_no_actor_and_sees_no_stall(cluster, capfd):
    """on_log holds the learner 30 s, past actor_deadline_s (5) and stall_timeout_s (25; it must also
    cover the actors' start, 9 to 22 s measured): the actors' rollouts came back meanwhile and wait to
    be taken, so neither actor is silent and the run is not stalled (the learner, not the actors, was
    slow). Before, a hold this long in on_log got working actors killed or stopped the run."""
    seen = {"rows_after": 0}

    def hold_once(row, actors):
        if "held" not in seen:
            if all(actor["pid"] for actor in actors):
                time.sleep(30.0)
                seen["held"] = actors
            return
        seen["rows_after"] += 1
        if seen["rows_after"] == 3:
            seen["actors"], seen["row"] = actors, row
            raise Seen

    with pytest.raises(Seen):
        actor_learner.train(config(total_steps=10_000_000), num_actors=2, log_every=25, address=cluster,
                            on_log=hold_once, actor_deadline_s=5, stall_timeout_s=25, timeout_s=180, progress=False)
    assert seen["row"]["silent_restarts"] == 0 and seen["row"]["actor_restarts"] == 0, seen
    assert [actor["pid"] for actor in seen["actors"]] == [actor["pid"] for actor in seen["held"]]  # the same processes
    assert "delivered no rollout" not in capfd.readouterr().err


def test_actors_that_cannot_be_placed_are_reported_not_waited_for(cluster):
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"no actor returned a rollout for 5 s .*each actor asks for 64 CPU"):
        actor_learner.train(config(), num_actors=1, address=cluster, cpus_per_actor=64, stall_timeout_s=5, progress=False)
    assert time.monotonic() - started < 30


def test_bad_settings_and_addresses_fail_before_any_actor_starts(cluster):
    with pytest.raises(ValueError, match="ActorLearnerSettings.num_actors must be an integer >= 1, got 0"):
        actor_learner.train(config(), num_actors=0, address=cluster, progress=False)
    with pytest.raises(ValueError, match="ActorLearnerSettings.cpus_per_actor must be a finite number > 0, got 0"):
        actor_learner.train(config(), cpus_per_actor=0, address=cluster, progress=False)
    with pytest.raises(ValueError, match="checkpoint_every needs a run_dir"):
        actor_learner.train(config(), checkpoint_every=100, address=cluster, progress=False)
    with pytest.raises(ValueError, match=r"ActorLearnerSettings.exploration must be one of \('linear', 'ape_x'\), got 'greedy'"):
        actor_learner.train(config(), exploration="greedy", address=cluster, progress=False)
    with pytest.raises(ValueError, match="ActorLearnerSettings.actor_deadline_s must be a finite number > 0, got -1"):
        actor_learner.train(config(), actor_deadline_s=-1, address=cluster, progress=False)
    with pytest.raises(ValueError, match="log_every must be >= 1, got 0"):
        actor_learner.train(config(), log_every=0, address=cluster, progress=False)
    with pytest.raises(ValueError, match=r"address: this process is connected to the Ray cluster at .*127.0.0.1:1"):
        actor_learner.train(config(), address="127.0.0.1:1", progress=False)  # another cluster than the one this process joined
    command = [sys.executable, "-m", "labcore", "train", "dqn-actor-learner", "--address", "127.0.0.1:1"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 1  # running it failed: no cluster answers
    assert "error: no Ray head node answers at 127.0.0.1:1" in finished.stderr and "Traceback" not in finished.stderr


@pytest.mark.end_to_end
def test_a_killed_learner_leaves_a_checkpoint_and_the_run_resumes_from_it(cluster, tmp_path):
    """The learner is the command line's process on its own one-node Ray (as on a laptop); it is
    killed after its first checkpoint, its Ray stops, and the run resumes on the two-node cluster."""
    from labcore import checkpoint

    run_dir = tmp_path / "run"
    flags = ["--env", "CartPole-v1", "--total-steps", "12000", "--learning-starts", "1000", "--buffer-size", "10000",
             "--exploration-fraction", "0.3", "--log-every", "250", "--checkpoint-every", "500"]
    command = [sys.executable, "-m", "labcore", "train", "dqn-actor-learner", *flags, "--run-dir", str(run_dir)]
    learner = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    try:
        while (checkpoint.latest_step(run_dir / "checkpoints") or 0) < 500:
            assert learner.poll() is None, learner.stderr.read()
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.2)
        its_processes = set(descendants(learner.pid))
        outside = [entry for entry in listening_addresses(its_processes | {learner.pid}) if entry[1] not in LOOPBACK]
        assert not outside, f"the command's own Ray listens beyond loopback: {outside}"
        learner.kill()
        learner.wait(timeout=10)
    finally:
        if learner.poll() is None:
            learner.kill()
    saved = checkpoint.latest_step(run_dir / "checkpoints")
    assert saved is not None and saved < 1100  # killed mid-run

    def running(pid: int) -> str | None:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            return None if ") Z" in stat else Path(f"/proc/{pid}/cmdline").read_text().split("\0")[0]
        except OSError:
            return None

    # Ray's processes of a dead driver stop by themselves: its GCS, raylet and workers (the actors)
    # within seconds; its dashboard and runtime-env agents poll for their raylet and followed 50 to
    # 95 s later when measured, so they are stopped here rather than waited for.
    agents = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = {pid: name for pid in its_processes if (name := running(pid)) and name not in agents}
        if not left:
            break
        time.sleep(0.5)
    for pid in its_processes:
        if running(pid) in agents:
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind by the killed learner: {left}"

    result = actor_learner.train(config(total_steps=12_000), num_actors=2, log_every=250, address=cluster,
                                 run_dir=run_dir, checkpoint_every=500, resume=True, timeout_s=90, stall_timeout_s=60, progress=False)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["update"] for row in rows] == list(range(250, 1100, 250))  # cut back to the checkpoint, then on
    assert result.metrics[0]["update"] == saved + 250
    assert result.metrics[0]["timesteps"] > 1000 + saved * 10  # the transitions counted before the kill carried over
    assert checkpoint.latest_step(run_dir / "checkpoints") == 1100
    assert result.summary["updates"] == 1100 and result.summary["timesteps"] >= 12_000
    assert result.state["train_state"].update_count == 1100  # the learner's state, returned as a checkpoint holds it
