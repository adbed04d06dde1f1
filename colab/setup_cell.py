# Setup. On Colab this installs labcore at the release these notebooks belong to, keeping Colab's
# own jax (labcore asks only for lower bounds). Locally, `make lab` has installed everything.
LABCORE = "labcore @ git+https://github.com/labcore-rl/labcore.git@v0.2.0"
import sys

if "google.colab" in sys.modules:
    import subprocess

    subprocess.run([sys.executable, "-m", "pip", "install", "-q", LABCORE], check=True)
