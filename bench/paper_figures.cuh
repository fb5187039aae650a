#pragma once
// The published figures that bench/paper_cases.cu prints beside its own, copied from the
// two papers it names (PPM's Table 2 and Fig. 11; Barracuda's Table 1). Each table names the hardware it was measured on:
// the ratios against them compare pmkit on today's machine with a 2011-2015 one, not
// like with like. Plain C++ (no CUDA); named .cuh like bench/'s other headers, which
// bench/prebuild.sh's source hash covers.

namespace pmkit::bench::papers {

// Seed 000: F. Büyükkeçeci, O. Awile, I. F. Sbalzarini, "A portable OpenCL implementation
// of generic particle-mesh and mesh-particle interpolation in 2D and 3D", Parallel
// Computing 39 (2013), Table 2.
inline constexpr const char* kPpmHardware =
    "OpenCL on an NVIDIA Tesla C2050 against PPM's OpenMP code on 8 cores of an AMD FX 8150 (4.2 GHz)";

struct PpmRow {
  bool p2m;             // P -> M (spread); else M -> P (interp)
  bool mp4;             // M'4; else linear
  int dim;
  bool double_precision;
  int particles_k;      // "#Part." in thousands (2D: 2048^2 nodes, 3D: 128^3)
  double speedup_without_transfers;  // "w/o comm.": all GPU stages, sorting included
  double speedup_with_transfers;     // "w/comm.": plus the host <-> device copies
  double gflops;        // interpolation kernel alone; 0 where the table gives none
};

// Table 2, row by row. The table prints GFLOP/s for the 32-bit kernels only; its caption
// says the 64-bit kernels sustain half that rate (same efficiency of a halved peak).
inline constexpr PpmRow kPpmTable2[16] = {
    {true, false, 2, false, 4096, 3.0, 0.6, 124.2},
    {true, false, 2, true, 4096, 1.8, 0.3, 0},
    {true, false, 3, false, 2048, 2.3, 0.6, 112.6},
    {true, false, 3, true, 2048, 1.8, 0.4, 0},
    {true, true, 2, false, 4096, 4.3, 1.7, 180.8},
    {true, true, 2, true, 4096, 2.9, 0.6, 0},
    {true, true, 3, false, 2048, 4.8, 1.7, 432.6},
    {true, true, 3, true, 2048, 3.1, 1.0, 0},
    {false, false, 2, false, 4096, 1.8, 0.4, 64.3},
    {false, false, 2, true, 4096, 1.8, 0.3, 0},
    {false, false, 3, false, 2048, 1.9, 0.6, 199.9},
    {false, false, 3, true, 2048, 1.5, 0.4, 0},
    {false, true, 2, false, 4096, 4.8, 1.3, 273.1},
    {false, true, 2, true, 4096, 3.6, 0.8, 0},
    {false, true, 3, false, 2048, 13.0, 5.1, 648.1},
    {false, true, 3, true, 2048, 8.5, 2.8, 0},
};

// Seed 004: A. D. Larson, T. Carver, P. Zhao, "CUDA accelerated Lagrangian interpolation
// to Cartesian grid" (CPFD Software, Barracuda Virtual Reactor 16), Table 1: one map
// spreads 3 double properties (area, mass, volume) with an 8-point stencil onto a
// reactor's 330,000 cells; all times in ms. The CPU column is one core (serial, -O2).
inline constexpr const char* kBarracudaHardware =
    "CUDA on an NVIDIA Tesla K40c (Corners method), CPU serial on an Intel i7-4770 (3.5 GHz)";

struct BarracudaRow {
  double particles_m;    // millions of particles
  double cpu_ms;         // (M1) CPU, serial i7-4770
  double zhao_titan_ms;  // (M1) GPU Zhao, GeForce GTX Titan
  double zhao_k40c_ms;   // (M2) GPU Zhao, Tesla K40c
  double sort_ms;        // GPU sort (Thrust), once per time step
  double corners_k40c_ms;  // (M2) GPU Corners, Tesla K40c: the paper's best map
};

inline constexpr BarracudaRow kBarracudaTable1[7] = {
    {3.8, 187.2, 16.1, 17.5, 11.5, 10.1},  {5.1, 184.6, 19.7, 22.5, 14.0, 12.9},
    {5.9, 213.0, 21.7, 25.4, 16.0, 14.5},  {7.0, 258.5, 23.3, 28.3, 17.5, 16.8},
    {9.1, 310.7, 28.3, 33.7, 22.5, 22.2},  {10.2, 341.4, 30.1, 36.9, 27.5, 25.1},
    {11.7, 390.4, 33.0, 40.0, 28.0, 29.6},
};
// The paper's speed-up charges each map a tenth of the sort (at least 10 maps a step):
// CPU / (map + 0.1 sort).
inline constexpr double kBarracudaSortShare = 0.1;

}  // namespace pmkit::bench::papers
