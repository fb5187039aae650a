"""Run under mpirun by test_distributed.py: pmkit.DistributedPlan on this job's ranks
against the single pmkit.Plan on all the particles, and its errors. Each rank prints
"rank R of P: ok, K checks" at the end; a failed check prints its traceback and aborts the
job (so that no rank waits for one that failed)."""

import sys
import traceback

import numpy as np
from mpi4py import MPI

import pmkit

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
checks = 0


def check(condition, message):
    global checks
    checks += 1
    assert condition, message


def raises(kind, work, *, match=None, code=None):
    """work() raises `kind` (its message containing `match`, its pmkit code `code`)."""
    try:
        work()
    except kind as error:
        check(match is None or match in str(error), f"{kind.__name__} without {match!r}: {error}")
        check(code is None or error.code == code, f"code {getattr(error, 'code', None)} for {code}: {error}")
        return error
    check(False, f"no {kind.__name__} raised")


def distribute(plan, x, props):
    """Every SIZE-th particle starts on this rank; migrate moves each to its owner.
    Returns the positions and properties in use after it."""
    capacity = len(x)
    mine = np.zeros((capacity, x.shape[1]), dtype=x.dtype)
    mine_props = np.zeros((len(props), capacity), dtype=x.dtype)
    start = x[RANK::SIZE]
    mine[: len(start)] = start
    mine_props[:, : len(start)] = props[:, RANK::SIZE]
    n = plan.migrate(mine, mine_props, len(start))
    check(COMM.allreduce(n) == capacity, "migrate kept every particle")
    return mine[:n], mine_props[:, :n]


def close(actual, expected, tolerance):
    """actual equals expected within tolerance * the largest |expected| (or |actual|)."""
    global checks
    checks += 1
    scale = max(np.abs(expected).max(initial=0), np.abs(actual).max(initial=0), 1e-300)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=tolerance * scale)


def compare(grid, kernel, dtype, tolerance, rng, **options):
    """spread, interp and their gradients of the distributed plan against Plan's."""
    n = 400
    lo, size = np.array(grid.origin), np.array(grid.cells) * np.array(grid.spacing)
    x = (lo + rng.random((n, grid.dim)) * size).astype(dtype)
    q = rng.standard_normal(n).astype(dtype)
    single = pmkit.Plan(grid, kernel, dtype=dtype)
    single.set_points(x)
    field = rng.standard_normal(single.mesh_shape).astype(dtype)
    vectors = rng.standard_normal((n, grid.dim)).astype(dtype)

    plan = pmkit.DistributedPlan(COMM, grid, kernel, dtype=dtype, **options)
    index = np.arange(n, dtype=dtype)
    props = np.stack([q, index, *vectors.T])
    local_x, local_props = distribute(plan, x, props)
    plan.set_points(local_x)
    mine = local_props[1].astype(np.int64)
    check(plan.num_points == len(mine), "num_points")
    everyone = sum(COMM.allgather(mine.tolist()), [])
    check(sorted(everyone) == list(range(n)), "every particle on one rank")

    slices = plan.block.slices
    block = np.ascontiguousarray(field[slices])
    check(block.shape == plan.block_shape, f"block shape {block.shape} != {plan.block_shape}")
    close(plan.spread(np.ascontiguousarray(local_props[0])), single.spread(q)[slices], tolerance)
    phi = plan.interp(block)
    close(phi, single.interp(field)[mine], tolerance)
    close(plan.interp(np.stack([block, 2 * block]))[1], 2 * phi, tolerance)
    if not options.get("deterministic"):
        close(plan.interp_gradient(block), single.interp_gradient(field)[mine], tolerance)
        close(plan.spread_gradient(np.ascontiguousarray(local_props[2:].T)), single.spread_gradient(vectors)[slices],
              tolerance)
    return plan, local_x, local_props


def bad_input(rng):
    grid = pmkit.Grid.periodic((8, 8, 8), h=0.125)
    raises(TypeError, lambda: pmkit.DistributedPlan("MPI.COMM_WORLD", grid), match="mpi4py intracommunicator")
    raises(TypeError, lambda: pmkit.DistributedPlan(MPI.COMM_WORLD.Get_group(), grid), match="not mpi4py.MPI.Group")
    raises(ValueError, lambda: pmkit.DistributedPlan(MPI.COMM_NULL, grid), match="COMM_NULL")
    # A bad argument on one rank raises on all, in the constructor as in the calls.
    error = raises(ValueError, lambda: pmkit.DistributedPlan(MPI.COMM_WORLD, grid, ranks=(1, 1) if RANK == 0 else None),
                   match="ranks has 2 values")
    check(RANK == 0 or "DistributedPlan failed on rank 0" in str(error), f"names rank 0: {error}")
    raises(TypeError, lambda: pmkit.DistributedPlan(MPI.COMM_WORLD, grid, dtype="float16" if RANK == SIZE - 1 else "f8"),
           match="dtype")
    raises(pmkit.Error, lambda: pmkit.DistributedPlan(MPI.COMM_WORLD, grid, ranks=(SIZE + 1, 1, 1)),
           code=pmkit.ErrorCode.InvalidArgument)

    plan, x, props = compare(grid, "tsc", "float64", 1e-12, rng)
    q = np.ascontiguousarray(props[0])
    last = SIZE - 1
    # One rank's bad arguments raise on every rank: its own error there, one naming it
    # on the others.
    wrong_length = np.zeros(len(q) + 1) if RANK == 0 else q
    error = raises(pmkit.Error, lambda: plan.spread(wrong_length), code=pmkit.ErrorCode.SizeMismatch)
    check(RANK == 0 or "failed on rank 0" in str(error), f"names rank 0: {error}")
    wrong_dtype = q.astype(np.float32) if RANK == last else q
    error = raises(TypeError, lambda: plan.spread(wrong_dtype), match="float64")
    check(RANK == last or f"failed on rank {last}" in str(error), f"names rank {last}: {error}")
    block = np.zeros(plan.block_shape)
    strided = np.zeros(plan.block_shape + (2,))[..., 0] if RANK == last else block
    raises(ValueError, lambda: plan.interp(strided), match="contiguous")
    wrong_shape = np.zeros((3, 3)) if RANK == 0 else block
    raises(ValueError, lambda: plan.interp(wrong_shape), match="shape")
    raises(ValueError, lambda: plan.set_points(np.zeros((len(x), 2)) if RANK == 0 else x), match="coordinate")
    raises(pmkit.Error, lambda: plan.migrate(np.zeros((4, 3)), count=5), code=pmkit.ErrorCode.SizeMismatch)
    raises(ValueError, lambda: plan.migrate(np.zeros((4, 3)), count=-1 if RANK == last else 0), match="count")
    try:
        import jax.numpy as jnp
    except ImportError:
        jnp = None
    if jnp is not None:  # migrate writes in place, which a JAX array forbids
        raises(ValueError, lambda: plan.migrate(jnp.zeros((4, 3))), match="positions is read-only (a JAX array")
    if SIZE > 1:
        # A particle outside this rank's block.
        outside = np.full((1, 3), 0.999 if plan.block.first_node[0] == 0 else 0.0)
        raises(pmkit.Error, lambda: plan.set_points(outside if RANK == 0 else x), match="rank")
    # The plan works on after every error.
    plan.set_points(x)
    rho = plan.spread(q)
    check(abs(COMM.allreduce(rho.sum()) - COMM.allreduce(q.sum())) < 1e-10, "the spread conserves the total")


def compare_cuda(rng):
    """CUDA ranks on CuPy arrays, on a stream of CuPy's (one GPU per rank where there are
    enough, else ranks share them), against the single CPU Plan."""
    import cupy

    device = RANK % cupy.cuda.runtime.getDeviceCount()
    grid = pmkit.Grid.periodic((16, 12, 10), h=1 / 16)
    n = 600
    x = rng.random((n, 3)) * np.array(grid.cells) / 16
    q = rng.standard_normal(n)
    single = pmkit.Plan(grid, "mp4")
    single.set_points(x)
    field = rng.standard_normal(single.mesh_shape)
    plan = pmkit.DistributedPlan(COMM, grid, "mp4", backend="cuda", device=device)
    start = x[RANK::SIZE]
    with cupy.cuda.Device(device):
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            slots = cupy.zeros((n, 3))
            props = cupy.zeros((2, n))
            slots[: len(start)] = cupy.asarray(start)
            props[0, : len(start)] = cupy.asarray(q[RANK::SIZE])
            props[1, : len(start)] = cupy.asarray(np.arange(n, dtype=float)[RANK::SIZE])
            count = plan.migrate(slots, props, len(start))
            plan.set_points(slots[:count])
            rho = plan.spread(cupy.ascontiguousarray(props[0, :count]))
            phi = plan.interp(cupy.asarray(np.ascontiguousarray(field[plan.block.slices])))
        stream.synchronize()
        mine = cupy.asnumpy(props[1, :count]).astype(np.int64)
        close(cupy.asnumpy(rho), single.spread(q)[plan.block.slices], 1e-12)
        close(cupy.asnumpy(phi), single.interp(field)[mine], 1e-12)


def main():
    rng = np.random.default_rng(20261129)
    if sys.argv[1:] == ["cuda"]:
        compare_cuda(rng)
        print(f"rank {RANK} of {SIZE}: ok, {checks} checks", flush=True)
        return
    compare(pmkit.Grid.periodic((12, 10, 9), h=1 / 12), "mp4", "float64", 1e-12, rng)
    compare(pmkit.Grid.bounded((10, 7), h=0.5, origin=-1.0), "bspline4", "float64", 1e-12, rng)
    compare(pmkit.Grid.periodic((16, 8, 8), h=1 / 16), "mp4", "float32", 2e-5, rng, threads=1)
    compare(pmkit.Grid.periodic((8, 8), h=1 / 8), "tsc", "float64", 1e-12, rng, deterministic=True,
            ranks=(SIZE, 1), cuts=None)
    bad_input(rng)
    print(f"rank {RANK} of {SIZE}: ok, {checks} checks", flush=True)


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        COMM.Abort(1)
