"""PyTorch originals that labcore ports to JAX, kept runnable so the ports can be checked against them.

Importing a module here needs torch (``pip install labcore[torch]``; Colab ships it).
"""
