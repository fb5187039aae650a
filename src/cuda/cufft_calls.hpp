#pragma once
// cuFFT's types and calls of each precision under one name, and its errors as
// pmkit::Error: RealFft's CUDA backend (fft.cu) and DistributedRealFft's (slab transposes,
// src/distributed/cuda/fft_slabs.cu).
#include <cufft.h>

#include <complex>

#include "pmkit/error.hpp"

namespace pmkit::detail {

// `who`: the front end whose call failed ("RealFft").
inline void check_cufft(cufftResult status, const char* what, const char* who = "RealFft") {
  if (status == CUFFT_SUCCESS) return;
  fail(status == CUFFT_ALLOC_FAILED ? ErrorCode::OutOfMemory : ErrorCode::Device, who, ": ", what,
       " failed (cufftResult ", static_cast<int>(status), ")");
}

template <class T>
struct Cufft;

template <>
struct Cufft<float> {
  static constexpr cufftType forward_type = CUFFT_R2C;
  static constexpr cufftType inverse_type = CUFFT_C2R;
  static constexpr cufftType complex_type = CUFFT_C2C;
  static cufftResult forward(cufftHandle p, const float* in, std::complex<float>* out) {
    return cufftExecR2C(p, const_cast<cufftReal*>(in), reinterpret_cast<cufftComplex*>(out));
  }
  static cufftResult inverse(cufftHandle p, std::complex<float>* in, float* out) {
    return cufftExecC2R(p, reinterpret_cast<cufftComplex*>(in), out);
  }
  // In place; direction CUFFT_FORWARD or CUFFT_INVERSE.
  static cufftResult complex(cufftHandle p, std::complex<float>* data, int direction) {
    auto* d = reinterpret_cast<cufftComplex*>(data);
    return cufftExecC2C(p, d, d, direction);
  }
};

template <>
struct Cufft<double> {
  static constexpr cufftType forward_type = CUFFT_D2Z;
  static constexpr cufftType inverse_type = CUFFT_Z2D;
  static constexpr cufftType complex_type = CUFFT_Z2Z;
  static cufftResult forward(cufftHandle p, const double* in, std::complex<double>* out) {
    return cufftExecD2Z(p, const_cast<cufftDoubleReal*>(in), reinterpret_cast<cufftDoubleComplex*>(out));
  }
  static cufftResult inverse(cufftHandle p, std::complex<double>* in, double* out) {
    return cufftExecZ2D(p, reinterpret_cast<cufftDoubleComplex*>(in), out);
  }
  static cufftResult complex(cufftHandle p, std::complex<double>* data, int direction) {
    auto* d = reinterpret_cast<cufftDoubleComplex*>(data);
    return cufftExecZ2Z(p, d, d, direction);
  }
};

}  // namespace pmkit::detail
