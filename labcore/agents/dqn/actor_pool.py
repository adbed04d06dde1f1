"""The actor-learner's actors as its learner sees them (``labcore.agents.dqn.actor_learner``): the rollouts asked of
each, their table, and what each fault does to them.

``ActorPool`` holds the Ray handles, the rollouts in flight (at most ``ROLLOUTS_QUEUED_PER_ACTOR`` per actor),
the actors' table (rank, node, pid, restarts, transitions, epsilon) and the transitions lost; ``back`` takes one
returned rollout or restart, ``silence`` kills an actor past its deadline for Ray to restart it.
``every_ready`` is how the learner waits for them, and ``ape_x_epsilon`` the rate Ape-X gives each actor.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from labcore.agents.dqn import core as dqn
from labcore.agents.dqn.config import ActorLearnerSettings

ROLLOUTS_QUEUED_PER_ACTOR = 2  # one acting, one waiting: an actor is never idle while the learner works


def ape_x_epsilon(actor_index: int, num_actors: int, base: float = 0.4, alpha: float = 7.0) -> float:
    """Ape-X's exploration rate of actor ``actor_index`` of ``num_actors``: base ** (1 + alpha * i / (N - 1))
    (Horgan et al. 2018, section 4.1: base 0.4, alpha 7), from 0.4 for actor 0 down to 0.4 ** 8 for the
    last; a lone actor explores at ``base``."""
    if num_actors == 1:
        return base
    return base ** (1.0 + alpha * actor_index / (num_actors - 1))


def every_ready(pending: list, wait: Callable, timeout_s: float = 1.0) -> list:
    """Every one of ``pending`` that is back, oldest first, after waiting up to ``timeout_s`` for one.

    ``wait`` is ``ray.wait``. Asked for one of many ready objects it returns a newer one (200 times in
    200, with two older and three newer ready): with the learner slower than its actors, one actor's
    rollouts, or the failure saying it died, were passed over for minutes while the other's kept
    arriving, so its restart was never asked for.
    """
    if not pending or not wait(pending, num_returns=1, timeout=timeout_s)[0]:
        return []
    back = set(wait(pending, num_returns=len(pending), timeout=0)[0])
    return [ref for ref in pending if ref in back]


class ActorPool:
    """The run's actors as the learner sees them: their Ray handles, the rollouts asked of each, their table
    (rank, node, pid, restarts, transitions, epsilon), and what each fault does to them (a death, a restart, a
    silence past the deadline)."""

    def __init__(self, config: dqn.DQNConfig, settings: ActorLearnerSettings, handles: list, restarts: list[int],
                 lost: int = 0):
        import ray
        from ray.exceptions import ActorDiedError, RayActorError

        self._ray, self.ActorDiedError, self.RayActorError = ray, ActorDiedError, RayActorError
        self.config, self.settings, self.handles = config, settings, handles
        self.table = [{"rank": rank, "node_id": None, "pid": None, "restarts": restarts[rank], "silent_restarts": 0,
                       "transitions": 0, "epsilon": None} for rank in range(settings.num_actors)]
        self.in_flight: dict[Any, int] = {}  # rollout -> the rank of the actor asked for it
        self.restarting: dict[Any, int] = {}  # a `ready` call to an actor Ray is restarting -> its rank
        self.lost = lost  # transitions in rollouts that died with their actor (a resumed run's earlier ones too)
        self.per_call = settings.envs_per_actor * settings.rollout_steps
        self.last_heard: list[float] = []  # each actor's start, restart or last delivery (``start`` begins them)
        self.delivered = [False] * settings.num_actors  # whether it has delivered since its start or restart
        self.first_rollout_s: list[float] = []  # from a start or restart to the first rollout, each time

    def start(self, now: float) -> None:
        """The run starts at ``now``: every actor's deadline runs from it."""
        self.last_heard = [now] * self.settings.num_actors

    def asked_of(self, rank: int) -> list:
        """The rollouts asked of actor ``rank`` that the learner has not taken yet."""
        return [ref for ref, asked in self.in_flight.items() if asked == rank]

    def ask(self, rank: int, params_ref: Any, version: int, received: int) -> None:
        """Queue rollouts for ``rank`` up to ROLLOUTS_QUEUED_PER_ACTOR, with the newest parameters (``params_ref``,
        ``version`` updates old); ``received``: the transitions received, where the linear schedule stands."""
        while len(self.asked_of(rank)) < ROLLOUTS_QUEUED_PER_ACTOR:
            epsilon = (ape_x_epsilon(rank, self.settings.num_actors) if self.settings.exploration == "ape_x"
                       else float(dqn.linear_epsilon(received, self.config)))
            self.table[rank]["epsilon"] = epsilon  # the rate of its newest request
            self.in_flight[self.handles[rank].rollout.remote(params_ref, version, epsilon)] = rank

    def gone(self, rank: int, error: Exception) -> RuntimeError:
        return RuntimeError(f"actor {rank} died and Ray will not restart it (restarted {self.table[rank]['restarts']} "
                            f"times, max_restarts={self.settings.max_restarts}): {error}")

    def deadline(self, rank: int) -> float | None:
        """How long actor ``rank`` may go without a rollout now. Between rollouts, actor_deadline_s. Its
        first rollout after a start or restart includes importing JAX and compiling, which a busy
        machine slows: three times the slowest first rollout measured in this run, if longer; none
        before any actor has delivered (a run where no actor delivers at all ends at stall_timeout_s)."""
        limit = self.settings.actor_deadline_s
        if limit is None or self.delivered[rank]:
            return limit
        return max(limit, 3 * max(self.first_rollout_s)) if self.first_rollout_s else None

    def await_restart(self, rank: int, now: float, running: bool) -> None:
        """Actor ``rank``'s process died or was killed: the rollouts still asked of it are written off
        (``running``: it was running one, counted lost), and a ``ready`` call waits for Ray's restart.
        Written off, the rollout queued behind the lost one is not waited for: Ray may report its
        failure after the restarted actor is up and working, where it would read as a second death."""
        for ref in self.asked_of(rank):
            del self.in_flight[ref]
        self.lost += self.per_call if running else 0
        for ref in [ref for ref, asked in self.restarting.items() if asked == rank]:
            del self.restarting[ref]
        self.restarting[self.handles[rank].ready.remote()] = rank
        self.last_heard[rank], self.delivered[rank] = now, False  # its deadline now runs from this death

    def silence(self, now: float) -> None:
        """Kill, for Ray to restart, every actor past its deadline: a process that is alive but
        stopped, hung or starved never fails its rollout by itself. A restart that has not answered
        by the deadline is killed again. An actor whose rollout is back, waiting while the learner was
        busy elsewhere (an update burst, a checkpoint, on_log), is not silent."""
        from tqdm import tqdm

        for rank, heard in enumerate(self.last_heard):
            limit = self.deadline(rank)
            if limit is None or now - heard <= limit:
                continue
            asked_of_it = self.asked_of(rank)
            if every_ready(asked_of_it, self._ray.wait, timeout_s=0):  # back, and waiting for the learner
                continue
            tqdm.write(f"labcore: actor {rank} (pid {self.table[rank]['pid'] or 'not yet known'}) delivered no rollout "
                       f"for {now - heard:.0f} s: killed, for Ray to restart it", file=sys.stderr)  # above the bar
            self.table[rank]["silent_restarts"] += 1
            self._ray.kill(self.handles[rank], no_restart=False)
            self.await_restart(rank, now, running=bool(asked_of_it))  # none asked: a restart that never answered

    def back(self, ref: Any) -> tuple[int, dict[str, Any] | None, bool]:
        """(rank, rollout or None, whether the actor is up) for one of ``in_flight`` or ``restarting`` that is
        back. A restarted actor that answers is up (asked for work by the caller); a rollout whose actor died
        is written off with the rollouts queued behind it (``await_restart``); an actor Ray will not restart
        again stops the run (RuntimeError naming it)."""
        if ref in self.restarting:  # is the restarted actor up?
            rank = self.restarting.pop(ref)
            try:
                self._ray.get(ref)
            except self.ActorDiedError as error:
                raise self.gone(rank, error) from error
            except self.RayActorError:  # still restarting
                self.restarting[self.handles[rank].ready.remote()] = rank
                return rank, None, False
            # restarts are counted when its first rollout arrives (a new pid); its deadline runs from its restart
            self.last_heard[rank], self.delivered[rank] = time.perf_counter(), False
            return rank, None, True
        rank = self.in_flight.pop(ref)
        try:
            out = self._ray.get(ref)
        except self.ActorDiedError as error:
            raise self.gone(rank, error) from error
        except self.RayActorError:
            # The actor's process died. The rollout it was running is lost; the one queued
            # behind it never ran (written off with it). Ray is restarting the actor.
            self.await_restart(rank, time.perf_counter(), running=True)
            return rank, None, False
        arrival = time.perf_counter()
        if not self.delivered[rank]:
            self.first_rollout_s.append(arrival - self.last_heard[rank])
        self.last_heard[rank], self.delivered[rank] = arrival, True
        entry = self.table[rank]
        if entry["pid"] is not None and entry["pid"] != out["pid"]:
            entry["restarts"] += 1  # a new process for this actor: Ray restarted it
        entry.update(node_id=out["node_id"], pid=out["pid"])
        entry["transitions"] += len(out["actions"])
        return rank, out, True

    def counts(self) -> dict[str, int]:
        return {"transitions_lost": self.lost, "actor_restarts": sum(a["restarts"] for a in self.table),
                "silent_restarts": sum(a["silent_restarts"] for a in self.table)}
