// DistributedRealFft on CUDA ranks: cuFFT on each rank's slabs and one exchange of the
// slabs a transform, through the rank's transport (NCCL, or pinned host buffers and MPI
// where ranks share a GPU: transport.cuh). In the terms of fft_slabs.hpp's SlabGeometry:
//
//   forward: real slab [a][rows] --cuFFT r2c of each plane--> X [a][b][c]
//            --sorted by the rank that holds row b--> Y [p][a][b in p][c]
//            --exchange--> X [a (every plane)][b in this rank][c]
//            --cuFFT c2c along a, in place--> --transposed--> spectrum [b][a][c]
//   inverse: the same steps backwards (c2r of each plane last, overwriting X).
//
// Everything runs on the options' stream with no host wait but the host-staged
// transport's before its messages.
#include <algorithm>
#include <string>
#include <vector>

#include "cuda/cufft_calls.hpp"
#include "cuda/runtime.hpp"
#include "distributed/collective.hpp"
#include "distributed/cuda/launch.cuh"
#include "distributed/cuda/transport.cuh"
#include "distributed/fft_slabs.hpp"

namespace pmkit::detail {
namespace {

using distributed::blocks_for;
using distributed::kThreads;
using distributed::SlabGeometry;

// A complex value as the device copies it.
template <class T>
using Pair = typename std::conditional<std::is_same<T, float>::value, float2, double2>::type;

// Rows [a][b][c] of a_count planes (`planes`) against the same rows sorted by the rank
// that holds row b in the spectrum (`sorted`: [p][a][b - first(p)][c], rank p's part at
// a_count c first(p)): kSort writes sorted from planes, else planes from sorted.
template <class V, bool kSort>
__global__ void sort_rows(V* planes, V* sorted, std::int64_t a_count, std::int64_t b, std::int64_t c,
                          std::int64_t block) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a_count * b * c) return;
  const std::int64_t k = i % c, row = (i / c) % b, a = i / (c * b);
  const std::int64_t first = row / block * block, count = min(block, b - first);
  const std::int64_t j = a_count * c * first + (a * count + row - first) * c + k;
  if (kSort) sorted[j] = planes[i];
  else planes[i] = sorted[j];
}

// The exchanged planes [a][b][c] (every plane, this rank's b_count rows) against the
// spectrum slab [b][a][c]: kToSpectrum writes the spectrum, else the planes.
template <class V, bool kToSpectrum>
__global__ void swap_axes(V* planes, V* spectrum, std::int64_t a, std::int64_t b_count, std::int64_t c) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a * b_count * c) return;
  const std::int64_t k = i % c, row = (i / c) % b_count, plane = i / (c * b_count);
  const std::int64_t j = (row * a + plane) * c + k;
  if (kToSpectrum) spectrum[j] = planes[i];
  else planes[i] = spectrum[j];
}

template <class T, int D>
class SlabCufftBackend final : public DistributedFftBackend<T, D> {
  using V = Pair<T>;
  using Complex = std::complex<T>;

 public:
  explicit SlabCufftBackend(const distributed::FftSetup<D>& setup) : g_(setup.geometry) {
    distributed::agree(setup.comm, "DistributedRealFft", [&] {
      int count = 0;
      cuda::check(cudaGetDeviceCount(&count), "DistributedRealFft: cudaGetDeviceCount");
      if (setup.options.device >= count)
        fail(ErrorCode::InvalidArgument, "options.device = ", setup.options.device, " but ", count,
             " CUDA devices are present");
    });
    context_.comm = setup.comm;
    context_.rank = g_.rank;
    context_.size = g_.size;
    context_.device = setup.options.device;
    context_.stream = cuda::to_cuda_stream(setup.options.stream);
    cuda::DeviceScope scope(context_.device);
    transport_ = std::make_unique<distributed::DeviceTransport>(setup.transport, context_);
    transport_->connect();
    try {
      distributed::agree(setup.comm, "DistributedRealFft", [&] {
        make_plans(setup.shape);
        const std::size_t values = std::max(g_.a_count() * g_.b.n, g_.a.n * g_.b_count()) * g_.c;
        x_.reserve(values, "DistributedRealFft: the slabs' buffer");
        y_.reserve(values, "DistributedRealFft: the slabs' exchange buffer");
      });
    } catch (...) {
      release();  // the plans made here, where another rank failed
      throw;
    }
    // Bytes of each rank's part: forward sends rows of b by their rank and receives whole
    // planes of a by theirs; inverse the other way round.
    const std::int64_t unit = sizeof(V);
    rows_.resize(g_.size + 1);
    planes_.resize(g_.size + 1);
    for (int p = 0; p <= g_.size; ++p) {
      rows_[p] = g_.a_count() * g_.c * g_.b.first(p) * unit;
      planes_[p] = g_.a.first(p) * g_.b_count() * g_.c * unit;
    }
  }
  ~SlabCufftBackend() override { release(); }

  void check_arrays(const char* call, const T* real, const Complex* spectrum) const override {
    const std::string what = std::string("DistributedRealFft::") + call;
    pointers_.require(real, (what + "'s real slab").c_str(), 0);
    pointers_.require(spectrum, (what + "'s spectrum slab").c_str(), 0);
  }

  void forward(const T* real, Complex* spectrum) override {
    cuda::DeviceScope scope(context_.device);
    total_.start(context_.stream);
    Complex* x = reinterpret_cast<Complex*>(x_.get());
    check_cufft(Cufft<T>::forward(planes_forward_, real, x), "the planes' forward transform", kWho);
    const std::int64_t n = g_.a_count() * g_.b.n * g_.c;
    sort_rows<V, true><<<blocks_for(n), kThreads, 0, context_.stream>>>(x_.get(), y_.get(), g_.a_count(), g_.b.n,
                                                                          g_.c, g_.b.block);
    cuda::check(cudaGetLastError(), "DistributedRealFft: sorting the rows");
    exchange(y_.get(), rows_, x_.get(), planes_);
    if (g_.b_count() == 0) {
      total_.stop(context_.stream);
      return;
    }
    check_cufft(Cufft<T>::complex(line_, x, CUFFT_FORWARD), "the forward transform along the split axis", kWho);
    const std::int64_t m = g_.a.n * g_.b_count() * g_.c;
    swap_axes<V, true><<<blocks_for(m), kThreads, 0, context_.stream>>>(x_.get(), reinterpret_cast<V*>(spectrum),
                                                                         g_.a.n, g_.b_count(), g_.c);
    cuda::check(cudaGetLastError(), "DistributedRealFft: transposing the spectrum");
    total_.stop(context_.stream);
  }

  void inverse(Complex* spectrum, T* real) override {
    cuda::DeviceScope scope(context_.device);
    total_.start(context_.stream);
    Complex* x = reinterpret_cast<Complex*>(x_.get());
    if (g_.b_count() > 0) {
      const std::int64_t m = g_.a.n * g_.b_count() * g_.c;
      swap_axes<V, false><<<blocks_for(m), kThreads, 0, context_.stream>>>(x_.get(), reinterpret_cast<V*>(spectrum),
                                                                            g_.a.n, g_.b_count(), g_.c);
      cuda::check(cudaGetLastError(), "DistributedRealFft: transposing the spectrum");
      check_cufft(Cufft<T>::complex(line_, x, CUFFT_INVERSE), "the inverse transform along the split axis", kWho);
    }
    exchange(x_.get(), planes_, y_.get(), rows_);
    const std::int64_t n = g_.a_count() * g_.b.n * g_.c;
    sort_rows<V, false><<<blocks_for(n), kThreads, 0, context_.stream>>>(x_.get(), y_.get(), g_.a_count(), g_.b.n,
                                                                           g_.c, g_.b.block);
    cuda::check(cudaGetLastError(), "DistributedRealFft: gathering the rows");
    check_cufft(Cufft<T>::inverse(planes_inverse_, x, real), "the planes' inverse transform", kWho);
    total_.stop(context_.stream);
  }

  Transport transport() const override { return transport_->kind(); }
  DistributedFftTimings timings() const override {
    cuda::DeviceScope scope(context_.device);
    return {total_.seconds("DistributedRealFft::last_timings"), exchange_.seconds("DistributedRealFft::last_timings")};
  }

 private:
  static constexpr const char* kWho = "DistributedRealFft";

  void exchange(const V* out, const std::vector<std::int64_t>& send, V* in, const std::vector<std::int64_t>& recv) {
    exchange_.start(context_.stream);
    transport_->exchange(reinterpret_cast<const unsigned char*>(out), send, reinterpret_cast<unsigned char*>(in), recv);
    exchange_.stop(context_.stream);
  }

  // The transforms of each plane of the real slab (2D of y and x in 3D, 1D of x in 2D,
  // a_count of them) and, where this rank holds rows of the spectrum, the complex
  // transform along a of its b_count c lines, which lie interleaved (stride b_count c).
  void make_plans(const std::array<std::int64_t, D>& shape) {
    long long n[D - 1];
    for (int d = 0; d < D - 1; ++d) n[d] = shape[D - 2 - d];
    make_plan(&planes_forward_, D - 1, n, nullptr, 1, 1, Cufft<T>::forward_type, g_.a_count());
    make_plan(&planes_inverse_, D - 1, n, nullptr, 1, 1, Cufft<T>::inverse_type, g_.a_count());
    if (g_.b_count() == 0) return;
    long long line[1] = {g_.a.n};
    make_plan(&line_, 1, line, line, g_.b_count() * g_.c, 1, Cufft<T>::complex_type, g_.b_count() * g_.c);
  }
  void make_plan(cufftHandle* plan, int rank, long long* n, long long* embed, long long stride, long long dist,
                 cufftType type, long long batch) {
    check_cufft(cufftCreate(plan), "cufftCreate", kWho);
    made_.push_back(*plan);
    std::size_t work = 0;
    check_cufft(cufftMakePlanMany64(*plan, rank, n, embed, stride, dist, embed, stride, dist, type, batch, &work),
                "cufftMakePlanMany64", kWho);
    check_cufft(cufftSetStream(*plan, context_.stream), "cufftSetStream", kWho);
  }
  void release() {
    cuda::DeviceScope scope(context_.device);
    for (cufftHandle p : made_) cufftDestroy(p);
    made_.clear();
  }

  SlabGeometry g_;
  distributed::DeviceContext context_;
  std::unique_ptr<distributed::DeviceTransport> transport_;
  cufftHandle planes_forward_ = 0, planes_inverse_ = 0, line_ = 0;
  std::vector<cufftHandle> made_;  // the plans to destroy
  cuda::DeviceBuffer<V> x_, y_;    // the slabs, and the exchange's other side
  std::vector<std::int64_t> rows_, planes_;  // byte offsets of each rank's part, by rows and by planes
  mutable cuda::DevicePointerCheck pointers_;
  cuda::EventTimer total_, exchange_;  // the last transform, and its exchange
};

}  // namespace

template <class T, int D>
std::unique_ptr<DistributedFftBackend<T, D>> make_slab_cufft_backend(const distributed::FftSetup<D>& setup) {
  return std::make_unique<SlabCufftBackend<T, D>>(setup);
}

template std::unique_ptr<DistributedFftBackend<float, 2>> make_slab_cufft_backend<float, 2>(const distributed::FftSetup<2>&);
template std::unique_ptr<DistributedFftBackend<float, 3>> make_slab_cufft_backend<float, 3>(const distributed::FftSetup<3>&);
template std::unique_ptr<DistributedFftBackend<double, 2>> make_slab_cufft_backend<double, 2>(const distributed::FftSetup<2>&);
template std::unique_ptr<DistributedFftBackend<double, 3>> make_slab_cufft_backend<double, 3>(const distributed::FftSetup<3>&);

}  // namespace pmkit::detail
