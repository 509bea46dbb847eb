/* test_mpi_oracle.c — the differential oracle (test_oracle.c) across ranks, run under mpirun
 * with 2, 3 and 4 ranks (tests/mpi.cmake): every input of the random programs is owned by a
 * random rank, every rank builds the same programs and runs its nodes, and every kept tensor,
 * gathered from its owner, must be bit for bit the serial interpreter's on every rank. */
#define WEFT_ORACLE_MPI 1
#include "test_oracle.c"
