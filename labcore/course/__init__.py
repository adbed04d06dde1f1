"""What the numbered notebooks need beyond the library: exercises, source listings, experiments.

* ``exercises``: the checking framework the notebooks' exercises and quizzes run on (``check``, ``quiz``);
* ``lessons``: each lesson's folder (``nbNN_<topic>``): its exercises, its quiz and their checkers' helpers;
* ``source``: labcore's own source, shown in the notebooks as the code that runs;
* ``primitives``: small reference functions the first lessons build on;
* ``published``: published learning curves and numbers, each with its source and where in it, to
  compare against (``QUOTES``: every number a lesson's prose takes from a source);
* ``recorded``: runs too long for a lesson, recorded with their machine and date and shipped as
  package data (notebook 12's Atari run);
* ``curves``: learning curves against env steps and wall time, side by side (notebook 12).

The library never imports the course; the course uses the library and the tools.
"""
