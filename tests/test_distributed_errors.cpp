// The distributed plan's errors under mpirun: every rank throws, and nothing the caller
// owns changes.
#include "distributed/transport_choice.hpp"
#include "distributed_support.hpp"

namespace pmkit::test {
namespace {

TEST(DistributedErrors, MeshTooSmallForTheRanks) {
  // A grid of one cell splits over one rank only.
  EXPECT_EQ(error_code_of([] { DistributedPlan<double, 2>(MPI_COMM_WORLD, Grid<2>::periodic({1, 1}), Kernel::linear()); }),
            world_size() > 1 ? ErrorCode::InvalidArgument : ErrorCode::Ok);
  RankGrid<2> wrong;
  wrong.ranks = {world_size() + 1, 1};
  EXPECT_EQ(error_code_of([&] { DistributedPlan<double, 2>(MPI_COMM_WORLD, Grid<2>::periodic({16, 16}), Kernel::linear(), {}, wrong); }),
            ErrorCode::InvalidArgument);
  RankGrid<2> bad_cuts;
  bad_cuts.ranks = {world_size(), 1};
  bad_cuts.cuts[0].assign(world_size() + 1, 0);
  bad_cuts.cuts[0].back() = 16;  // ranks without a cell, where there are several
  EXPECT_EQ(error_code_of([&] { DistributedPlan<double, 2>(MPI_COMM_WORLD, Grid<2>::periodic({16, 16}), Kernel::linear(), {}, bad_cuts); }),
            world_size() > 1 ? ErrorCode::InvalidArgument : ErrorCode::Ok);
}

TEST(DistributedErrors, CapacityOverflowMovesNothing) {
  if (world_size() == 1) GTEST_SKIP() << "one rank: no particle arrives";
  const Grid<2> grid = Grid<2>::bounded({16, 16}, 1.0);
  RankGrid<2> along_x;
  along_x.ranks = {world_size(), 1};
  DistributedPlan<double, 2> plan(MPI_COMM_WORLD, grid, Kernel::linear(), {}, along_x);
  // Every rank holds 10 particles in the first block, in arrays of 12 slots.
  Share<double, 2> share(12);
  for (int i = 0; i < 10; ++i) {
    share.x[0][i] = 0.5 + 0.01 * i;
    share.x[1][i] = 3.0 + i;
    share.q[i] = i;
  }
  share.count = 10;
  const Share<double, 2> before = share;
  EXPECT_EQ(error_code_of([&] { share.migrate(plan); }), ErrorCode::OutOfMemory);
  EXPECT_EQ(share.count, 10u);
  EXPECT_EQ(share.x, before.x);
  EXPECT_EQ(share.q, before.q);
  // With room for all of them they arrive.
  Share<double, 2> roomy(10 * world_size());
  for (int d = 0; d < 2; ++d) std::copy(before.x[d].begin(), before.x[d].begin() + 10, roomy.x[d].begin());
  roomy.count = 10;
  roomy.migrate(plan);
  EXPECT_EQ(roomy.count, plan.rank() == 0 ? static_cast<std::size_t>(10 * world_size()) : 0u);
}

TEST(DistributedErrors, BadPositionsOnOneRankFailEverywhere) {
  const Grid<2> grid = Grid<2>::bounded({16, 16}, 1.0);
  DistributedPlan<double, 2> plan(MPI_COMM_WORLD, grid, Kernel::tsc());
  Share<double, 2> share(4);
  share.x[0] = {1, 2, 3, 4};
  share.x[1] = {1, 2, 3, 4};
  share.count = 4;
  if (plan.rank() == world_size() - 1) share.x[1][2] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(error_code_of([&] { share.migrate(plan); }), ErrorCode::NonFinitePosition);
  share.x[1][2] = 3;
  if (plan.rank() == 0) share.x[0][1] = 17;  // outside the bounded grid
  EXPECT_EQ(error_code_of([&] { share.migrate(plan); }), ErrorCode::OutOfBounds);
  share.x[0][1] = 2;
  // Not migrated: some particles lie in other ranks' blocks.
  Share<double, 2> strangers(1);
  strangers.x[0][0] = plan.rank() == 0 ? 15.5 : 0.5;
  strangers.x[1][0] = plan.rank() == 0 ? 15.5 : 0.5;
  strangers.count = 1;
  EXPECT_EQ(error_code_of([&] { plan.set_points(strangers.positions()); }),
            world_size() > 1 ? ErrorCode::InvalidArgument : ErrorCode::Ok);
}

TEST(DistributedErrors, MismatchedArrays) {
  const Grid<3> grid = Grid<3>::periodic({8, 8, 8}, 0.125);
  DistributedPlan<double, 3> plan(MPI_COMM_WORLD, grid, Kernel::mp4());
  Share<double, 3> share(0);
  plan.set_points(share.positions());
  std::vector<double> q, wrong(plan.block_size() + (plan.rank() == 0 ? 1 : 0)), right(plan.block_size());
  EXPECT_EQ(error_code_of([&] { plan.spread({View<const double>(q)}, {View<double>(wrong)}); }), ErrorCode::SizeMismatch);
  // A different number of properties on one rank.
  std::vector<View<const double>> props(plan.rank() == 0 ? 2 : 1, View<const double>(q));
  std::vector<View<double>> meshes(props.size(), View<double>(right));
  EXPECT_EQ(error_code_of([&] { plan.spread(props, meshes); }),
            world_size() > 1 ? ErrorCode::SizeMismatch : ErrorCode::Ok);
  // Positions of different lengths in migrate.
  Share<double, 3> ragged(3);
  ragged.x[2].resize(plan.rank() == 0 ? 2 : 3);
  EXPECT_EQ(error_code_of([&] { ragged.migrate(plan); }), ErrorCode::SizeMismatch);
}

// The CUDA ranks' transport from every rank's GPU (the rule, no GPU needed): NCCL where
// the build has it and no two ranks share a GPU; host-staged MPI for ranks that share
// one; an explicit NCCL request there fails naming the option and the ranks.
TEST(DistributedTransport, RanksSharingAGpuTakeHostStagedMpi) {
  using distributed::choose_transport;
  const std::vector<std::string> own = {"GPU 0000:01:00.0 of host a", "GPU 0000:02:00.0 of host a",
                                        "GPU 0000:01:00.0 of host b"};
  const std::vector<std::string> shared = {"GPU 0000:01:00.0 of host a", "GPU 0000:02:00.0 of host a",
                                           "GPU 0000:03:00.0 of host a", "GPU 0000:02:00.0 of host a"};
  EXPECT_EQ(choose_transport(Transport::Auto, true, own), Transport::Nccl);
  EXPECT_EQ(choose_transport(Transport::Auto, false, own), Transport::HostMpi);
  EXPECT_EQ(choose_transport(Transport::Auto, true, shared), Transport::HostMpi);
  EXPECT_EQ(choose_transport(Transport::Auto, true, {"GPU 0 of host a"}), Transport::Nccl);
  EXPECT_EQ(choose_transport(Transport::Nccl, true, own), Transport::Nccl);
  for (bool nccl : {true, false}) {
    EXPECT_EQ(choose_transport(Transport::HostMpi, nccl, own), Transport::HostMpi);
    EXPECT_EQ(choose_transport(Transport::HostMpi, nccl, shared), Transport::HostMpi);
  }
  EXPECT_PMKIT_ERROR(choose_transport(Transport::Nccl, true, shared), ErrorCode::Unsupported,
                     "transport = Transport::Nccl: ranks 1 and 3 share one GPU (GPU 0000:02:00.0 of host a)");
  EXPECT_PMKIT_ERROR(choose_transport(Transport::Nccl, true, shared), ErrorCode::Unsupported, "Transport::Auto");
  EXPECT_PMKIT_ERROR(choose_transport(Transport::Nccl, false, own), ErrorCode::Unsupported, "found no NCCL");
  EXPECT_PMKIT_ERROR(choose_transport(static_cast<Transport>(7), true, own), ErrorCode::InvalidArgument,
                     "transport = 7");
}

// Every rank reaches the same choice from the gathered GPUs, and a rank that could not
// read its GPU fails on every rank.
TEST(DistributedTransport, RanksAgreeOnTheChoice) {
  using distributed::agree_on_transport;
  using distributed::gpu_name;
  const std::string mine = gpu_name("0000:0" + std::to_string(world_rank() % 8) + ":00.0");
  const std::vector<std::string> all = distributed::gather_strings(MPI_COMM_WORLD, mine);
  ASSERT_EQ(all.size(), static_cast<std::size_t>(world_size()));
  EXPECT_EQ(all[world_rank()], mine);
  EXPECT_EQ(agree_on_transport(MPI_COMM_WORLD, Transport::Auto, true, mine),
            world_size() <= 8 ? Transport::Nccl : Transport::HostMpi);
  const std::string one = gpu_name("0000:01:00.0");
  EXPECT_EQ(agree_on_transport(MPI_COMM_WORLD, Transport::Auto, true, one),
            world_size() > 1 ? Transport::HostMpi : Transport::Nccl);
  EXPECT_EQ(error_code_of([&] { agree_on_transport(MPI_COMM_WORLD, Transport::Nccl, true, one); }),
            world_size() > 1 ? ErrorCode::Unsupported : ErrorCode::Ok);
  EXPECT_EQ(error_code_of([&] { agree_on_transport(MPI_COMM_WORLD, Transport::Auto, true, world_rank() == 0 ? "" : one); }),
            ErrorCode::Device);
}

}  // namespace
}  // namespace pmkit::test
