// Plan::set_stream and PairPlan::set_stream: a plan moved to another stream runs its
// next calls after the work queued on its previous one, with no host wait in between.
// Each test queues, on the old stream, a kernel that spins for a while and then writes
// an array the next call reads (or overwrites); a call on the new stream that did not
// wait for it would read the old values (or be overwritten), so disorder shows.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "cuda_support.hpp"
#include "pmkit/pairs.hpp"
#include "pmkit/plan.hpp"

namespace {

using pmkit::test::device_cview;
using pmkit::test::device_view;
using pmkit::test::DeviceBuffer;

// Spins for `cycles` clock cycles on one thread, then fills `values` with `value`.
template <class T>
__global__ void fill_after_spin(T* values, std::size_t n, T value, long long cycles) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
  }
  __syncthreads();
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    values[i] = value;
}

// About 50 ms at the clocks of current GPUs: far longer than a launch on another stream
// takes to start.
constexpr long long kSpinCycles = 100'000'000;

// cudaMemcpy from pageable memory may return before the copy lands for work on a
// non-blocking stream: the tests wait for their uploads before they queue work.
void uploads_done() { pmkit::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

template <class T>
void fill_later(cudaStream_t stream, DeviceBuffer<T>& values, T value) {
  fill_after_spin<<<1, 256, 0, stream>>>(values.get(), values.size(), value, kSpinCycles);
  pmkit::cuda::check_launch("fill_after_spin");
}

class Streams : public ::testing::Test {
 protected:
  void SetUp() override {
    PMKIT_REQUIRE_GPU();
    pmkit::cuda::check(cudaStreamCreateWithFlags(&first_, cudaStreamNonBlocking), "cudaStreamCreate");
    pmkit::cuda::check(cudaStreamCreateWithFlags(&second_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  void TearDown() override {
    if (first_) cudaStreamDestroy(first_);
    if (second_) cudaStreamDestroy(second_);
  }
  // An M'4 plan on 16^3 periodic cells that runs on the first stream.
  pmkit::Plan<float, 3> plan_on_first_stream() const {
    pmkit::Options options;
    options.backend = pmkit::Backend::Cuda;
    options.stream = pmkit::cuda::stream_handle(first_);
    return pmkit::Plan<float, 3>(pmkit::Grid<3>::periodic({16, 16, 16}), pmkit::Kernel::mp4(), options);
  }
  cudaStream_t first_ = nullptr;
  cudaStream_t second_ = nullptr;
};

// n uniform random positions in [0, length)^3 on the device, one buffer per axis.
std::array<DeviceBuffer<float>, 3> device_positions(std::size_t n, double length, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, static_cast<float>(length));
  std::array<DeviceBuffer<float>, 3> x;
  for (auto& axis : x) {
    std::vector<float> values(n);
    for (auto& v : values) v = u(rng);
    axis = DeviceBuffer<float>(values);
  }
  return x;
}

template <class AnyPlan>
void set_points(AnyPlan& plan, const std::array<DeviceBuffer<float>, 3>& x) {
  uploads_done();
  plan.set_points({device_cview(x[0]), device_cview(x[1]), device_cview(x[2])});
}

TEST_F(Streams, SpreadOnTheNewStreamReadsWhatTheOldOneWrote) {
  const std::size_t n = 4096;
  pmkit::Plan<float, 3> plan = plan_on_first_stream();
  DeviceBuffer<float> q(std::vector<float>(n, 1.0f));
  DeviceBuffer<float> rho(static_cast<std::size_t>(plan.mesh_size()));
  set_points(plan, device_positions(n, 16.0, 7));
  fill_later(first_, q, 2.0f);  // the charges the spread must see
  plan.set_stream(pmkit::cuda::stream_handle(second_));
  EXPECT_EQ(plan.options().stream, pmkit::cuda::stream_handle(second_));
  plan.spread({device_cview(q)}, {device_view(rho)});
  pmkit::cuda::check(cudaStreamSynchronize(second_), "cudaStreamSynchronize");

  const std::vector<float> mesh = rho.download();
  const double mass = std::accumulate(mesh.begin(), mesh.end(), 0.0);
  EXPECT_NEAR(mass, 2.0 * n, 1e-3 * n) << "the spread ran before the old stream's write of the charges";
}

TEST_F(Streams, InterpOnTheNewStreamReadsThePlansOwnWorkOnTheOldOne) {
  const std::size_t n = 4096;
  pmkit::Plan<float, 3> plan = plan_on_first_stream();
  DeviceBuffer<float> phi(std::vector<float>(static_cast<std::size_t>(plan.mesh_size()), 0.0f));
  set_points(plan, device_positions(n, 16.0, 17));

  // On the old stream: a mesh of ones written late, then the plan's interp of it into
  // `before`. On the new stream: interp of the same mesh into `after`. Both must read 1
  // everywhere (M'4 reproduces constants).
  DeviceBuffer<float> before(n), after(n);
  fill_later(first_, phi, 1.0f);
  plan.interp({device_cview(phi)}, {device_view(before)});
  plan.set_stream(pmkit::cuda::stream_handle(second_));
  plan.interp({device_cview(phi)}, {device_view(after)});
  pmkit::cuda::check(cudaStreamSynchronize(second_), "cudaStreamSynchronize");

  for (const auto* values : {&before, &after}) {
    const std::vector<float> host = values->download();
    for (std::size_t i = 0; i < n; ++i) ASSERT_NEAR(host[i], 1.0f, 1e-5f) << "particle " << i;
  }
}

TEST_F(Streams, PairComputeOnTheNewStreamOverwritesWhatTheOldOneWrote) {
  const std::size_t n = 2048;
  pmkit::PairOptions options;
  options.backend = pmkit::Backend::Cuda;
  options.stream = pmkit::cuda::stream_handle(first_);
  const double length = 8.0;
  pmkit::PairPlan<float, 3> plan(pmkit::Box<3>::periodic({length, length, length}), 1.0, options);
  set_points(plan, device_positions(n, length, 27));

  // The neighbour count written late on the old stream must be overwritten by the
  // compute on the new one, not the other way round.
  DeviceBuffer<float> count(n);
  fill_later(first_, count, -1.0f);
  plan.set_stream(pmkit::cuda::stream_handle(second_));
  plan.compute(pmkit::pair_kernels::NeighbourCount{}, {}, {device_view(count)});
  pmkit::cuda::check(cudaStreamSynchronize(second_), "cudaStreamSynchronize");
  pmkit::cuda::check(cudaStreamSynchronize(first_), "cudaStreamSynchronize");

  const std::vector<float> host = count.download();
  for (std::size_t i = 0; i < n; ++i) ASSERT_GE(host[i], 0.0f) << "particle " << i << ": the old stream wrote last";
}

TEST(StreamsCpu, TheCpuBackendKeepsTheHandle) {
  pmkit::Plan<double, 2> plan(pmkit::Grid<2>::periodic({8, 8}), pmkit::Kernel::tsc());
  int marker = 0;
  plan.set_stream(&marker);
  EXPECT_EQ(plan.options().stream, static_cast<pmkit::StreamHandle>(&marker));
}

}  // namespace
