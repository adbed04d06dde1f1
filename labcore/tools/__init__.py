"""Tools for looking at a machine and a program, apart from the library that trains.

* ``doctor``: what this machine has (devices, versions, the compilation cache) and two measured
  speeds, as ``python -m labcore doctor`` prints them;
* ``benchmarking``: timing a jitted call fairly (compile apart, warm-up, spread);
* ``profiling``: JAX profiler traces, read back and summarised;
* ``memory_profile``: device memory, live buffers and their owners;
* ``introspection``: jaxprs, compiled HLO and cost analyses of a function;
* ``gpu_program``: the program XLA compiles for a GPU, on a machine without one, and the kernels
  it launches per loop step.

The library (``labcore.agents``, ``labcore.loop``, ``labcore.runs`` and the modules beside them)
never imports these; the command line, the notebooks and the benchmarks do.
"""
