/* linear_layer.c — the reference notes' nn.Linear on a GPU (5.6.3): parameters live on the
 * device, the input is copied there once, and the output is read back. The layer is
 * y = relu(x . W^T + b), run over 5 batches as one graph run 5 times: the weights persist
 * between runs, the input is rewritten before each. */
#include <stdio.h>

#include "weft/weft.h"

#define CHECK(x)                                                \
  do {                                                          \
    if ((x) != WEFT_OK) {                                       \
      fprintf(stderr, "linear_layer: %s\n", weft_last_error()); \
      return 1;                                                 \
    }                                                           \
  } while (0)

int main(void) {
  enum { BATCH = 4, IN = 3, OUT = 2 };
  weft_runtime *rt;
  CHECK(weft_runtime_create(NULL, &rt));
  weft_device dev = weft_try_gpu(rt, 0);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x_host, *w, *b, *x = NULL, *z = NULL, *y = NULL, *y_host = NULL;
  CHECK(weft_tensor_create(g, "x_host", WEFT_F32, 2, (int64_t[]){BATCH, IN}, weft_cpu(), weft_zeros(), &x_host));
  CHECK(weft_tensor_create(g, "W", WEFT_F32, 2, (int64_t[]){OUT, IN}, dev, weft_uniform(-0.2, 0.6, 11), &w));
  CHECK(weft_tensor_create(g, "b", WEFT_F32, 1, (int64_t[]){OUT}, dev, weft_full(0.1), &b));
  CHECK(weft_copy(g, x_host, dev, &x));
  CHECK(weft_linear(g, x, w, b, &z));
  CHECK(weft_relu(g, z, &y));
  CHECK(weft_copy(g, y, weft_cpu(), &y_host));
  char name[32];
  printf("linear layer %d -> %d on %s\n", IN, OUT, weft_device_str(dev, name, sizeof name));
  for (int batch = 0; batch < 5; batch++) {
    float in[BATCH][IN], out[BATCH][OUT];
    for (int r = 0; r < BATCH; r++)
      for (int c = 0; c < IN; c++) in[r][c] = 0.5f * (float)(batch + 1) + 0.25f * (float)(r - c);
    CHECK(weft_tensor_write(x_host, in, sizeof in));
    CHECK(weft_graph_run(g));
    CHECK(weft_tensor_read(y_host, out, sizeof out));
    printf("batch %d: y[0] = (%.4f, %.4f)  y[3] = (%.4f, %.4f)\n", batch, out[0][0], out[0][1],
           out[3][0], out[3][1]);
  }
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return 0;
}
