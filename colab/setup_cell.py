# Setup. On Colab this installs labcore from its repository, keeping Colab's own jax
# (labcore asks only for lower bounds). Locally, `make lab` has installed everything.
import sys

if "google.colab" in sys.modules:
    import subprocess

    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "labcore @ git+https://github.com/labcore-rl/labcore.git"],
        check=True,
    )
