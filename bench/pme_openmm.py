"""OpenMM's smooth PME (CUDA platform, single precision) on random neutral charges at
water density, its reciprocal part timed alone as OpenMM's own benchmarks time it
(the reciprocal force group integrated alone), and the case written for bench/pme_bench:

    python3 bench/pme_openmm.py OUTDIR [N ...]      (default N: 10000 100000 1000000)

For each N, OUTDIR/pme-case-N.bin holds float64 values: a header of 10 (N, box length in
nm, alpha in 1/nm, the mesh nx, ny, nz, OpenMM's milliseconds per reciprocal step, its
reciprocal-group energy in kJ/mol, its milliseconds per molecular-dynamics step, the rms
displacement of a charge per such step in nm), then the positions (N x 3, nm), the charges
(N), and OpenMM's reciprocal forces at those positions (N x 3, kJ/mol/nm). B-spline order
5, OpenMM's own; alpha and the mesh are the ones OpenMM picks for cutoff 1 nm and
ewaldErrorTolerance 5e-4. OUTDIR/pme-direct-N.txt holds OpenMM's milliseconds per step of
the direct space alone (the nonbonded force group integrated alone, for
bench/pme_real_space_bench; OpenMM keeps its neighbour list between these steps, as the
charges barely move).

The molecular-dynamics step: the same integrator at a step of 2 fs, the charges given
velocities that move them MD_STEP nm rms a step (a thermal step of water's hydrogens; the
charges' motion changes the state on the device, as an MD engine's does). The charges'
masses (100 u) keep those velocities near their initial values over the steps timed: the
system has no short-range forces to keep the motion thermal, only the reciprocal ones.
The rms displacement printed is the one OpenMM realised, averaged over the steps timed.
"""
import sys
import time

import numpy as np
import openmm as mm
import openmm.unit as u

# nm rms a charge moves in a molecular-dynamics step (docs/pme.md); the step, ps.
MD_STEP = 0.005
MD_DT = 0.002


def ms_per_step(integrator, context, group, reps):
    """Milliseconds a step of `integrator` (which integrates force group `group`) over reps
    steps, after 5 untimed, each span closed by reading the group's energy (a wait)."""
    integrator.step(5)
    context.getState(getEnergy=True, groups={group})
    t = time.perf_counter()
    integrator.step(reps)
    context.getState(getEnergy=True, groups={group})
    return (time.perf_counter() - t) / reps * 1e3


def run_case(n, outdir, reps=50):
    length = (n / 100.0) ** (1 / 3)
    rng = np.random.default_rng(1)
    pos = rng.random((n, 3)) * length
    q = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    system = mm.System()
    system.setDefaultPeriodicBoxVectors(mm.Vec3(length, 0, 0), mm.Vec3(0, length, 0), mm.Vec3(0, 0, length))
    nb = mm.NonbondedForce()
    nb.setNonbondedMethod(mm.NonbondedForce.PME)
    nb.setCutoffDistance(1.0)
    nb.setEwaldErrorTolerance(5e-4)
    nb.setReciprocalSpaceForceGroup(1)
    nb.setForceGroup(0)
    for i in range(n):
        system.addParticle(100.0)
        nb.addParticle(q[i], 0.3, 0.0)
    system.addForce(nb)
    integrator = mm.VerletIntegrator(1e-9)
    integrator.setIntegrationForceGroups({1})
    context = mm.Context(system, integrator, mm.Platform.getPlatformByName("CUDA"), {"Precision": "single"})
    context.setPositions(pos * u.nanometer)
    alpha, nx, ny, nz = nb.getPMEParametersInContext(context)
    state = context.getState(getForces=True, getEnergy=True, groups={1})
    forces = state.getForces(asNumpy=True).value_in_unit(u.kilojoule_per_mole / u.nanometer)
    energy = state.getPotentialEnergy().value_in_unit(u.kilojoule_per_mole)
    ms = ms_per_step(integrator, context, 1, reps)
    # Molecular-dynamics steps: velocities of MD_STEP / MD_DT nm/ps rms (3D).
    integrator.setStepSize(MD_DT)
    velocities = rng.normal(0.0, MD_STEP / MD_DT / np.sqrt(3), (n, 3))
    context.setVelocities(velocities * u.nanometer / u.picosecond)
    integrator.step(5)
    start = context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(u.nanometer)
    t = time.perf_counter()
    integrator.step(reps)
    context.getState(getEnergy=True, groups={1})
    md_ms = (time.perf_counter() - t) / reps * 1e3
    end = context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(u.nanometer)
    md_rms = np.sqrt(np.mean(np.sum((np.asarray(end) - np.asarray(start)) ** 2, axis=1))) / reps
    header = np.array([n, length, alpha, nx, ny, nz, ms, energy, md_ms, md_rms], dtype=np.float64)
    with open(f"{outdir}/pme-case-{n}.bin", "wb") as f:
        for a in (header, pos, q, np.asarray(forces, dtype=np.float64)):
            np.ascontiguousarray(a, dtype=np.float64).tofile(f)
    print(f"openmm {mm.__version__} PME N={n} L={length:.4f} nm alpha={alpha:.6f} grid={nx}x{ny}x{nz} order=5 "
          f"single: reciprocal {ms:.3f} ms/step, reciprocal energy {energy:.6f} kJ/mol; "
          f"MD steps of {MD_DT * 1e3:.0f} fs: {md_ms:.3f} ms/step, {md_rms:.4f} nm rms a step", flush=True)
    del context
    # The direct space alone: a context whose integrator takes the nonbonded group 0 only.
    direct_integrator = mm.VerletIntegrator(1e-9)
    direct_integrator.setIntegrationForceGroups({0})
    context = mm.Context(system, direct_integrator, mm.Platform.getPlatformByName("CUDA"), {"Precision": "single"})
    context.setPositions(pos * u.nanometer)
    direct_ms = ms_per_step(direct_integrator, context, 0, reps)
    with open(f"{outdir}/pme-direct-{n}.txt", "w") as f:
        f.write(f"{direct_ms:.6f}\n")
    print(f"openmm {mm.__version__} PME N={n}: direct space {direct_ms:.3f} ms/step (its neighbour list kept)", flush=True)
    del context


if __name__ == "__main__":
    outdir = sys.argv[1]
    sizes = [int(float(s)) for s in sys.argv[2:]] or [10_000, 100_000, 1_000_000]
    for n in sizes:
        run_case(n, outdir)
