// The MLS-MPM example on a CUDA plan (driver.hpp gives the command line).
#include "device_exec.cuh"
#include "driver.hpp"

int main(int argc, char** argv) { return mpm::main_for<mpm::DeviceExec>(argc, argv); }
