"""Lesson 03, "jit, scan and vmap: the DQN of notebook 01 as one compiled program, over many envs and seeds"
(``notebooks/03_jit_scan_vmap.ipynb``): its exercises (``exercises``) and its quiz (``quiz``)."""
