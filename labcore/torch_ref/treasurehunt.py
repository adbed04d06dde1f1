"""Treasurehunt as sorrel builds it: entity objects on a two-layer grid, agents stepped in Python.

This is the object-style reference world of the IQN port (numpy only, no torch and no jax):
every cell of a [H, W, 2] object array holds an entity (``Wall``, ``Sand``, ``Empty``, ``Gem``
or an ``Agent``), each with a ``kind``, a ``value`` and a ``passable`` flag; layer 0 is the
bottom (Sand inside, Wall on the border), layer 1 the top (Empty, Gem or Agent inside, Wall on
the border). Observations and moves are computed cell by cell and agent by agent with plain
Python loops, deliberately: the vectorised JAX world (``labcore.envs.treasurehunt``) is tested
against this one, so agreement is evidence rather than the same code run twice.

The rules and the observation layout are those of ``labcore.envs.treasurehunt`` (read its module
docstring). One turn, driven by the caller:

    world.spawn_gems(uniforms)                               # 1. spawn
    obs = [world.observe(i) for i in range(n_agents)]        # 2. every agent observes, before any move
    actions = [choose(o) for o in obs]                       # 3. act
    rewards = [world.move(i, a) for i, a in enumerate(actions)]  # 4. move in index order

Step 2 is the port's deliberate rule: sorrel itself observes each agent right before it moves;
all run modes observe once per turn so that acting can be vmapped over agents in JAX, and this
world is driven the same way so every mode plays the identical game.
"""

from __future__ import annotations

import numpy as np

# Kinds: the same numbers as labcore.envs.treasurehunt, also the observation channels.
EMPTY, WALL, SAND, GEM, AGENT = 0, 1, 2, 3, 4
N_KINDS = 5
ACTIONS = ("up", "down", "left", "right")
MOVES = {0: (-1, 0), 1: (1, 0), 2: (0, -1), 3: (0, 1)}  # action -> (dy, dx)


class Entity:
    """Something that occupies one cell of one layer."""

    kind: int = EMPTY
    value: float = 0.0  # reward for an agent that tries to step onto it
    passable: bool = True

    def __repr__(self) -> str:
        return type(self).__name__


class Empty(Entity):
    kind, value, passable = EMPTY, 0.0, True


class Sand(Entity):
    kind, value, passable = SAND, 0.0, True


class Wall(Entity):
    kind, passable = WALL, False

    def __init__(self, value: float) -> None:
        self.value = value


class Gem(Entity):
    kind, passable = GEM, True

    def __init__(self, value: float) -> None:
        self.value = value


class Agent(Entity):
    """An agent stands on the top layer; another agent stepping onto it gets 0 and is blocked."""

    kind, value, passable = AGENT, 0.0, False

    def __init__(self, index: int, location: tuple[int, int]) -> None:
        self.index = index
        self.location = location  # (y, x)

    def __repr__(self) -> str:
        return f"Agent({self.index} at {self.location})"


class TreasurehuntWorld:
    """The world: ``grid`` [H, W, 2] of entity objects (layer 0 bottom, layer 1 top), ``agents``."""

    n_actions = len(ACTIONS)

    def __init__(
        self,
        height: int = 10,
        width: int = 10,
        n_agents: int = 5,
        gem_value: float = 10.0,
        wall_value: float = -1.0,
        spawn_prob: float = 0.02,
        vision_radius: int = 2,
        max_turns: int = 50,
        seed: int = 0,
    ) -> None:
        if height < 3 or width < 3:
            raise ValueError(f"height and width must be >= 3 (a wall border around an interior), got {height} x {width}")
        if not 1 <= n_agents <= (height - 2) * (width - 2):
            raise ValueError(f"n_agents must be in [1, {(height - 2) * (width - 2)}], got {n_agents}")
        if not 0.0 <= spawn_prob <= 1.0:
            raise ValueError(f"spawn_prob must be in [0, 1], got {spawn_prob}")
        if vision_radius < 0:
            raise ValueError(f"vision_radius must be >= 0, got {vision_radius}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.height, self.width, self.n_agents = height, width, n_agents
        self.gem_value, self.wall_value, self.spawn_prob = gem_value, wall_value, spawn_prob
        self.vision_radius, self.max_turns = vision_radius, max_turns
        self.obs_size = (2 * vision_radius + 1) ** 2 * N_KINDS
        self.rng = np.random.default_rng(seed)
        self.grid = np.empty((height, width, 2), dtype=object)
        self.agents: list[Agent] = []
        self.reset()

    def is_border(self, y: int, x: int) -> bool:
        return y == 0 or x == 0 or y == self.height - 1 or x == self.width - 1

    def reset(self, agent_positions: np.ndarray | None = None) -> None:
        """Rebuild the map (no gems) and place the agents at ``agent_positions`` int[n, 2] (y, x),
        or on distinct random interior cells drawn from this world's generator."""
        for y in range(self.height):
            for x in range(self.width):
                if self.is_border(y, x):
                    self.grid[y, x, 0] = Wall(self.wall_value)
                    self.grid[y, x, 1] = Wall(self.wall_value)
                else:
                    self.grid[y, x, 0] = Sand()
                    self.grid[y, x, 1] = Empty()
        if agent_positions is None:
            interior = [(y, x) for y in range(1, self.height - 1) for x in range(1, self.width - 1)]
            chosen = self.rng.choice(len(interior), size=self.n_agents, replace=False)
            agent_positions = np.array([interior[i] for i in chosen])
        agent_positions = np.asarray(agent_positions)
        if agent_positions.shape != (self.n_agents, 2):
            raise ValueError(f"agent_positions must have shape ({self.n_agents}, 2), got {agent_positions.shape}")
        self.agents = []
        for index, (y, x) in enumerate(agent_positions.tolist()):
            if self.is_border(y, x) or not (0 < y < self.height and 0 < x < self.width):
                raise ValueError(f"agent {index} must start on an interior cell, got {(y, x)}")
            if self.grid[y, x, 1].kind == AGENT:
                raise ValueError(f"agent {index} starts on a cell already taken: {(y, x)}")
            agent = Agent(index, (y, x))
            self.grid[y, x, 1] = agent
            self.agents.append(agent)

    def spawn_gems(self, uniforms: np.ndarray | None = None) -> None:
        """Each Empty top cell with uniforms[y, x] < spawn_prob becomes a Gem. uniforms: [H, W].

        Given draws are compared in their own dtype (numpy promotion keeps a float32 array
        float32 against a Python float), so float32 draws spawn exactly as in the JAX world.
        """
        if uniforms is None:
            uniforms = self.rng.random((self.height, self.width))
        uniforms = np.asarray(uniforms)
        for y in range(self.height):
            for x in range(self.width):
                if self.grid[y, x, 1].kind == EMPTY and uniforms[y, x] < self.spawn_prob:
                    self.grid[y, x, 1] = Gem(self.gem_value)

    def observe(self, agent: int) -> np.ndarray:
        """f32[obs_size]: the agent's (2r+1) x (2r+1) window, one-hot kinds summed over both layers,
        EMPTY as zeros, outside the map as one Wall; (dy, dx, channel) C order."""
        r = self.vision_radius
        side = 2 * r + 1
        window = np.zeros((side, side, N_KINDS), np.float32)
        cy, cx = self.agents[agent].location
        for dy in range(side):
            for dx in range(side):
                y, x = cy + dy - r, cx + dx - r
                if not (0 <= y < self.height and 0 <= x < self.width):
                    window[dy, dx, WALL] += 1.0
                    continue
                for layer in range(2):
                    kind = self.grid[y, x, layer].kind
                    if kind != EMPTY:
                        window[dy, dx, kind] += 1.0
        return window.reshape(-1)

    def move(self, agent: int, action: int) -> float:
        """Try to move ``agent`` one cell; the reward is the value of what lies on the target's top
        layer. Moves onto Empty or Gem cells (collecting the gem); Walls and Agents block."""
        if action not in MOVES:
            raise ValueError(f"action must be in 0..{len(MOVES) - 1} ({', '.join(ACTIONS)}), got {action}")
        mover = self.agents[agent]
        y, x = mover.location
        dy, dx = MOVES[action]
        ty, tx = y + dy, x + dx
        target = self.grid[ty, tx, 1]
        reward = float(target.value)
        if target.passable:
            self.grid[y, x, 1] = Empty()
            self.grid[ty, tx, 1] = mover  # a collected Gem is replaced, leaving Empty once vacated
            mover.location = (ty, tx)
        return reward

    def agent_positions(self) -> np.ndarray:
        """int[n_agents, 2]: (y, x) of each agent."""
        return np.array([agent.location for agent in self.agents], dtype=np.int64)

    def gems_on_map(self) -> int:
        return sum(1 for y in range(self.height) for x in range(self.width) if self.grid[y, x, 1].kind == GEM)
