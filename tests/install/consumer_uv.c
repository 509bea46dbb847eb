/* consumer_uv.c — a libuv program built against an installed weft: a run's completion
 * arrives as a callback on the loop thread. */
#include <stdio.h>
#include <uv.h>
#include <weft/uv.h>

static int called;

static void done(weft_run *run, int status, void *arg) {
  (void)run;
  (void)arg;
  called = status == WEFT_OK ? 1 : -1;
}

int main(void) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.max_gpus = 0;
  o.flags = WEFT_RUNTIME_QUIET;
  weft_runtime *rt;
  weft_graph *g;
  weft_tensor *a, *s = NULL;
  if (weft_runtime_create(&o, &rt) || weft_graph_create(rt, &g) ||
      weft_tensor_create(g, "a", WEFT_F32, 1, (int64_t[]){4}, weft_cpu(), weft_ones(), &a) ||
      weft_sum(g, a, &s)) {
    fprintf(stderr, "consumer_uv: %s\n", weft_last_error());
    return 1;
  }
  uv_loop_t loop;
  uv_loop_init(&loop);
  if (weft_uv_launch(&loop, g, done, NULL, NULL) != WEFT_OK) {
    fprintf(stderr, "consumer_uv: %s\n", weft_last_error());
    return 1;
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  double v = 0;
  if (weft_tensor_get(s, 0, &v) != WEFT_OK) return 1;
  printf("consumer_uv: callback %s, sum = %g\n", called == 1 ? "ok" : "missing", v);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return called == 1 && v == 4.0 ? 0 : 1;
}
