"""Grids and boxes: the domains of the mesh and pair plans."""

from __future__ import annotations

import operator
from typing import Sequence, Tuple, Union

from . import _pmkit

Number = Union[int, float]
PerAxis = Union[Number, Sequence[Number]]

_BOUNDARIES = {"periodic": _pmkit.Boundary.Periodic, "bounded": _pmkit.Boundary.Bounded}
_GHOSTS = {"fold": _pmkit.Ghosts.Fold, "keep": _pmkit.Ghosts.Keep}


def _per_axis(value: PerAxis, dims: int, name: str, kind: type) -> Tuple:
    """One value per axis from a scalar or a sequence of ``dims`` values."""
    if isinstance(value, str) or not hasattr(value, "__len__"):
        return (kind(value),) * dims
    if len(value) != dims:
        raise ValueError(f"{name} has {len(value)} values for a {dims}D domain")
    return tuple(kind(v) for v in value)


def _counts(values: Sequence[int], name: str) -> Tuple[int, ...]:
    """Integers as NumPy takes a shape's: ints and NumPy integers; floats (16.7, and 16.0
    too), bools and strings are a TypeError naming the argument. Their range is the C++
    grid's to check (pmkit.Error at plan creation)."""
    counts = []
    for d, value in enumerate(values):
        try:
            if isinstance(value, bool):
                raise TypeError
            counts.append(operator.index(value))
        except TypeError:
            raise TypeError(
                f"{name}[{d}] = {value!r}: {name} are positive integers, one per axis (ints or NumPy integers; "
                "floats are refused, 16.0 too, as in NumPy's shapes)"
            ) from None
    return tuple(counts)


def _choice(value: str, choices: dict, name: str):
    try:
        return choices[value]
    except (KeyError, TypeError):
        raise ValueError(f"{name} = {value!r}: expected one of {', '.join(map(repr, choices))}") from None


class Grid:
    """A uniform grid in 2 or 3 dimensions (pmkit::Grid).

    Mesh values live on the nodes ``origin + i * spacing``, per axis. ``cells``,
    ``spacing``, ``origin`` and ``boundary`` are given x first (as the columns of the
    positions); ``cells`` are ints or NumPy integers (a float, 16.0 too, is a TypeError,
    as in NumPy's shapes). A periodic axis has ``cells`` nodes and wraps positions into
    ``[origin, origin + cells * h)``; a bounded axis has ``cells + 1`` nodes on the closed
    ``[origin, origin + cells * h]`` and takes particles inside it only. ``ghosts`` says what
    happens to a kernel's reach past a bounded axis's ends: ``"fold"`` mirrors it back onto
    the interior (the default), ``"keep"`` stores the ghost layers in the mesh arrays.

    Mesh arrays are in C order with the last axis x: ``mesh[k, j, i]`` is node
    ``(i, j, k)``, and ``Plan.mesh_shape`` is ``(nz, ny, nx)`` (``(ny, nx)`` in 2D).
    """

    __slots__ = ("cells", "spacing", "origin", "boundary", "ghosts")

    def __init__(
        self,
        cells: Sequence[int],
        spacing: PerAxis = 1.0,
        origin: PerAxis = 0.0,
        boundary: Union[str, Sequence[str]] = "periodic",
        ghosts: str = "fold",
    ) -> None:
        dims = len(cells)
        if dims not in (2, 3):
            raise ValueError(f"cells has {dims} values; pmkit grids are 2D or 3D")
        self.cells: Tuple[int, ...] = _counts(cells, "cells")
        self.spacing: Tuple[float, ...] = _per_axis(spacing, dims, "spacing", float)
        self.origin: Tuple[float, ...] = _per_axis(origin, dims, "origin", float)
        self.boundary: Tuple[str, ...] = _per_axis(boundary, dims, "boundary", str)
        for b in self.boundary:
            _choice(b, _BOUNDARIES, "boundary")
        _choice(ghosts, _GHOSTS, "ghosts")
        self.ghosts: str = ghosts

    @classmethod
    def periodic(cls, cells: Sequence[int], h: float = 1.0, origin: float = 0.0) -> "Grid":
        """``cells`` periodic cells of width ``h`` from ``origin`` on every axis."""
        return cls(cells, h, origin, "periodic")

    @classmethod
    def bounded(cls, cells: Sequence[int], h: float = 1.0, origin: float = 0.0, ghosts: str = "fold") -> "Grid":
        """The closed box ``[origin, origin + cells * h]`` on every axis."""
        return cls(cells, h, origin, "bounded", ghosts)

    @property
    def dim(self) -> int:
        return len(self.cells)

    def _cpp(self):
        grid = _pmkit.Grid2() if self.dim == 2 else _pmkit.Grid3()
        grid.cells = self.cells
        grid.spacing = self.spacing
        grid.origin = self.origin
        grid.boundary = tuple(_BOUNDARIES[b] for b in self.boundary)
        grid.ghosts = _GHOSTS[self.ghosts]
        return grid

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Grid) and all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def __repr__(self) -> str:
        return (
            f"pmkit.Grid(cells={self.cells}, spacing={self.spacing}, origin={self.origin}, "
            f"boundary={self.boundary}, ghosts={self.ghosts!r})"
        )


class Box:
    """The domain of a pair plan (pmkit::Box): an origin, a length and a boundary per axis."""

    __slots__ = ("length", "origin", "boundary")

    def __init__(
        self, length: Sequence[float], origin: PerAxis = 0.0, boundary: Union[str, Sequence[str]] = "periodic"
    ) -> None:
        dims = len(length)
        if dims not in (2, 3):
            raise ValueError(f"length has {dims} values; pmkit boxes are 2D or 3D")
        self.length: Tuple[float, ...] = tuple(float(v) for v in length)
        self.origin: Tuple[float, ...] = _per_axis(origin, dims, "origin", float)
        self.boundary: Tuple[str, ...] = _per_axis(boundary, dims, "boundary", str)
        for b in self.boundary:
            _choice(b, _BOUNDARIES, "boundary")

    @classmethod
    def periodic(cls, length: Sequence[float], origin: float = 0.0) -> "Box":
        return cls(length, origin, "periodic")

    @classmethod
    def bounded(cls, length: Sequence[float], origin: float = 0.0) -> "Box":
        return cls(length, origin, "bounded")

    @classmethod
    def of(cls, grid: Grid) -> "Box":
        """A grid's domain: ``[origin, origin + cells * spacing]`` per axis, its boundaries."""
        return cls([c * h for c, h in zip(grid.cells, grid.spacing)], grid.origin, grid.boundary)

    @property
    def dim(self) -> int:
        return len(self.length)

    def _cpp(self):
        box = _pmkit.Box2() if self.dim == 2 else _pmkit.Box3()
        box.length = self.length
        box.origin = self.origin
        box.boundary = tuple(_BOUNDARIES[b] for b in self.boundary)
        return box

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Box) and all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def __repr__(self) -> str:
        return f"pmkit.Box(length={self.length}, origin={self.origin}, boundary={self.boundary})"
