"""Profiling: real traces of the jitted DQN and a PPO update read back, memory profiles, timing pitfalls."""

import gzip
import json
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from labcore.tools import profiling
from labcore.agents.dqn import core as dqn
from labcore.agents.dqn import scan as dqn_scan
from labcore.agents.ppo import core as ppo

MiB = 2**20


def record(log_dir, fn, *args):
    """Compile and run ``fn`` once, then profile a second call: the trace shows running, not compiling."""
    jax.block_until_ready(fn(*args))
    with profiling.trace(log_dir):
        jax.block_until_ready(fn(*args))
    return profiling.read_trace(log_dir)


def heaviest_loop(device: list[profiling.OpTime]) -> profiling.OpTime:
    """The heaviest ``while`` op, checked to be among the five heaviest ops and to be mostly the ops it holds.

    Ranked among five, not first: one op outside the loops that the OS preempts for 10 ms on a
    busy machine can outweigh a loop of a small program, and that says nothing about the program.
    """
    loops = [op for op in device[:5] if op.name.startswith("while")]
    assert loops, device[:5]
    assert loops[0].self_ms < loops[0].total_ms / 2, loops[0]
    return loops[0]


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    """The fully jitted DQN (scan over env steps and updates) on CartPole, a few hundred steps."""
    config = dqn.DQNConfig(total_steps=300, learning_starts=100, buffer_size=200, batch_size=16)
    log_dir = tmp_path_factory.mktemp("dqn_profile")
    return log_dir, record(log_dir, jax.jit(dqn_scan.make_train(config)), jax.random.key(0))


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    """One PPO update on Vault-v0: rollout, GAE, epochs of minibatch steps, all one jitted program."""
    agent = ppo.make_ppo(ppo.PPOConfig(env_id="Vault-v0", num_envs=8, num_steps=16, total_steps=8 * 16 * 2, hidden_size=32))
    run = jax.jit(agent.run, static_argnums=1)
    log_dir = tmp_path_factory.mktemp("ppo_profile")
    return log_dir, record(log_dir, run, agent.init(jax.random.key(0)), 1)


def test_trace_writes_tensorboard_and_perfetto_files(ppo_run):
    log_dir, trace = ppo_run
    (run,) = (log_dir / "plugins" / "profile").iterdir()
    names = sorted(p.name for p in run.iterdir())
    assert "perfetto_trace.json.gz" in names, names
    assert any(n.endswith(".xplane.pb") for n in names) and any(n.endswith(".trace.json.gz") for n in names), names
    assert trace.path == run / "perfetto_trace.json.gz" == profiling.trace_file(log_dir)
    assert profiling.xplane_file(log_dir).parent == run
    # the profiler's own Chrome trace holds the same events (plus metadata Perfetto rejects)
    (chrome,) = run.glob("*.trace.json.gz")
    assert len(profiling.read_trace(chrome).events) == len(trace.events)
    assert "metadata" in json.loads(gzip.decompress(chrome.read_bytes()))


def test_dqn_trace_shows_the_jitted_train_and_its_scan_loops(dqn_run):
    _, trace = dqn_run
    host = [op.name for op in trace.top_operations(50, where="host")]
    assert "PjitFunction(train)" in host, host  # the dispatch of the jitted train(key)
    device = trace.top_operations(1000, where="device")
    # the scans (warm-up, learning) became XLA while loops, which hold the other ops
    loop = heaviest_loop(device)
    # the Q-network's matmuls are in there (XLA:CPU names them dot.N, or dot_*_fusion when fused)
    assert any("dot" in op.name for op in device), [op.name for op in device]
    # every device op names the program it belongs to: the jitted train's is jit_train
    modules = {e.args.get("hlo_module") for e in trace.events if e.kind == "device"}
    assert "jit_train" in modules and None not in modules, modules
    by_op = {e.name: e.args["hlo_module"] for e in trace.events if e.kind == "device"}
    assert by_op[loop.name] == "jit_train"


def test_ppo_update_trace(ppo_run):
    _, trace = ppo_run
    assert "PjitFunction(run)" in [op.name for op in trace.top_operations(50, where="host")]
    device = trace.top_operations(1000, where="device")
    heaviest_loop(device)  # the rollout / epoch / minibatch scans
    assert any("dot" in op.name for op in device)
    assert {e.args["hlo_module"] for e in trace.events if e.kind == "device"} == {"jit_run"}
    # self time never exceeds total time, and counts are events
    for op in device:
        assert 0 <= op.self_ms <= op.total_ms + 1e-6 and op.count >= 1


@pytest.mark.parametrize("which", ["dqn_run", "ppo_run"])
def test_host_vs_device_busy_times(which, request):
    _, trace = request.getfixturevalue(which)
    split = trace.host_vs_device()
    assert 0 < split["host_ms"] <= split["wall_ms"] and 0 < split["device_ms"] <= split["wall_ms"], split
    # a fully jitted program: the host dispatches once and the device does the work
    assert split["device_ms"] > split["host_ms"], split
    # the profiler's own start/stop frames are left out, so the span is the profiled block's
    assert not any(e.name.endswith(" stop_trace") for e in trace.events)
    kinds = {row["thread"]: row for row in trace.threads()}
    assert kinds["python"]["host"] > 0 and sum(row["device"] for row in kinds.values()) > 0
    assert "| operation |" in trace.table(5, "device") and "device busy" in trace._repr_markdown_()


def test_trace_kinds_and_nesting_on_hand_made_traces():
    meta = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 1, "tid": 10, "name": "thread_name", "args": {"name": "python"}},
        {"ph": "M", "pid": 1, "tid": 20, "name": "thread_name", "args": {"name": "tf_XLAPjRtCpuClient/1"}},
    ]
    op = {"hlo_op": "x", "hlo_module": "jit_f"}
    events = [
        # the profiler's stop, inside the context manager's frames: all dropped
        {"ph": "X", "pid": 1, "tid": 10, "ts": 90.0, "dur": 500.0, "name": "$contextlib.py:141 __exit__"},
        {"ph": "X", "pid": 1, "tid": 10, "ts": 91.0, "dur": 499.0, "name": "$profiler.py:271 stop_trace"},
        {"ph": "X", "pid": 1, "tid": 10, "ts": 0.0, "dur": 10.0, "name": "PjitFunction(f)"},
        {"ph": "X", "pid": 1, "tid": 10, "ts": 0.0, "dur": 9.0, "name": "PjitFunction(f)"},  # nested twice, as jax does
        {"ph": "X", "pid": 1, "tid": 10, "ts": 10.0, "dur": 70.0, "name": "CommonPjRtBuffer::Await"},
        {"ph": "X", "pid": 1, "tid": 20, "ts": 5.0, "dur": 60.0, "name": "while.3", "args": op},
        {"ph": "X", "pid": 1, "tid": 20, "ts": 6.0, "dur": 20.0, "name": "dot.1", "args": op},
        {"ph": "X", "pid": 1, "tid": 20, "ts": 30.0, "dur": 20.0, "name": "dot.1", "args": op},
        {"ph": "X", "pid": 1, "tid": 20, "ts": 50.0, "dur": 1.0, "name": "end: dot.1"},
        {"ph": "i", "pid": 1, "tid": 20, "ts": 50.0, "name": "an instant"},
    ]
    trace = profiling.Trace.from_chrome_trace({"traceEvents": meta + events})
    assert len(trace.events) == 7
    assert [(o.name, o.total_ms, o.count, o.self_ms) for o in trace.top_operations(where="device")] == [
        ("while.3", 0.06, 1, pytest.approx(0.019)),  # less the nested ops and the end marker
        ("dot.1", 0.04, 2, 0.04),
    ]
    assert [o.name for o in trace.top_operations(where="device", by="self")] == ["dot.1", "while.3"]
    (pjit,) = [o for o in trace.top_operations(where="host") if o.name == "PjitFunction(f)"]
    assert (pjit.total_ms, pjit.count) == (0.01, 2)  # the nested copy is not counted twice
    assert [o.name for o in trace.top_operations(where="runtime")] == ["end: dot.1"]
    # host busy: dispatch only (the Await is waiting); device busy: the while loop; span 0..80 us
    assert trace.host_vs_device() == pytest.approx({"host_ms": 0.01, "device_ms": 0.06, "wall_ms": 0.08})
    with pytest.raises(ValueError, match="where"):
        trace.top_operations(where="gpu")

    # a GPU trace: the /device: process is the device, whatever the args; host threads are host
    gpu_meta = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 2, "tid": 7, "name": "thread_name", "args": {"name": "tf_XLAGpuClient"}},
    ]
    gpu_events = [
        {"ph": "X", "pid": 1, "tid": 1, "ts": 0.0, "dur": 5.0, "name": "fusion.2"},
        {"ph": "X", "pid": 2, "tid": 7, "ts": 0.0, "dur": 1.0, "name": "launch"},
    ]
    gpu = profiling.Trace.from_chrome_trace({"traceEvents": gpu_meta + gpu_events})
    assert {e.name: e.kind for e in gpu.events} == {"fusion.2": "device", "launch": "host"}


def test_a_trace_and_a_memory_profile_print_one_line_however_many_events():
    """Jupyter saves a displayed object's text view beside its markdown one: it must stay short."""
    event = profiling.TraceEvent("dot.1", 0.0, 1.0, 1, 20, "/host:CPU", "worker", {}, "device")
    trace = profiling.Trace(pathlib.Path("run/trace.json.gz"), (event,) * 100_000)
    assert repr(trace) == "Trace(path='run/trace.json.gz', events=<100,000 events>)"
    memory = profiling.parse_memory_profile(b"")
    assert repr(memory) == "MemoryProfile(0.00 MiB live in 0 samples)"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_xprof_turns_the_xplane_into_trace_viewer_data(dqn_run, tmp_path):
    """TensorBoard's profile plugin (xprof) reads the .xplane.pb the trace wrote."""
    raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data", reason="xprof (TensorBoard's profiler) not installed")
    log_dir, _ = dqn_run
    # a copy: xprof writes its own index files next to the file it reads
    xplane = tmp_path / profiling.xplane_file(log_dir).name
    shutil.copy(profiling.xplane_file(log_dir), xplane)
    tools = raw_to_tool_data.xspace_to_tool_names([str(xplane)])
    assert "trace_viewer@" in tools, tools  # the trace viewer tool the plugin lists
    data, content_type = raw_to_tool_data.xspace_to_tool_data([str(xplane)], "trace_viewer@", {})
    assert content_type == "application/json" and data, (content_type, data)
    names = {event.get("name") for event in json.loads(data)["traceEvents"]}
    assert "PjitFunction(train)" in names and any(str(n).startswith("while") for n in names)


def allocate_four_mib():
    return jnp.ones((1024, 1024), jnp.float32)  # 4 MiB


def test_device_memory_profile_finds_a_known_allocation(tmp_path):
    array = jax.block_until_ready(allocate_four_mib())
    profile = profiling.device_memory_profile()
    assert ("space", "bytes") in profile.sample_types
    assert profile.total_bytes >= 4 * MiB
    ours = [a for a in profile.allocations if "allocate_four_mib" in a.site]
    assert ours and ours[0].kind == "buffer" and ours[0].bytes >= 4 * MiB and ours[0].count >= 1, ours
    assert "cpu" in ours[0].device.lower() and "test_profiling.py" in ours[0].site  # cpu:0 (jax 0.10), TFRT_CPU_0 (0.7)
    assert profile.top(1)[0].bytes >= 4 * MiB and "allocate_four_mib" in profile.table()
    # the saved file is the gzipped pprof that `pprof` reads, with the same allocation in it
    path = profiling.save_memory_profile(tmp_path / "memory.prof")
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    saved = profiling.parse_memory_profile(path.read_bytes())
    assert any("allocate_four_mib" in a.site and a.bytes >= 4 * MiB for a in saved.allocations)
    del array


def _varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number, value):
    """A protobuf field: an int as a varint (wire type 0), bytes as length-delimited (2)."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value % 2**64)  # int64: two's complement
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def test_parse_memory_profile_decodes_a_hand_built_pprof():
    strings = ["", "allocations", "count", "space", "bytes", "kind", "buffer", "device", "cpu:0",
               "inner", "/site-packages/jax/_src/x.py", "make_batch", "/home/me/train.py", "offset"]  # fmt: skip
    s = {text: i for i, text in enumerate(strings)}
    profile = b"".join(
        [
            _field(1, _field(1, s["allocations"]) + _field(2, s["count"])),
            _field(1, _field(1, s["space"]) + _field(2, s["bytes"])),
            # a sample with packed location ids and values, and three labels (one numeric, negative)
            _field(
                2,
                _field(1, _varint(1) + _varint(2))
                + _field(2, _varint(3) + _varint(5 * MiB))
                + _field(3, _field(1, s["kind"]) + _field(2, s["buffer"]))
                + _field(3, _field(1, s["device"]) + _field(2, s["cpu:0"]))
                + _field(3, _field(1, s["offset"]) + _field(3, -7)),
            ),
            # one with unpacked repeated fields (the encoding allows both)
            _field(2, _field(1, 2) + _field(2, 1) + _field(2, 300) + _field(3, _field(1, s["kind"]) + _field(2, s["buffer"]))),
            _field(4, _field(1, 1) + _field(4, _field(1, 1) + _field(2, 12))),
            _field(4, _field(1, 2) + _field(4, _field(1, 2) + _field(2, 40))),
            _field(5, _field(1, 1) + _field(2, s["inner"]) + _field(4, s["/site-packages/jax/_src/x.py"])),
            _field(5, _field(1, 2) + _field(2, s["make_batch"]) + _field(4, s["/home/me/train.py"])),
            *[_field(6, text.encode()) for text in strings],
        ]
    )
    for data in (profile, gzip.compress(profile)):
        decoded = profiling.parse_memory_profile(data, internal_dirs=["/site-packages/jax/"])
        assert decoded.sample_types == (("allocations", "count"), ("space", "bytes"))
        big, small = decoded.allocations
        assert (big.bytes, big.count, big.kind, big.device) == (5 * MiB, 3, "buffer", "cpu:0")
        assert big.site == "make_batch (train.py:40)"  # the first frame outside jax
        assert big.stack == ("inner (/site-packages/jax/_src/x.py:12)", "make_batch (/home/me/train.py:40)")
        assert big.labels["offset"] == -7
        assert (small.bytes, small.count, small.site) == (300, 1, "make_batch (train.py:40)")
        assert decoded.total_bytes == 5 * MiB + 300


def slow_matmuls(x):
    """About a quarter of a second of float32 matmuls on one CPU core (shape kept: [512, 512])."""
    return jax.lax.fori_loop(0, 120, lambda i, c: jnp.tanh(c @ c), x)


def test_time_call_without_block_measures_dispatch_not_work():
    slow = jax.jit(slow_matmuls)
    x = jnp.full((512, 512), 0.01, jnp.float32)
    jax.block_until_ready(slow(x))
    result = slow(x)
    assert not result.is_ready()  # the call returned while the work still runs (async dispatch)
    jax.block_until_ready(result)
    assert result.is_ready()
    unblocked = profiling.time_call(slow, x, warmup=0, repeats=2, block=False)
    blocked = profiling.time_call(slow, x, warmup=0, repeats=2)
    assert unblocked.median_s < blocked.median_s


def test_compile_and_run_seconds_compiles_even_when_a_cache_could_answer(tmp_path):
    from jax.experimental.compilation_cache import compilation_cache

    hits = []

    def listener(event, **_):
        if event == "/jax/compilation_cache/cache_hits":
            hits.append(event)

    settings = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                "jax_persistent_cache_min_entry_size_bytes", "jax_enable_compilation_cache")  # fmt: skip
    before = {name: getattr(jax.config, name) for name in settings}
    jax.monitoring.register_event_listener(listener)
    try:
        for name, value in zip(settings, (str(tmp_path), 0.0, 0, True)):
            jax.config.update(name, value)
        compilation_cache.reset_cache()
        f = jax.jit(lambda x: jnp.sin(x) @ x.T + 1.0)
        x = jnp.ones((32, 32))
        jax.block_until_ready(f(x))  # compiles and writes the persistent cache
        jax.clear_caches()
        f.lower(x).compile()
        assert len(hits) == 1  # a plain compile is answered from the disk cache
        timing = profiling.compile_and_run_seconds(f, x)
        assert len(hits) == 1, "compile_and_run_seconds read the persistent cache"
        assert timing.compile_s > 0 and timing.run_s > 0
        assert jax.config.jax_enable_compilation_cache  # switched back on afterwards ...
        jax.clear_caches()
        f.lower(x).compile()
        assert len(hits) == 2  # ... and in use again
        # static arguments: the executable takes only the dynamic ones
        scaled = jax.jit(lambda x, k: x * k, static_argnums=1)
        timing = profiling.compile_and_run_seconds(scaled, x, 3.0)
        assert timing.compile_s > 0 and timing.run_s > 0
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()
        # jax 0.7.2 has no public unregister; the listener then stays, appending to a dead list
        unregister = getattr(jax.monitoring, "unregister_event_listener", None)
        if unregister is not None:
            unregister(listener)
    with pytest.raises(TypeError, match="jitted"):
        profiling.compile_and_run_seconds(lambda x: x, x)


def test_missing_profile_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no profile runs"):
        profiling.read_trace(tmp_path)
    np.testing.assert_equal(profiling.Trace.from_chrome_trace({"traceEvents": []}).host_vs_device(),
                            {"host_ms": 0.0, "device_ms": 0.0, "wall_ms": 0.0})  # fmt: skip
