#pragma once
// The float64 reference: a direct loop over particles and nodes, no binning, the
// kernels evaluated from their closed forms (not from the piece tables the backends
// use). Slow and simple on purpose: the tests and `pmkit verify` judge every backend
// against it.
#include <array>
#include <cstddef>

#include "pmkit/grid.hpp"
#include "pmkit/kernels.hpp"

namespace pmkit::reference {

// The 1D kernel at signed distance r (in units of the spacing).
double weight(const Kernel& kernel, double r);
// Its derivative dW/dr, from the closed forms differentiated: for the B-spline of order
// p, W_p'(r) = W_{p-1}(r + 1/2) - W_{p-1}(r - 1/2); for M'4, its cubic pieces. At the
// kinks of the linear kernel (r = -1, 0, 1) it takes the mean of the one-sided values.
double weight_derivative(const Kernel& kernel, double r);

// Overwrites meshes[0..nprops) (mesh_size values each) with the spread of props.
template <int D>
void spread(const Grid<D>& grid, const Kernel& kernel, std::size_t n,
            const std::array<const double*, D>& positions, int nprops,
            const double* const* props, double* const* meshes);

// values[i][p] = interpolation of meshes[i] at particle p.
template <int D>
void interp(const Grid<D>& grid, const Kernel& kernel, std::size_t n,
            const std::array<const double*, D>& positions, int nprops,
            const double* const* meshes, double* const* values);

// gradients[D*i + d][p] = the derivative of interp's value of meshes[i] at particle p
// with respect to the particle's coordinate x_d: the sum over nodes of dW/dx_d times the
// node's value (the 1D derivatives divided by the spacing), ghosts mapped as interp
// maps them. Where the linear kernel's derivative jumps (a particle on a node), the
// derivative from above, as the coordinate increases: the slope of the cell the
// particle lies in, as the backends take it.
template <int D>
void interp_gradient(const Grid<D>& grid, const Kernel& kernel, std::size_t n,
                     const std::array<const double*, D>& positions, int nmeshes, const double* const* meshes,
                     double* const* gradients);

// Overwrites meshes[0..nmeshes) with the adjoint of interp_gradient: meshes[i][n] = sum
// over particles p and axes d of vectors[D*i + d][p] times node n's dW/dx_d at p.
template <int D>
void spread_gradient(const Grid<D>& grid, const Kernel& kernel, std::size_t n,
                     const std::array<const double*, D>& positions, int nmeshes, const double* const* vectors,
                     double* const* meshes);

}  // namespace pmkit::reference
