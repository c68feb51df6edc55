// How the OpenMP threads wait between parallel regions.
#pragma once

namespace anvil::kernels {

// Re-executes the program with OMP_WAIT_POLICY=passive (and GOMP_SPINCOUNT=1000, a spin of about ten
// microseconds before sleeping, unless the environment sets one) unless the environment already
// chooses a policy. Spinning workers are fastest on idle cores, but on a shared machine a spinning
// or descheduled worker makes every region's closing barrier wait for a scheduler time slice: a
// two-thread matrix-vector product measured 0.4-2.5 GB/s spinning against 14-18 GB/s passive on
// the development VM (docs/PERFORMANCE.md). libgomp reads the variables before main(), hence the
// re-exec. Call first thing in main(); returns only when no re-exec was needed or it failed.
void prefer_passive_openmp_waiting(char** argv);

}  // namespace anvil::kernels
