"""Every lesson in one ordered list, and the tables and sections written from it.

``LESSONS`` holds, for each notebook ``notebooks/<stem>.ipynb`` in lesson order, what the pages say
about it: its title, what it teaches, the Colab runtime it wants, the lessons it needs first, whether
it is optional, the exercise a reader writes, its section of Start here, and the API its rendered page
links to (``lesson_api.py`` checks those links). From it this script writes, between their markers:

* the README's table of notebooks, with the Colab badges (``README.md``);
* the Colab page's table (``colab/README.md``);
* Start here's map of the lessons and its section on each (``docs/start-here.md``).

The badges open each notebook at the repository and ref that ``colab/setup_cell.py`` installs
labcore from (``colab/cell.py`` keeps the notebooks' first cells in step with it). Adding a lesson
is its notebook, its folder ``labcore/course/lessons/nb<stem>/`` and its entry here; then

    python docs/tooling/lesson_index.py           # write the tables and sections
    python docs/tooling/lesson_index.py --check   # exit 1 and name what is out of step (the tests run this)
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import re
import sys
import textwrap

import site_facts  # beside this file: its folder is on the path wherever it is imported

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK_URL = "https://github.com/labcore-rl/labcore/blob/main/notebooks/"  # where Start here links each notebook
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"


def _text(block: str) -> str:
    return textwrap.dedent(block).strip()


@dataclasses.dataclass(frozen=True)
class Lesson:
    """One lesson, as the README, the Colab page and Start here describe it."""

    stem: str  # notebooks/<stem>.ipynb: "NN_topic"
    title: str  # the short title every table and Start here's section heading use
    teaches: str  # the README's "what it teaches"
    needs: str  # Start here: what to read first
    optional: bool  # Start here: a branch a reader may skip
    writes: str  # Start here: the algorithm (or exercises) the reader writes
    about: str  # Start here's section, after the link to the notebook (Markdown, MyST roles allowed)
    api: tuple[tuple[str, str, str], ...]  # (label, dotted.path, role) for the lesson page's header
    colab: str = ""  # the Colab page's advice on the runtime ("any runtime"), if any

    @property
    def number(self) -> str:
        return self.stem[:2]

    @property
    def anchor(self) -> str:
        """The anchor MyST gives Start here's heading of this lesson (``myst_parser.slugs.github_slugify``'s
        rule: lower case, every character but word characters, CJK ideographs, hyphens and spaces dropped,
        spaces made hyphens)."""
        return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", self.title.lower()).replace(" ", "-")


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        '00_jax_primitives', 'JAX primitives',
        teaches='`jax.numpy`, PRNG keys, `grad`, `jit`, `vmap`, pytrees, first debugging tools',
        needs='Python, NumPy {cite:p}`harris2020array`; PyTorch helps', optional=False, writes='(six warm-ups)',
        about=_text("""
            `jax.numpy` vs NumPy, immutability and `.at[]`, PRNG keys (`split`, `fold_in`, why a reused key is
            a bug), `grad` / `value_and_grad`, `jit` (tracing, static args, recompilation, side effects, honest
            timing), `vmap`, pytrees, `jax.debug.print` / `disable_jit` / `debug_nans`
            {cite:p}`bradbury2018jax`; six checked exercises. Needs nothing but Python and NumPy; no
            accelerator.
        """),
        api=(
            ('labcore.devices', 'labcore.devices', 'mod'),
            ('devices.report', 'labcore.devices.report', 'func'),
            ('labcore.tools.doctor', 'labcore.tools.doctor', 'mod'),
            ('benchmarking.time_call', 'labcore.tools.benchmarking.time_call', 'func'),
            ('labcore.compile_cache', 'labcore.compile_cache', 'mod'),
            ('labcore.course.primitives', 'labcore.course.primitives', 'mod'),
            ('labcore.budget', 'labcore.budget', 'func'),
            ('exercises.check', 'labcore.course.exercises.checking.check', 'func'),
        ),
    ),
    Lesson(
        '01_haiku_dqn', 'A Haiku DQN, CartPole to Breakout',
        teaches='Haiku, optax, a functional replay, the jitted DQN update (you write it), Atari',
        needs='00', optional=False, writes='`dqn_update`',
        about=_text("""
            Haiku {cite:p}`hennigan2020haiku` `init`/`apply` and parameter pytrees, optax
            {cite:p}`deepmind2020jax`, a functional replay buffer, epsilon-greedy, Huber {cite:p}`huber1964robust` vs squared TD loss,
            target network; **labcore's `make_loss` and `make_update` read from its source** beside the PyTorch
            they replace, then **you write the jitted DQN update** (checked against labcore's, five classic
            mistakes named); trains CartPole {cite:p}`barto1983neuronlike`, then Breakout {cite:p}`bellemare2013arcade` with the Nature
            preprocessing {cite:p}`mnih2015human` and a frame-once replay, orbax {cite:p}`orbax` checkpoint, reload, evaluation;
            four checked exercises. Needs 00. Results: [DQN](results/dqn.md).
        """),
        api=(
            ('DQNConfig', 'labcore.agents.dqn.config.DQNConfig', 'class'),
            ('dqn.core.make_update', 'labcore.agents.dqn.core.make_update', 'func'),
            ('dqn.core.select_action', 'labcore.agents.dqn.core.select_action', 'func'),
            ('dqn.host_loop.train', 'labcore.agents.dqn.host_loop.train', 'func'),
            ('dqn.host_loop.load_checkpoint', 'labcore.agents.dqn.host_loop.load_checkpoint', 'func'),
            ('dqn.host_loop.play', 'labcore.agents.dqn.host_loop.play', 'func'),
            ('dqn.host_loop.evaluate', 'labcore.agents.dqn.host_loop.evaluate', 'func'),
            ('make_q_network', 'labcore.nets.q_networks.make_q_network', 'func'),
            ('labcore.replay', 'labcore.replay', 'mod'),
            ('dqn.frame_replay', 'labcore.agents.dqn.frame_replay', 'mod'),
            ('AtariSettings', 'labcore.envs.ale_vector.AtariSettings', 'class'),
            ('losses.huber_loss', 'labcore.losses.huber_loss', 'func'),
            ('plot_metrics', 'labcore.logging.plot_metrics', 'func'),
        ),
    ),
    Lesson(
        '02_flax_nnx', 'Flax NNX for PyTorch users',
        teaches='`torch.nn` beside `nnx.Module`, NNX training, split/merge inside `jit`, `scan` and `vmap`, one Q-network in Haiku, Linen and NNX, reading PureJaxRL',
        colab='any runtime',
        needs='00, 01', optional=False, writes='`nnx_dqn_train_step`, `noisy_linear_nnx`',
        about=_text("""
            the network library of labcore's PPO and IQN, Flax NNX {cite:p}`heek2024flax`, beside `torch.nn`:
            **a `torch.nn.Module` and an `nnx.Module` line by line**, `nnx.Rngs` beside the global generator,
            PyTorch weights copied in and the outputs asserted equal; **training the NNX way**
            (`nnx.Optimizer`, `nnx.value_and_grad`, `nnx.jit`), then **you write DQN's update with an online
            and a target network as NNX modules** (`nnx_dqn_train_step`, a core exercise); **the functional
            form the course runs**:
            `nnx.split` into a graph definition and a parameter pytree, the whole fit as one `lax.scan`, many
            seeds in one `vmap`, and labcore's `Functional` read from its source; **one Q-network in Haiku
            {cite:p}`hennigan2020haiku`, Linen and NNX** with the weights moved between all three; **reading a
            PureJaxRL-style {cite:p}`lu2022discovered` Linen actor-critic** and porting it to labcore's; what
            `nnx.jit` costs per call beside split + `jax.jit`, measured on your device; **you write
            NoisyLinear as an NNX module** (the other core exercise), a PyTorch checkpoint into NNX and an NNX
            model trained inside one `lax.scan`; four checked exercises. Needs 00 and 01.
        """),
        api=(
            ('nets.functional.Functional', 'labcore.nets.functional.Functional', 'class'),
            ('nets.actor_critic', 'labcore.nets.actor_critic', 'mod'),
            ('NoisyLinear', 'labcore.nets.noisy.NoisyLinear', 'class'),
            ('nets.q_networks', 'labcore.nets.q_networks', 'mod'),
        ),
    ),
    Lesson(
        '03_jit_scan_vmap', 'jit, scan and vmap',
        teaches='the whole DQN as one `lax.scan`, then vmapped over envs and 1-256 seeds',
        needs='00, 01', optional=False, writes='`dqn_scan_step`',
        about=_text("""
            tracing, static arguments and recompilation, side effects, donation, the DQN update without and
            with jit; `lax.scan` against a Python `for` under jit; the whole DQN (gymnax
            {cite:p}`lange2022gymnax` env, acting, replay, updates) as one `lax.scan`, **its body read from
            labcore's source** beside the PyTorch loop it replaces, against the host loop; **you write DQN's scan
            step** (act, store, learn under `lax.cond`, checked against labcore's jitted DQN) and a training loop
            as a `lax.scan`; vmap for batching, per-example gradients, 1,000 envs and whole training runs over
            1-256 seeds; four checked exercises. Needs 00 and 01 (it compiles notebook 01's DQN). Results:
            [the fully jitted DQN over seeds](results/dqn.md).
        """),
        api=(
            ('DQNConfig', 'labcore.agents.dqn.config.DQNConfig', 'class'),
            ('dqn.scan.make_train', 'labcore.agents.dqn.scan.make_train', 'func'),
            ('dqn.scan.make_parts', 'labcore.agents.dqn.scan.make_parts', 'func'),
            ('dqn.host_loop.train', 'labcore.agents.dqn.host_loop.train', 'func'),
            ('dqn.host_loop.load_checkpoint', 'labcore.agents.dqn.host_loop.load_checkpoint', 'func'),
            ('dqn.scan.evaluate', 'labcore.agents.dqn.scan.evaluate', 'func'),
            ('dqn.scan.make_evaluate_run', 'labcore.agents.dqn.scan.make_evaluate_run', 'func'),
            ('dqn.scan.episode_return_curve', 'labcore.agents.dqn.scan.episode_return_curve', 'func'),
            ('envs.make_jax_env', 'labcore.envs.make_jax_env', 'func'),
            ('labcore.replay', 'labcore.replay', 'mod'),
            ('labcore.tools.introspection', 'labcore.tools.introspection', 'mod'),
            ('labcore.compile_cache', 'labcore.compile_cache', 'mod'),
        ),
    ),
    Lesson(
        '04_many_devices', 'Many devices in one process',
        teaches='data-parallel DQN with `pmap`, `shard_map` and sharded `jit` on 8 CPU devices; the DQN update on every device (you write it)',
        colab='any runtime: it makes 8 CPU devices',
        needs='01, 03', optional=True, writes='`data_parallel_dqn_update`',
        about=_text("""
            one process, 8 simulated CPU devices: data parallelism with `pmap`, then `shard_map` and `jit` over
            `NamedSharding`, each checked equal to one device's update on the whole batch; per-device keys; a
            global array built by you from per-device blocks; **labcore's data-parallel step read beside PyTorch DDP {cite:p}`li2020pytorch`, then written by you**
            (`shard_map_pmean` on a CPU mesh as a warm-up, then the data-parallel DQN update itself, the core
            exercise); synchronous against asynchronous updates; a whole data-parallel DQN run on the 8 devices;
            three checked exercises. Optional; needs 01 and 03; any runtime (it makes its own CPU devices). Guide: [distributed training](guide/distributed.md).
        """),
        api=(
            ('DQNConfig', 'labcore.agents.dqn.config.DQNConfig', 'class'),
            ('dqn.core.make_update', 'labcore.agents.dqn.core.make_update', 'func'),
            ('dqn.data_parallel', 'labcore.agents.dqn.data_parallel', 'mod'),
            ('dqn.data_parallel.make_shard_map_update', 'labcore.agents.dqn.data_parallel.make_shard_map_update', 'func'),
        ),
    ),
    Lesson(
        '05_many_processes', 'Many processes and machines',
        teaches='`jax.distributed`, a local cluster, multi-process DQN, a dead worker; actors and a learner on Ray',
        colab='use a CPU runtime',
        needs='04', optional=True, writes='`ape_x_epsilon_greedy` (and the bookkeeping of a multi-process run)',
        about=_text("""
            `jax.distributed`, global and local devices, a mesh over processes; a 2-process x 2-device cluster
            launched from a cell, data-parallel DQN across processes with parameters checked bit-for-bit
            identical, the same run twice, resume after a restart; a worker killed on purpose and the clean stop;
            **actors and a learner on a two-node Ray cluster** {cite:p}`moritz2018ray` (on loopback): the
            cluster's nodes, each node's transitions, staleness, an actor killed and restarted by Ray while the
            run goes on; what changes on SLURM {cite:p}`yoo2003slurm`, TPU pods, a Ray cluster of machines and
            Colab; five checked exercises: **each Ray actor's exploration, Ape-X's rate of its own for every
            actor** {cite:p}`horgan2018distributed` (the core exercise), the learner's bookkeeping (updates
            owed, versions published, staleness), and a multi-process run's bookkeeping (per-device keys, each
            process's rows, a weighted gradient mean). Optional; needs 04. On Colab,
            use a CPU runtime. Guide: [distributed training](guide/distributed.md); results:
            [distributed scaling](results/distributed.md).
        """),
        api=(
            ('DQNConfig', 'labcore.agents.dqn.config.DQNConfig', 'class'),
            ('dqn.multi_process.train', 'labcore.agents.dqn.multi_process.train', 'func'),
            ('dqn.actor_learner.train', 'labcore.agents.dqn.actor_learner.train', 'func'),
            ('checkpoint.restore', 'labcore.checkpoint.restore', 'func'),
            ('dqn.scan.make_evaluate', 'labcore.agents.dqn.scan.make_evaluate', 'func'),
            ('labcore.distributed', 'labcore.distributed', 'mod'),
            ('distributed.launch', 'labcore.distributed.launch', 'func'),
            ('labcore.ray_cluster', 'labcore.ray_cluster', 'mod'),
        ),
    ),
    Lesson(
        '06_iqn_port', 'A multi-agent IQN, PyTorch to JAX',
        teaches='porting a PyTorch learner habit by habit, with parity checked to 1e-5',
        needs='00, 01, 02', optional=True, writes='`iqn_train_step`',
        about=_text("""
            sorrel's {cite:p}`gelpi2025sorrel` Treasurehunt twice (object-style Python world and pure-JAX world: identical epochs, timed);
            NoisyLinear {cite:p}`fortunato2018noisy`, IQN {cite:p}`dabney2018implicit`, the frame buffer and the
            quantile Huber loss, **PyTorch beside Flax NNX {cite:p}`heek2024flax`, both read from labcore's source**;
            **the train step habit by habit** (`zero_grad`/`backward`/`clip_grad_norm_`/`step` vs
            `value_and_grad` and an optax chain, in-place soft update vs `tree_map`, module noise vs
            a noise key passed to the call); live parity of the loss, every gradient leaf and one clipped Adam
            {cite:p}`kingma2015adam` step (< 1e-5), vmap over agents; four run modes with learning curves, worlds
            in one vmap, faithful vs fixed; **you write the port's whole update** (quantile targets, loss, clipped
            Adam, soft target update, checked against labcore's `train_step`), the NoisyLinear forward, the
            quantile Huber loss and the ring buffer's read; the port's eighteen pitfalls are on the IQN results page (audited in tests). Optional; needs 00, 01 and 02.
            Results: [IQN](results/iqn.md).
        """),
        api=(
            ('IQNConfig', 'labcore.agents.iqn.config.IQNConfig', 'class'),
            ('IQNRunConfig', 'labcore.agents.iqn.run_config.IQNRunConfig', 'class'),
            ('iqn.core.train_step', 'labcore.agents.iqn.core.train_step', 'func'),
            ('iqn.programs.fused_epoch', 'labcore.agents.iqn.programs.fused_epoch', 'func'),
            ('iqn.run.train', 'labcore.agents.iqn.run.train', 'func'),
            ('iqn.run.load_checkpoint', 'labcore.agents.iqn.run.load_checkpoint', 'func'),
            ('iqn.run.evaluate', 'labcore.agents.iqn.run.evaluate', 'func'),
            ('iqn.frame_buffer', 'labcore.agents.iqn.frame_buffer', 'mod'),
            ('iqn.runners', 'labcore.agents.iqn.runners', 'mod'),
            ('nets.iqn.IQN', 'labcore.nets.iqn.IQN', 'class'),
            ('NoisyLinear', 'labcore.nets.noisy.NoisyLinear', 'class'),
            ('nets.functional.Functional', 'labcore.nets.functional.Functional', 'class'),
            ('envs.treasurehunt', 'labcore.envs.treasurehunt', 'mod'),
            ('torch_ref.irainbow', 'labcore.torch_ref.irainbow', 'mod'),
        ),
    ),
    Lesson(
        '07_masked_ppo', 'Action-masked PPO',
        teaches='masked PPO read piece by piece, one `jax.jit`, masked vs unmasked, many seeds',
        needs='00, 02, 03', optional=False, writes='`ppo_clipped_loss`, `ppo_update_epoch`',
        about=_text("""
            the Vault grid game (13 actions of three kinds, masks that change with walls, items, energy and
            cooldowns) rendered beside its mask; masked softmax with -1e9 and masked entropy; **PPO
            {cite:p}`schulman2017proximal` read from labcore's source piece by piece** (rollout scan, GAE
            {cite:p}`schulman2016high`, masked clipped loss, shuffled-minibatch epochs, the update) beside
            CleanRL's PyTorch {cite:p}`huang2022cleanrl`; **you write the masked clipped loss and an update
            epoch**; PPO as one `jax.jit` on CartPole, then on Vault masked vs unmasked vs random play; 4-16
            seeds in one `vmap` (the PureJaxRL style {cite:p}`lu2022discovered`); the run driver's results
            folder, orbax checkpoint, reload and a greedy episode; four checked exercises. Needs 00, 02 and 03.
            Results: [PPO](results/ppo.md).
        """),
        api=(
            ('PPOConfig', 'labcore.agents.ppo.config.PPOConfig', 'class'),
            ('ppo.core.make_train', 'labcore.agents.ppo.core.make_train', 'func'),
            ('ppo.core.make_ppo', 'labcore.agents.ppo.core.make_ppo', 'func'),
            ('ppo.run.train', 'labcore.agents.ppo.run.train', 'func'),
            ('ppo.run.load_checkpoint', 'labcore.agents.ppo.run.load_checkpoint', 'func'),
            ('ppo.run.evaluate', 'labcore.agents.ppo.run.evaluate', 'func'),
            ('ppo.core.policy_returns', 'labcore.agents.ppo.core.policy_returns', 'func'),
            ('ppo.core.masked_policy', 'labcore.agents.ppo.core.masked_policy', 'func'),
            ('labcore.evaluation', 'labcore.evaluation', 'mod'),
            ('Vault', 'labcore.envs.vault.Vault', 'class'),
            ('envs.make_masked_env', 'labcore.envs.make_masked_env', 'func'),
            ('labcore.losses', 'labcore.losses', 'mod'),
            ('devices.auto_tune', 'labcore.devices.auto_tune', 'func'),
        ),
    ),
    Lesson(
        '08_accelerators', 'GPUs, TPUs and Colab',
        teaches='runtimes, memory, precision, bfloat16, sharding, per-device timings',
        colab='any runtime: CPU, T4 GPU or TPU v5e-1',
        needs='03, 07', optional=True, writes='(precision and memory)',
        about=_text("""
            choosing a Colab runtime (CPU, T4, TPU v5e-1) and what `jax.devices()` / `doctor` print; installing
            labcore without replacing Colab's jax; GPU preallocation, `memory_analysis()` of PPO, host memory of
            a compile, replay memory by dtype; bfloat16 passes on TPU and TF32 on Ampere,
            `default_matmul_precision`, the error measured; bfloat16 vs float32 PPO; one sharded update on the
            kernel's devices and on 8 simulated ones; `auto_tune` per device class; a measured PPO/DQN update
            timing table, dispatch vs compute with `cost_analysis`, vmapped agents' cost, host-device transfers;
            troubleshooting with real messages; four checked exercises. Optional; needs 03 and 07; any runtime.
            Guide: [GPUs, TPUs and Colab](guide/accelerators.md); results:
            [per-device timings](results/devices.md).
        """),
        api=(
            ('labcore.devices', 'labcore.devices', 'mod'),
            ('devices.auto_tune', 'labcore.devices.auto_tune', 'func'),
            ('devices.default_matmul_precision', 'labcore.devices.default_matmul_precision', 'func'),
            ('devices.matmul_error', 'labcore.devices.matmul_error', 'func'),
            ('labcore.tools.benchmarking', 'labcore.tools.benchmarking', 'mod'),
            ('introspection.compiled_cost', 'labcore.tools.introspection.compiled_cost', 'func'),
            ('labcore.compile_cache', 'labcore.compile_cache', 'mod'),
            ('dqn.data_parallel', 'labcore.agents.dqn.data_parallel', 'mod'),
            ('ActorCritic', 'labcore.nets.actor_critic.ActorCritic', 'class'),
        ),
    ),
    Lesson(
        '09_gflownet_hybrid', 'GFlowNets, PyTorch to JAX',
        teaches='five GFlowNet losses, a measured migration torch -> hybrid -> jax',
        needs='00; 07 helps', optional=True, writes='`trajectory_balance`',
        about=_text("""
            HyperGrid {cite:p}`bengio2021flow` reward and target as pictures, L1 (sum form) and JSD {cite:p}`lin1991divergence`; a PyTorch
            GFlowNet agent; **TB, SubTB and the gradient step read from labcore's source beside the PyTorch
            loops** (padding and masks, masked `log_softmax`, no host reads, `value_and_grad`), all five losses
            (TB {cite:p}`malkin2022trajectory`, DB {cite:p}`bengio2023gflownet`, FL {cite:p}`pan2023better`,
            SubTB {cite:p}`madan2023learning`, FM {cite:p}`bengio2021flow`) PyTorch = JAX on one batch; **you
            write the trajectory balance loss** (six classic mistakes named); the migration torch -> hybrid ->
            jax_policy -> jax with a per-phase time profile; L1 vs iterations for every loss, 8 seeds in one
            vmap; learned vs target distribution; three checked exercises. Optional; needs 00 (notebook 07's
            one-jitted-run style helps). Results: [GFlowNets](results/gflownet.md).
        """),
        api=(
            ('GFlowNetConfig', 'labcore.agents.gflownet.config.GFlowNetConfig', 'class'),
            ('gflownet.core.make_train', 'labcore.agents.gflownet.core.make_train', 'func'),
            ('gflownet.core.make_gradient_step', 'labcore.agents.gflownet.core.make_gradient_step', 'func'),
            ('gflownet.trainers.train', 'labcore.agents.gflownet.trainers.train', 'func'),
            ('gflownet.run.train', 'labcore.agents.gflownet.run.train', 'func'),
            ('hypergrid.l1_distance', 'labcore.envs.hypergrid.l1_distance', 'func'),
            ('hypergrid.l1_curve', 'labcore.envs.hypergrid.l1_curve', 'func'),
            ('hypergrid.target_distribution', 'labcore.envs.hypergrid.target_distribution', 'func'),
            ('gflownet.core', 'labcore.agents.gflownet.core', 'mod'),
            ('envs.hypergrid', 'labcore.envs.hypergrid', 'mod'),
            ('HyperGridEnv', 'labcore.envs.hypergrid_env.HyperGridEnv', 'class'),
            ('torch_ref.gflownet', 'labcore.torch_ref.gflownet', 'mod'),
        ),
    ),
    Lesson(
        '10_debugging', 'Debugging',
        teaches="JAX's errors by name, silent bugs (recompiles, reused keys, NaNs, broadcasting), seven find-the-bug drills",
        colab='any runtime',
        needs='03, 07', optional=True, writes='(seven find-the-bug drills)',
        about=_text("""
            JAX's errors by name (`ConcretizationTypeError`, `TracerBoolConversionError`,
            `UnexpectedTracerError`, `NonConcreteBooleanIndexError`, `vmap` size mismatches and the silent
            same-shape case), each provoked on RL code and fixed; the silent problems: a recompile on every call
            (`jax.log_compiles`, `jax_explain_cache_misses`, a compile counter), a reused PRNG key, a missing
            `stop_gradient` (same loss, other gradient), NaNs inside `jit` and `scan` (`jax_debug_nans`,
            `checkify` float and index checks), chex against broadcasting; **seven find-the-bug exercises**
            (reused key, target without `stop_gradient`, gather on the wrong axis, GAE off by one, mask after the
            softmax, bootstrap past termination, log of an underflowing probability). Optional; needs 03 and 07;
            any runtime.
        """),
        api=(
            ('labcore.tools.introspection', 'labcore.tools.introspection', 'mod'),
            ('CompileCounter', 'labcore.tools.introspection.CompileCounter', 'class'),
            ('lessons.nb10_debugging.debugging_drills', 'labcore.course.lessons.nb10_debugging.debugging_drills', 'mod'),
        ),
    ),
    Lesson(
        '11_profiling', 'Profiling and TensorBoard',
        teaches='the profiler read back and in TensorBoard, device memory, honest timing, the compilation cache, metrics in TensorBoard',
        colab='any runtime',
        needs='03, 07', optional=True, writes='(timing, traces, curves)',
        about=_text("""
            `jax.profiler.trace` of the DQN scan and a PPO update read back in Python (top operations, host vs
            device time) and opened in TensorBoard's {cite:p}`tensorboard2017` profiler, the device memory profile,
            asynchronous dispatch, compile vs run time and the persistent compilation cache across processes; a
            PPO run's TensorBoard scalars read back; three checked exercises (an honest timer judged on a
            simulated device, a trace's top operations, a curve from a run's rows). Optional; needs 03 and 07;
            any runtime. Guide: [run folders, TensorBoard and the compilation cache](guide/runs.md).
        """),
        api=(
            ('labcore.tools.profiling', 'labcore.tools.profiling', 'mod'),
            ('profiling.trace', 'labcore.tools.profiling.trace', 'func'),
            ('profiling.read_trace', 'labcore.tools.profiling.read_trace', 'func'),
            ('profiling.compile_and_run_seconds', 'labcore.tools.profiling.compile_and_run_seconds', 'func'),
            ('labcore.tools.memory_profile', 'labcore.tools.memory_profile', 'mod'),
            ('labcore.compile_cache', 'labcore.compile_cache', 'mod'),
            ('logging.read_metrics', 'labcore.logging.read_metrics', 'func'),
            ('logging.read_tensorboard_scalars', 'labcore.logging.read_tensorboard_scalars', 'func'),
            ('time_call', 'labcore.tools.benchmarking.time_call', 'func'),
        ),
    ),
    Lesson(
        '12_pqn', 'PQN: DQN without replay or target network',
        teaches='Q(lambda), LayerNorm, PQN beside DQN on MinAtar, PQN from pixels on Atari Breakout',
        colab='any runtime',
        needs='01, 03; 07 helps', optional=False, writes='`q_lambda_targets`, `pqn_td_loss`, `pqn_update`',
        about=_text("""
            what DQN's replay buffer and target network are for and what PQN
            {cite:p}`gallici2025simplifying` puts in their place (many envs, LayerNorm {cite:p}`ba2016layer`,
            Q(lambda) {cite:p}`peng1996incremental`); **Q(lambda) targets read from labcore's source**, terminal vs time-limit ends, then
            **written by you**, and the lambda-return's weights; **the PQN update read from `make_pqn`**
            (rollout, targets, minibatch epochs), then its TD loss and its update as exercises; PQN on CartPole with and without
            LayerNorm, three seeds vmapped; **PQN beside the jitted DQN on Breakout-MinAtar**
            {cite:p}`young2019minatar` against env steps and wall time, with the MinAtar paper's published DQN
            curve; **PQN from pixels on Atari Breakout** {cite:p}`bellemare2013arcade` (ALE's vector env stepped
            from inside the compiled program), recorded runs of three seeds beside Dopamine's {cite:p}`castro2018dopamine`
            published agents; four checked exercises. Needs 01 and 03 (notebook 07's PPO loop helps: PQN's loop
            has its shape). Results: [PQN](results/pqn.md), [Atari](results/atari.md).
        """),
        api=(
            ('PQNConfig', 'labcore.agents.pqn.config.PQNConfig', 'class'),
            ('pqn.core.make_train', 'labcore.agents.pqn.core.make_train', 'func'),
            ('pqn.core.make_pqn', 'labcore.agents.pqn.core.make_pqn', 'func'),
            ('pqn.run.train', 'labcore.agents.pqn.run.train', 'func'),
            ('pqn.run.load_checkpoint', 'labcore.agents.pqn.run.load_checkpoint', 'func'),
            ('pqn.run.evaluate', 'labcore.agents.pqn.run.evaluate', 'func'),
            ('losses.q_lambda_targets', 'labcore.losses.q_lambda_targets', 'func'),
            ('MLPQNetwork', 'labcore.nets.q_networks.MLPQNetwork', 'class'),
            ('labcore.course.curves', 'labcore.course.curves', 'mod'),
            ('labcore.course.published', 'labcore.course.published', 'mod'),
        ),
    ),
)

# Each region of a page this script writes lies between these two lines, NAME its marker name.
START_MARK = "<!-- {name}: written by docs/tooling/lesson_index.py -->"
END_MARK = "<!-- end of {name} -->"


def _badge(prefix: str, lesson: Lesson) -> str:
    return f"[![Open In Colab]({BADGE_IMAGE})]({prefix}{lesson.stem}.ipynb)"


def readme_table(lessons: tuple[Lesson, ...], prefix: str) -> str:
    rows = [f"| {lesson.number} | [{lesson.title}](notebooks/{lesson.stem}.ipynb) | {lesson.teaches} | "
            f"{_badge(prefix, lesson)} |" for lesson in lessons]
    return "\n".join(["| # | notebook | what it teaches | Colab |", "|---|---|---|---|", *rows])


def colab_table(lessons: tuple[Lesson, ...], prefix: str) -> str:
    rows = [f"| {lesson.number} | {lesson.title} (`notebooks/{lesson.stem}.ipynb`"
            f"{'; ' + lesson.colab if lesson.colab else ''}) | {_badge(prefix, lesson)} |" for lesson in lessons]
    return "\n".join(["| # | notebook | open |", "|---|---|---|", *rows])


def lesson_map(lessons: tuple[Lesson, ...]) -> str:
    rows = [f"| {lesson.number} | [{lesson.title}](#{lesson.anchor}) ({{doc}}`with outputs <lessons/{lesson.stem}>`) | "
            f"{lesson.needs} | {'yes' if lesson.optional else 'no'} | {lesson.writes} |" for lesson in lessons]
    return "\n".join(["| # | lesson (its section below; its page with outputs) | needs first | optional | "
                      "the algorithm you write |", "|---|---|---|---|---|", *rows])


def lesson_sections(lessons: tuple[Lesson, ...]) -> str:
    return "\n\n".join(f"### {lesson.title}\n\n[`notebooks/{lesson.stem}.ipynb`]({NOTEBOOK_URL}{lesson.stem}.ipynb):\n"
                       f"{lesson.about}" for lesson in lessons)


def regions(lessons: tuple[Lesson, ...] = LESSONS, root: pathlib.Path = REPO_ROOT) -> dict[tuple[str, str], str]:
    """(page, marker name) -> the text written between that page's markers."""
    prefix = site_facts.cell_source(root).badge_prefix()
    return {("README.md", "lessons"): readme_table(lessons, prefix),
            ("colab/README.md", "lessons"): colab_table(lessons, prefix),
            ("docs/start-here.md", "lesson map"): lesson_map(lessons),
            ("docs/start-here.md", "lesson sections"): lesson_sections(lessons)}


def out_of_step(lessons: tuple[Lesson, ...] = LESSONS, root: pathlib.Path = REPO_ROOT, write: bool = False) -> list[str]:
    """Every region that differs from what ``lessons`` says (each page must hold its markers); with
    ``write``, rewrite them."""
    problems = []
    notebooks = sorted(path.stem for path in (root / "notebooks").glob("*.ipynb"))
    if [lesson.stem for lesson in lessons] != notebooks:
        problems.append(f"LESSONS lists {[lesson.stem for lesson in lessons]}, notebooks/ holds {notebooks}")
    for (page, name), text in regions(lessons, root).items():
        start, end = START_MARK.format(name=name), END_MARK.format(name=name)
        page_text = (root / page).read_text()
        if page_text.count(start) != 1 or page_text.count(end) != 1:
            problems.append(f"{page}: needs one {start!r} and one {end!r}")
            continue
        before, rest = page_text.split(start)
        _, after = rest.split(end)
        new_text = f"{before}{start}\n{text}\n{end}{after}"
        if new_text != page_text:
            problems.append(f"{page}: {name} out of step with docs/tooling/lesson_index.py")
            if write:
                (root / page).write_text(new_text)
    return problems


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything is out of step")
    args = parser.parse_args()
    found = out_of_step(write=not args.check)
    print("\n".join(found) or "the lesson tables and sections are in step")
    sys.exit(1 if args.check and found else 0)
