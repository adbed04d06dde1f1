# Setup. On Colab this installs labcore at the release these notebooks belong to, keeping Colab's
# own jax (labcore asks only for lower bounds). Locally, `make lab` has installed everything.
# Then it turns on JAX's persistent compilation cache, so that a second run skips most compiles.
LABCORE = "labcore @ git+https://github.com/labcore-rl/labcore.git@v0.2.0"
import sys

if "google.colab" in sys.modules:
    import importlib
    import subprocess

    subprocess.run([sys.executable, "-m", "pip", "install", "-q", LABCORE], check=True)
    importlib.invalidate_caches()  # labcore was installed after this interpreter started

from labcore import compile_cache

cache = compile_cache.configure()  # cache.folder: where compiled programs are kept; cache.reason: why (or why not)
