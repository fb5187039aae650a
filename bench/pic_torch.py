"""One electrostatic PIC step as a PyTorch user writes it, timed on the GPU: the baseline
that bench/pic_bench prints pmkit's step against (bench/device.sh, step "pic").

3D, periodic, float32, thermal electrons (v_th = 1) on a box of unit cells (h = lambda_D):
the charge deposited with index_add_ over the kernel's nodes (CIC: 2^3, TSC: 3^3),
Poisson's equation by torch.fft.rfftn, E = -grad phi spectrally (three irfftn), E
gathered at the particles by indexing with the same weights, a leapfrog push and the
periodic wrap. The same work as pmkit's step with FieldMethod::Mesh.

Prints one line a case: "torch-pic cells=128 particles=16777216 kernel=cic ms=..."
"""
import argparse
import time

import torch


def axis_weights(s, kernel):
    """Nodes and weights along one axis for positions s in cell units: (offsets, [(node, weight)])."""
    if kernel == "cic":
        base = torch.floor(s)
        f = s - base
        return base.long(), [(0, 1 - f), (1, f)]
    base = torch.floor(s + 0.5)  # TSC: the nearest node and its two neighbours
    f = s - base
    return base.long(), [(-1, 0.5 * (0.5 - f) ** 2), (0, 0.75 - f * f), (1, 0.5 * (0.5 + f) ** 2)]


class TorchPic:
    def __init__(self, n, count, kernel, dt=0.1, device="cuda", seed=1):
        self.n, self.kernel, self.dt = n, kernel, dt
        g = torch.Generator(device=device).manual_seed(seed)
        self.x = torch.rand(3, count, device=device, generator=g) * n
        self.v = torch.randn(3, count, device=device, generator=g)
        self.w = torch.full((count,), float(n) ** 3 / count, device=device)
        k = torch.fft.fftfreq(n, d=1.0, device=device) * (2 * torch.pi)
        kr = torch.fft.rfftfreq(n, d=1.0, device=device) * (2 * torch.pi)
        # Index order (z, y, x) with x fastest, as pmkit's meshes.
        kz, ky, kx = torch.meshgrid(k, k, kr, indexing="ij")
        k2 = kx * kx + ky * ky + kz * kz
        k2[0, 0, 0] = 1.0
        green = 1.0 / k2
        green[0, 0, 0] = 0.0
        self.ik_green = [1j * kd * green for kd in (kx, ky, kz)]

    def stencil(self):
        n = self.n
        per_axis = [axis_weights(self.x[d], self.kernel) for d in range(3)]
        for ox, wx in per_axis[0][1]:
            ix = (per_axis[0][0] + ox) % n
            for oy, wy in per_axis[1][1]:
                iy = (per_axis[1][0] + oy) % n
                wxy = wx * wy
                for oz, wz in per_axis[2][1]:
                    iz = (per_axis[2][0] + oz) % n
                    yield (iz * n + iy) * n + ix, wxy * wz

    def step(self):
        n = self.n
        density = torch.zeros(n * n * n, device=self.x.device)
        for index, weight in self.stencil():
            density.index_add_(0, index, self.w * weight)
        # Electrons of charge -1 on ions of density 1: rho = 1 - density; E_k = -i k phi_k,
        # phi_k = rho_k / k^2 = -density_k / k^2 for k != 0.
        density_k = torch.fft.rfftn(density.view(n, n, n))
        field = [torch.fft.irfftn(g * density_k, s=(n, n, n)).reshape(-1) for g in self.ik_green]
        accel = torch.zeros_like(self.x)
        for index, weight in self.stencil():
            for d in range(3):
                accel[d] -= field[d][index] * weight  # electrons: a = -E
        self.v += self.dt * accel
        self.x = torch.remainder(self.x + self.dt * self.v, n)


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", action="append", help="cells:particles:kernel, e.g. 128:2^24:cic")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    cases = args.case or ["128:2^24:cic", "128:2^24:tsc", "256:2^27:cic"]
    for case in cases:
        cells, count, kernel = case.split(":")
        base, _, power = count.partition("^")
        count = int(base) ** int(power) if power else int(base)
        sim = None
        try:
            sim = TorchPic(int(cells), count, kernel, device=args.device)
            for _ in range(3):
                sim.step()
            synchronize(args.device)
            t0 = time.perf_counter()
            for _ in range(args.steps):
                sim.step()
            synchronize(args.device)
            ms = (time.perf_counter() - t0) / args.steps * 1e3
            print(f"torch-pic cells={cells} particles={count} kernel={kernel} ms={ms:.3f}", flush=True)
        except torch.cuda.OutOfMemoryError:
            print(f"torch-pic cells={cells} particles={count} kernel={kernel} ms=oom", flush=True)
        del sim
        if args.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
