"""What the numbered notebooks need beyond the library: exercises, source listings, experiments.

* ``exercises``: each notebook's exercises and the checkers that judge them (``check``);
* ``source``: labcore's own source, shown in the notebooks as the code that runs;
* ``primitives``: small reference functions the first lessons build on;
* ``published``: published learning curves (values read from the papers), to compare against;
* ``curves``: learning curves against env steps and wall time, side by side (notebook 12).

The library never imports the course; the course uses the library and the tools.
"""
