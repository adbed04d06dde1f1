"""Lesson 09, "GFlowNets: from a PyTorch trainer to JAX in three measured steps"
(``notebooks/09_gflownet_hybrid.ipynb``): its exercises (``exercises``) and its quiz (``quiz``)."""
