// The MLS-MPM example on a CPU plan (driver.hpp gives the command line).
#include "driver.hpp"
#include "host_exec.hpp"

int main(int argc, char** argv) { return mpm::main_for<mpm::HostExec>(argc, argv); }
