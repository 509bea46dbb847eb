#!/bin/sh
# Runs weft ($WEFT_BIN) as if rank 2 were alone on a host of its own, where the launcher's
# count of the host's ranks differs from the other ranks' (mpirun -np 3 --host a:2,b:1): the
# ranks must still place an auto program alike (tests/mpi.cmake, test_mpi_auto_uneven_hosts).
if [ "${OMPI_COMM_WORLD_RANK:-}" = 2 ]; then
  OMPI_COMM_WORLD_LOCAL_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0
  export OMPI_COMM_WORLD_LOCAL_SIZE OMPI_COMM_WORLD_LOCAL_RANK
fi
exec "$WEFT_BIN" "$@"
