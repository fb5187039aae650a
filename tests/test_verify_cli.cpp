// `pmkit verify` (apps/verify.cpp): options and exit status.
#include <vector>

#include "commands.hpp"
#include "test_support.hpp"

namespace pmkit::test {
namespace {

struct Outcome {
  int status;
  std::string out, err;
};

Outcome run(std::vector<std::string> args) {
  args.insert(args.begin(), "verify");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int status = cli::run_verify(static_cast<int>(args.size()), argv.data());
  Outcome o{status, ::testing::internal::GetCapturedStdout(), ::testing::internal::GetCapturedStderr()};
  return o;
}

TEST(VerifyCommand, HelpGoesToStdout) {
  const Outcome o = run({"--help"});
  EXPECT_EQ(o.status, 0);
  EXPECT_NE(o.out.find("usage: pmkit verify"), std::string::npos) << o.out;
  EXPECT_TRUE(o.err.empty()) << o.err;
}

TEST(VerifyCommand, BadArgumentsGiveUsageAndStatus2) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--dim", "4"},
                                                                {"--dim"},
                                                                {"--dim", "two"},
                                                                {"--kernel", "bspline9"},
                                                                {"--kernel", "gauss"},
                                                                {"--frobnicate"},
                                                                {"stray"}}) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    const Outcome o = run(args);
    EXPECT_EQ(o.status, 2) << joined;
    EXPECT_NE(o.err.find("usage: pmkit verify"), std::string::npos) << joined << "\n" << o.err;
    EXPECT_EQ(o.out.find("order"), std::string::npos) << joined << ": no study should run";
  }
}

TEST(VerifyCommand, OneKernelOneDimension) {
  const Outcome o = run({"--dim", "2", "--kernel", "mp4"});
  EXPECT_EQ(o.status, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("mp4"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("P2M"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("3D"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("linear"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("GRAD"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("adjointness"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("verify: all 3 studies"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("all 1 gradient checks"), std::string::npos) << o.out;
}

}  // namespace
}  // namespace pmkit::test
