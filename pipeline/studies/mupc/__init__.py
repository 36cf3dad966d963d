"""μPC: the PC engine shared by the two μPC studies, and the studies.

``engine/`` (no I/O): ``model.py`` (networks, parameterisations, initialisations), ``energy.py`` (energy,
inference, gradients, Adam; ``fused.py`` its Triton kernels, ``iteration.py`` a stacked group's iteration),
``hessian.py`` (the activity Hessian: blocks, banded storage, eigenvalue routes), ``runs.py`` (a training
run's configuration and record format) and ``cost.py`` (FLOP counts). It serves ``mupc_analysis``
(``analysis/``: Hessian at init, forward pass, energy theory) and ``mupc_training`` (``training/``: the
training sweeps and their figures).
"""
