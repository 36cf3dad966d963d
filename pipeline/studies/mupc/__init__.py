"""μPC: the PC engine shared by the two μPC studies.

``model.py`` (networks, parameterisations, initialisations), ``energy.py`` (energy, inference,
gradients, Adam), ``hessian.py`` (the activity Hessian: blocks, banded storage, eigenvalue routes)
and ``runs.py`` (a training run's configuration and record format) serve
``mupc_analysis`` (``analysis/``: Hessian at init, forward pass, energy theory) and
``mupc_training`` (``training/``: the training sweeps and their figures).
"""
