/* mpi_rank_dies.c — a rank that dies in the middle of a run (tests/mpi_dies.sh): rank 1 kills
 * itself (SIGKILL) in the kernel of the node that writes the tensor rank 0 waits for. The job
 * must end, every rank of it, within a bounded time, with the dead rank named; a rank left
 * waiting forever for the message is the failure this guards against. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "weft/weft.h"

static int die(weft_kernel_ctx *ctx) {
  (void)ctx;
  fprintf(stderr, "mpi_rank_dies: rank 1 kills itself in node 'die'\n");
  fflush(stderr);
  raise(SIGKILL);
  return WEFT_OK;
}

int main(void) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = 1;
  o.max_gpus = 0;
  o.flags = WEFT_RUNTIME_QUIET;
  weft_runtime *rt;
  if (weft_runtime_create(&o, &rt) != WEFT_OK || weft_runtime_ranks(rt) < 2) {
    fprintf(stderr, "mpi_rank_dies: needs 2 ranks under mpirun: %s\n", weft_last_error());
    return 2;
  }
  weft_op_desc d;
  memset(&d, 0, sizeof d);
  d.name = "die";
  d.nargs = 1;
  d.access[0] = WEFT_WRITE;
  d.cpu = die;
  const weft_op *op;
  weft_graph *g;
  weft_tensor *x = NULL, *y = NULL, *z = NULL;
  int64_t n = 1024;
  if (weft_op_register(rt, &d, &op) != WEFT_OK || weft_graph_create(rt, &g) != WEFT_OK ||
      weft_tensor_create(g, "x", WEFT_F64, 1, &n, weft_on_rank(weft_cpu(), 1), weft_zeros(), &x) != WEFT_OK ||
      weft_call(g, op, &x, 1, NULL, 0) != WEFT_OK || weft_scale(g, x, 2.0, &y) != WEFT_OK ||
      weft_copy(g, y, weft_cpu(), &z) != WEFT_OK) {
    fprintf(stderr, "mpi_rank_dies: %s\n", weft_last_error());
    return 2;
  }
  int rc = weft_graph_run(g); /* rank 0 waits for y from rank 1, which dies */
  fprintf(stderr, "mpi_rank_dies: rank %d: the run returned %d (%s)\n", weft_runtime_rank(rt), rc, weft_last_error());
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return 1; /* a rank that survived its peer's death must not look like success */
}
