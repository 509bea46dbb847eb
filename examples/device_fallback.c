/* device_fallback.c — the reference notes' try_gpu / try_all_gpus (5.6.1): ask for GPUs, get
 * the CPU where there are none, and run the same code either way. Also shows what asking for
 * a device that does not exist does: a clear error, not a crash. */
#include <stdio.h>

#include "weft/weft.h"

int main(void) {
  weft_runtime *rt;
  if (weft_runtime_create(NULL, &rt) != WEFT_OK) {
    fprintf(stderr, "%s\n", weft_last_error());
    return 1;
  }
  char a[32], b[32];
  printf("try_gpu(0)  = %s\n", weft_device_str(weft_try_gpu(rt, 0), a, sizeof a));
  printf("try_gpu(10) = %s\n", weft_device_str(weft_try_gpu(rt, 10), b, sizeof b));
  weft_device all[16];
  int n = weft_all_gpus(rt, all, 16);
  printf("all_gpus    =");
  for (int i = 0; i < n && i < 16; i++) printf(" %s", weft_device_str(all[i], a, sizeof a));
  printf("\n");

  weft_graph *g;
  weft_tensor *x = NULL, *bad = NULL, *s = NULL;
  if (weft_graph_create(rt, &g) != WEFT_OK) return 1;
  /* X = ones(2, 3) on try_gpu(): lives on the GPU where there is one. */
  if (weft_tensor_create(g, "X", WEFT_F32, 2, (int64_t[]){2, 3}, weft_try_gpu(rt, 0), weft_ones(), &x) != WEFT_OK ||
      weft_sum(g, x, &s) != WEFT_OK || weft_graph_run(g) != WEFT_OK) {
    fprintf(stderr, "%s\n", weft_last_error());
    return 1;
  }
  double v;
  if (weft_tensor_get(s, 0, &v) != WEFT_OK) return 1;
  printf("sum(ones(2,3) on %s) = %g\n", weft_device_str(weft_tensor_device(x), a, sizeof a), v);
  /* cuda:10 does not exist on this machine: the error says so. */
  int rc = weft_tensor_create(g, "Z", WEFT_F32, 1, (int64_t[]){3}, weft_cuda(10), weft_zeros(), &bad);
  printf("tensor on cuda:10 -> %s: %s\n", weft_status_name(rc), weft_last_error());
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return rc == WEFT_EDEVICE ? 0 : 1;
}
