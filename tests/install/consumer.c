/* consumer.c — a program built against an installed weft: a 2x2 product on the CPU. */
#include <stdio.h>
#include <weft/weft.h>

int main(void) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.max_gpus = 0;
  o.flags = WEFT_RUNTIME_QUIET;
  weft_runtime *rt;
  weft_graph *g;
  weft_tensor *a, *p = NULL;
  double v;
  if (weft_runtime_create(&o, &rt) || weft_graph_create(rt, &g) ||
      weft_tensor_create(g, "a", WEFT_F64, 2, (int64_t[]){2, 2}, weft_cpu(), weft_full(2), &a) ||
      weft_mm(g, a, a, &p) || weft_graph_run(g) || weft_tensor_get(p, 0, &v)) {
    fprintf(stderr, "consumer: %s\n", weft_last_error());
    return 1;
  }
  printf("consumer: (2*2 + 2*2) = %g\n", v);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return v == 8.0 ? 0 : 1;
}
