"""Particle <-> mesh interpolation over the ranks of an MPI communicator
(pmkit::DistributedPlan), on an mpi4py communicator."""

from __future__ import annotations

import operator
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

from . import _pmkit
from ._arrays import library_of, shape_of
from ._geometry import Grid, _choice, _counts
from ._plan import Array, Arrays, KernelLike, _as_list, _kernel, _MeshCalls, _require_mutable

R = TypeVar("R")


def _error(code: Any, message: str) -> Exception:
    error = _pmkit.Error(message)
    error.code = code
    return error


def _forwarded(name: str, doc: str) -> property:
    """A read-only property of the compiled plan's attribute ``name``."""
    return property(lambda self: getattr(self._impl, name), doc=doc)


def _communicator_address(comm: Any) -> int:
    """The address of the MPI_Comm inside an mpi4py intracommunicator, checked to be of
    the MPI library that pmkit is linked with."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise ImportError(
            "pmkit.DistributedPlan takes an mpi4py communicator, and mpi4py is not installed (pip install mpi4py)"
        ) from None
    if isinstance(comm, MPI.Comm) and comm == MPI.COMM_NULL:
        raise ValueError("comm is MPI.COMM_NULL; give an intracommunicator such as MPI.COMM_WORLD")
    if not isinstance(comm, MPI.Intracomm):
        raise TypeError(
            f"comm must be an mpi4py intracommunicator (mpi4py.MPI.Intracomm, such as MPI.COMM_WORLD), "
            f"not {type(comm).__module__}.{type(comm).__name__}"
        )
    ours, theirs = _pmkit.mpi_library_version().strip(), MPI.Get_library_version().strip()
    if ours != theirs:
        raise _error(
            _pmkit.ErrorCode.Unsupported,
            f"comm: mpi4py runs on another MPI library than the one pmkit is linked with (mpi4py: "
            f"{theirs.splitlines()[0]!r}; pmkit: {ours.splitlines()[0]!r}); install mpi4py for pmkit's MPI",
        )
    return MPI._addressof(comm)


def _failure(error: Exception) -> Tuple[int, int, str]:
    """The kind, code and message of an error, as the compiled plan agrees it over the ranks."""
    if isinstance(error, _pmkit.Error):
        code = getattr(error, "code", _pmkit.ErrorCode.InvalidArgument)
        return 3, int(code.value), str(error)
    if isinstance(error, TypeError):
        return 1, 0, str(error)
    if isinstance(error, ValueError):
        return 2, 0, str(error)
    return 4, 0, f"{type(error).__name__}: {error}"


class Block(NamedTuple):
    """Where one rank sits in the decomposition (pmkit::Block). Every field is per axis, x
    first, as a Grid's; ``slices`` is this rank's block in a single-rank mesh array (C
    order, x last): ``mesh[plan.block.slices]`` has the shape ``plan.block_shape``."""

    ranks: Tuple[int, ...]
    coords: Tuple[int, ...]
    first_cell: Tuple[int, ...]
    cells: Tuple[int, ...]
    first_node: Tuple[int, ...]
    shape: Tuple[int, ...]

    @property
    def slices(self) -> Tuple[slice, ...]:
        return tuple(slice(f, f + n) for f, n in zip(reversed(self.first_node), reversed(self.shape)))


class DistributedPlan(_MeshCalls):
    """Particle <-> mesh interpolation over the ranks of an MPI communicator
    (pmkit::DistributedPlan): each rank holds one block of the mesh and the particles
    inside it.

    ``comm`` is an mpi4py intracommunicator (``MPI.COMM_WORLD``, or one split from it);
    the grid's cells are split over a Cartesian grid of its ranks: ``ranks`` per axis (x
    first; 0 lets MPI choose) and optionally ``cuts``, per axis ``ranks + 1`` increasing
    cell boundaries from 0 to ``cells`` (None or empty: even). ``transport`` ('auto',
    'nccl', 'host_mpi') is how CUDA ranks exchange; the other options are Plan's.

    Every call but the accessors is collective: all ranks make it, in the same order.
    ``migrate`` moves particles (and their properties) to the ranks that own them;
    ``set_points`` takes this rank's particles; ``spread``, ``interp``,
    ``interp_gradient`` and ``spread_gradient`` take and give this rank's block,
    ``block_shape`` in C order (x last), and its particles, as Plan's calls take and give
    the whole mesh, with the same shapes and array rules. A call that fails on any rank,
    in pmkit or in its arguments' checks, raises on every rank.

    On CUDA ranks the plan's work runs on its own stream, ordered after the work queued
    on the caller's current stream and before the caller's later work (two events where
    the streams differ).
    """

    def __init__(
        self,
        comm: Any,
        grid: Grid,
        kernel: KernelLike = "mp4",
        *,
        dtype: Any = "float64",
        backend: str = "cpu",
        device: int = 0,
        deterministic: bool = False,
        threads: int = 0,
        spread_method: str = "auto",
        max_away_fraction: float = 0.005,
        ranks: Optional[Sequence[int]] = None,
        cuts: Optional[Sequence[Optional[Sequence[int]]]] = None,
        transport: str = "auto",
    ) -> None:
        if not _pmkit.built_with_mpi():
            raise _error(
                _pmkit.ErrorCode.Unsupported,
                "pmkit.DistributedPlan: this build of pmkit has no distributed plan (its library was built without "
                "MPI; install MPI, e.g. Debian's libopenmpi-dev and openmpi-bin, and build pmkit again)",
            )
        address = _communicator_address(comm)
        try:
            impl, arguments = self._arguments(grid, kernel, dtype, backend, device, deterministic, threads,
                                              spread_method, max_away_fraction, ranks, cuts, transport)
        except Exception as error:
            # The other ranks wait in the compiled constructor's first message.
            _pmkit.agree_construction(address, *_failure(error))
            raise
        self._impl = impl(address, *arguments)
        self._grid = grid
        self._comm = comm
        self._mesh_shape: Tuple[int, ...] = tuple(self._impl.block_shape)
        self._points_like: Optional[Array] = None

    def _arguments(self, grid, kernel, dtype, backend, device, deterministic, threads, spread_method,
                   max_away_fraction, ranks, cuts, transport) -> Tuple[Any, Tuple]:
        """The compiled class and its constructor's arguments after the communicator."""
        if not isinstance(grid, Grid):
            raise TypeError(f"grid must be a pmkit.Grid, not {type(grid).__name__}")
        super().__init__(grid.dim, dtype, backend, device)
        dims = grid.dim
        ranks = (0,) * dims if ranks is None else _counts(ranks, "ranks")
        if len(ranks) != dims:
            raise ValueError(f"ranks has {len(ranks)} values for a {dims}D grid (one per axis, x first)")
        if cuts is None:
            cuts = [None] * dims
        if len(cuts) != dims:
            raise ValueError(f"cuts has {len(cuts)} entries for a {dims}D grid (one per axis, x first)")
        cuts = [[] if c is None else list(_counts(c, f"cuts[{d}]")) for d, c in enumerate(cuts)]
        transports = {"auto": _pmkit.Transport.Auto, "nccl": _pmkit.Transport.Nccl,
                      "host_mpi": _pmkit.Transport.HostMpi}
        options = self._mesh_options(threads, deterministic, spread_method, False, max_away_fraction)
        impl = getattr(_pmkit, f"DistributedPlan_{self._dtype}_{dims}d")
        return impl, (grid._cpp(), _kernel(kernel), options, ranks, cuts, _choice(transport, transports, "transport"))

    def _agreed(self, checks: Callable[[], R]) -> R:
        """``checks()``, whose failure on this rank raises on every rank: this rank's error
        here, one naming this rank on the others (in their calls into the compiled plan)."""
        try:
            return checks()
        except Exception as error:
            self._impl.agree_failure(*_failure(error))
            raise

    def _ready(self, method: str, flags: Tuple[bool, ...]) -> None:
        """Checked before the agreed checks of _prepare (the compiled call agrees it)."""

    def _prepare(self, method: str, inputs: Arrays, name: str, out: Optional[Arrays], fields, tail: Tuple[int, ...],
                 flags: Tuple[bool, ...], result_dtype: Optional[str] = None) -> Tuple:
        _MeshCalls._ready(self, method, flags)
        base = super()._prepare
        return self._agreed(lambda: base(method, inputs, name, out, fields, tail, flags, result_dtype))

    def _exported(self, arrays: List[Array], name: str) -> Tuple[List[Any], Optional[int], Any]:
        library = library_of(arrays[0])
        library.before(arrays, name)
        return library.exported(arrays), self._call_stream(library, arrays[0]), library

    def set_points(self, *positions: Array) -> None:
        """This rank's particles, each inside its block (``migrate`` puts them there): an
        (N, D) array or D arrays of N; N may differ between ranks, 0 included."""
        arrays = self._agreed(lambda: self._positions(positions))
        exported, stream, library = self._agreed(lambda: self._exported(arrays, "positions"))
        self._impl.set_points(exported, stream)
        self._library, self._points_like = library, arrays[0]

    def update_points(self, *positions: Array) -> None:
        """This rank's particles of the last set_points or update_points (or of the last
        migrate), moved, each still in this rank's block; see pmkit::DistributedPlan."""
        arrays = self._agreed(lambda: self._positions(positions))
        exported, stream, _ = self._agreed(lambda: self._exported(arrays, "positions"))
        self._impl.update_points(exported, stream)

    def migrate(self, positions: Arrays, props: Optional[Arrays] = None, count: Optional[int] = None) -> int:
        """Moves every particle to the rank that owns its position, with its properties, in
        place: ``positions`` ((C, D), or D arrays of C) and ``props`` ((C,) or (F, C) each)
        hold C slots, the first ``count`` in use (all by default). Periodic coordinates are
        wrapped into the domain. Returns this rank's new count: its staying particles first,
        then the arrivals; arrivals past C raise on every rank, with nothing changed."""

        def checks() -> Tuple:
            arrays = self._positions((positions,))
            capacity = shape_of(arrays[0], "positions")[0] if arrays else 0
            extra, _ = _as_list([] if props is None else props, "props")
            n = capacity if count is None else operator.index(count)
            if n < 0:
                raise ValueError(f"count = {n}: the number of slots in use, 0 to the arrays' length")
            _require_mutable(arrays, "positions", "migrate moves the particles in place")
            _require_mutable(extra, "props", "migrate moves the properties in place")
            exported, stream, _ = self._exported(arrays, "positions")
            prop_arrays = self._exported(extra, "props")[0] if extra else []
            return exported, prop_arrays, n, stream

        exported, prop_arrays, n, stream = self._agreed(checks)
        return self._impl.migrate(exported, prop_arrays, n, stream)

    def owner(self, position: Sequence[float]) -> int:
        """The rank that owns a position (x first), as migrate sends it; -1 for one that is
        not finite, lies outside a bounded axis or is too far to wrap."""
        return self._impl.owner(tuple(float(x) for x in position))

    @property
    def comm(self) -> Any:
        """The mpi4py communicator given."""
        return self._comm

    rank = _forwarded("rank", "This rank's index in comm.")
    size = _forwarded("size", "The number of ranks.")
    block_size = _forwarded("block_size", "The number of nodes in this rank's block.")

    @property
    def block(self) -> Block:
        b = self._impl.block
        return Block(*(tuple(getattr(b, f)) for f in Block._fields))

    @property
    def block_shape(self) -> Tuple[int, ...]:
        """The shape of this rank's block array: C order, x last (``block.shape`` reversed)."""
        return self._mesh_shape

    @property
    def transport(self) -> str:
        """How CUDA ranks exchange ('nccl' or 'host_mpi'; 'host_mpi' on CPU ranks)."""
        return "nccl" if self._impl.transport == _pmkit.Transport.Nccl else "host_mpi"

    @property
    def last_timings(self) -> Tuple[float, float, float]:
        """Seconds of the last collective call: (compute, exchange, migrate)."""
        t = self._impl.last_timings
        return t.compute_s, t.exchange_s, t.migrate_s

    def __repr__(self) -> str:
        return (
            f"pmkit.DistributedPlan(rank {self.rank} of {self.size}, {self._grid!r}, {self.kernel!r}, "
            f"dtype={self._dtype!r}, backend={self._backend!r}, block_shape={self._mesh_shape})"
        )
