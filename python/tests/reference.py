"""A direct float64 reference of pmkit's spread, interp and their gradients, in NumPy.

Per axis, a particle's weights on the mesh nodes form a row of a dense matrix (wrapped on
periodic axes, folded by mirror reflection or kept as ghost layers on bounded ones); a
particle's weight on a node of the D-dimensional mesh is the product of its axes'
weights. With those rows as a matrix W (particles x nodes, nodes in C order, x last):
spread is W^T q, interp W m, and the gradients use the derivative rows dW/dx_d.
"""

from math import comb, factorial

import numpy as np


def bspline(r, order):
    """The centred cardinal B-spline of the given order at distances r (in cells)."""
    x = np.asarray(r, dtype=np.float64) + order / 2
    # Truncated powers (x - k)_+^(order - 1); for order 1 the step function, 0 at x = k.
    def power(k):
        return np.where(x > k, np.abs(x - k) ** (order - 1), 0.0)

    return sum((-1) ** k * comb(order, k) * power(k) for k in range(order + 1)) / factorial(order - 1)


def bspline_derivative(r, order):
    """d/dr of bspline(r, order): M_p'(x) = M_{p-1}(x) - M_{p-1}(x - 1), centred."""
    return bspline(np.asarray(r) + 0.5, order - 1) - bspline(np.asarray(r) - 0.5, order - 1)


def mp4(r):
    a = np.abs(np.asarray(r, dtype=np.float64))
    return np.where(a < 1, 1 - 2.5 * a**2 + 1.5 * a**3, np.where(a < 2, 0.5 * (2 - a) ** 2 * (1 - a), 0.0))


def mp4_derivative(r):
    r = np.asarray(r, dtype=np.float64)
    a = np.abs(r)
    inner = -5 * a + 4.5 * a**2
    outer = -(2 - a) * (1 - a) - 0.5 * (2 - a) ** 2
    return np.sign(r) * np.where(a < 1, inner, np.where(a < 2, outer, 0.0))


ORDERS = {"linear": 2, "cic": 2, "tsc": 3}


def weight_functions(kernel):
    """(W, dW/dr, support) of a kernel name."""
    if kernel == "mp4":
        return mp4, mp4_derivative, 4
    order = ORDERS.get(kernel) or int(kernel.replace("bspline", ""))
    return (lambda r: bspline(r, order)), (lambda r: bspline_derivative(r, order)), order


def axis_matrices(u, nodes, periodic, ghosts, kernel):
    """The weights of particles at grid coordinates u on one axis's stored nodes, and their
    derivatives with respect to u: two (N, stored nodes) matrices."""
    weight, derivative, support = weight_functions(kernel)
    g = support // 2
    cells = nodes if periodic else nodes - 1
    stored = nodes + (2 * g if not periodic and ghosts == "keep" else 0)
    a = np.zeros((len(u), stored))
    da = np.zeros((len(u), stored))
    for p, up in enumerate(u):
        base = int(np.floor(up))
        for t in range(base - support, base + support + 1):
            w, dw = weight(up - t), derivative(up - t)
            if w == 0 and dw == 0:
                continue  # outside the support (the range scanned is wider)
            if periodic:
                index = t % nodes
            elif ghosts == "keep":
                index = t + g
            else:
                index = -t if t < 0 else (2 * cells - t if t > cells else t)
            a[p, index] += w
            da[p, index] += dw
    return a, da


def matrices(grid, kernel, positions):
    """W (N x nodes) and the D derivative matrices dW/dx_d, nodes in C order (x last)."""
    positions = np.asarray(positions, dtype=np.float64)
    dims = positions.shape[1]
    axes = []
    for d in range(dims):
        periodic = grid.boundary[d] == "periodic"
        nodes = grid.cells[d] if periodic else grid.cells[d] + 1
        u = (positions[:, d] - grid.origin[d]) / grid.spacing[d]
        a, da = axis_matrices(u, nodes, periodic, grid.ghosts, kernel)
        axes.append((a, da / grid.spacing[d]))

    def product(factors):
        # Row p: the outer product of the axes' rows, the last axis x (C order).
        rows = factors[0]
        for f in factors[1:]:
            rows = np.einsum("pi,pj->pji", rows, f).reshape(len(positions), -1)
        return rows

    w = product([a for a, _ in axes])
    gradients = [product([da if e == d else a for e, (a, da) in enumerate(axes)]) for d in range(dims)]
    return w, gradients


class Reference:
    """spread, interp, interp_gradient and spread_gradient of one grid, kernel and set of
    positions, in float64, with pmkit's shapes."""

    def __init__(self, grid, kernel, positions):
        self.w, self.dw = matrices(grid, kernel, positions)
        self.dims = len(self.dw)

    def spread(self, q, shape):
        return (np.asarray(q, np.float64) @ self.w).reshape(np.shape(q)[:-1] + tuple(shape))

    def interp(self, mesh, shape):
        m = np.asarray(mesh, np.float64).reshape(-1, int(np.prod(shape)))
        values = m @ self.w.T
        return values.reshape(np.shape(mesh)[: np.ndim(mesh) - len(shape)] + (-1,))

    def interp_gradient(self, mesh, shape):
        m = np.asarray(mesh, np.float64).reshape(-1, int(np.prod(shape)))
        g = np.stack([m @ dw.T for dw in self.dw], axis=-1)
        return g.reshape(np.shape(mesh)[: np.ndim(mesh) - len(shape)] + g.shape[1:])

    def spread_gradient(self, vectors, shape):
        v = np.asarray(vectors, np.float64).reshape(-1, self.w.shape[0], self.dims)
        mesh = sum(v[:, :, d] @ self.dw[d] for d in range(self.dims))
        return mesh.reshape(np.shape(vectors)[:-2] + tuple(shape))
