#pragma once
// The cases bench/pme_openmm.py writes (OUTDIR/pme-case-N.bin: a header of 10 float64
// values, the positions, the charges, OpenMM's reciprocal forces), as pme_bench and
// pme_real_space_bench read them. A file that is missing or short ends the program.
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace pmkit::bench {

struct OpenMMCase {
  std::size_t n = 0;
  double length = 0, alpha = 0, openmm_ms = 0, openmm_energy = 0, openmm_md_ms = 0, openmm_md_rms = 0;
  std::array<std::int64_t, 3> mesh{};
  std::array<std::vector<double>, 3> x, force;
  std::vector<double> q;
};

inline OpenMMCase read_case(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", path.c_str());
    std::exit(1);
  }
  double header[10];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  OpenMMCase c;
  c.n = static_cast<std::size_t>(header[0]);
  c.length = header[1];
  c.alpha = header[2];
  for (int d = 0; d < 3; ++d) c.mesh[d] = static_cast<std::int64_t>(header[3 + d]);
  c.openmm_ms = header[6];
  c.openmm_energy = header[7];
  c.openmm_md_ms = header[8];
  c.openmm_md_rms = header[9];
  std::vector<double> rows(3 * c.n);
  auto read_rows = [&](std::array<std::vector<double>, 3>& out) {
    in.read(reinterpret_cast<char*>(rows.data()), static_cast<std::streamsize>(rows.size() * sizeof(double)));
    for (int d = 0; d < 3; ++d) {
      out[d].resize(c.n);
      for (std::size_t i = 0; i < c.n; ++i) out[d][i] = rows[3 * i + d];
    }
  };
  read_rows(c.x);
  c.q.resize(c.n);
  in.read(reinterpret_cast<char*>(c.q.data()), static_cast<std::streamsize>(c.n * sizeof(double)));
  read_rows(c.force);
  if (!in) {
    std::fprintf(stderr, "%s is short\n", path.c_str());
    std::exit(1);
  }
  return c;
}

}  // namespace pmkit::bench
