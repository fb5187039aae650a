"""pmkit: particle-mesh interpolation (spread, interp and their gradients) and cutoff pair
interactions, on CPUs and CUDA GPUs, for the arrays of NumPy, PyTorch, CuPy and JAX
without copies.

    import numpy as np, pmkit
    grid = pmkit.Grid.periodic((32, 32, 32), h=1 / 32)
    plan = pmkit.Plan(grid, "mp4")
    plan.set_points(np.random.rand(1000, 3))
    rho = plan.spread(np.ones(1000))       # (32, 32, 32): mesh[k, j, i] is node (i, j, k)
    phi = plan.interp(rho)                 # (1000,)

``pmkit.torch`` has the differentiable versions for PyTorch, ``pmkit.jax`` for JAX (XLA
custom calls under jit, grad and vmap).
"""

from ._pmkit import Error, ErrorCode, Kernel, __version__, built_with_cuda, built_with_mpi
from ._geometry import Box, Grid
from ._plan import PairPlan, Plan
from ._fft import RealFft
from ._distributed import DistributedPlan
from ._pme import PmeParameters, PmePlan, PmeResult

__all__ = ["Box", "Error", "ErrorCode", "Grid", "Kernel", "PairPlan", "Plan", "built_with_cuda", "__version__"]
__all__ += ["DistributedPlan", "RealFft", "built_with_mpi"]
__all__ += ["PmeParameters", "PmePlan", "PmeResult"]
