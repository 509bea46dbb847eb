/* backend.h — the table every device backend fills (cpu, cuda, sim), in the manner of
 * SQLite's sqlite3_io_methods: versioned, append-only, one designated-initializer instance
 * per backend. The scheduler reaches devices only through this table.
 *
 * Storage: `alloc` gives a tensor storage on its device (t->data) and `free` releases it; a
 * backend may leave t->data NULL for tensors it manages per run (GPU temporaries). `read` and
 * `write` are synchronous transfers between a tensor and a host buffer; `init_tensor` applies
 * the tensor's creation initialiser.
 *
 * Execution: `launch` runs one node (ctx->node) and returns WEFT_OK when its work is done, or
 * WEFT__PENDING when the work is enqueued on the device and completion will be reported later
 * by calling weft__sched_complete(ctx->run, ctx->index, status, message) from any thread, or an
 * error. A backend whose flags include WEFT__BACKEND_ASYNC orders its own nodes on the device
 * (streams and events): the scheduler then releases an edge between two of its nodes as soon
 * as the predecessor is *issued*, so a GPU node's GPU successors are enqueued without the host
 * waiting. All other edges are released at completion.
 *
 * Plans: `plan` is called when a graph's plan is (re)built, to attach per-node backend state
 * (streams, events, memory plan) to plan->x[i].bstate; `plan_free` undoes it. `run_begin` and
 * `run_end` bracket each run. */
#ifndef WEFT_BACKEND_H
#define WEFT_BACKEND_H

#include "graph/graph.h"

#define WEFT__BACKEND_VERSION 1

enum {
  WEFT__BACKEND_ASYNC = 1u << 0, /* launch may return WEFT__PENDING; orders its nodes itself */
};

struct weft__plan;
struct weft__backend;

/* What a kernel sees. Built by the scheduler on the worker's stack for each node. */
struct weft_kernel_ctx {
  weft_node *node;
  weft_graph *graph;
  weft_run *run;
  uint32_t index;        /* the node's id */
  weft_device device;
  struct weft__backend *backend;
  void *stream;          /* cuda: the cudaStream_t the node runs on */
  void *blas;            /* cuda: the cublasHandle_t bound to that stream */
  void *data[WEFT_MAX_ARGS];
  char *err;             /* weft_ctx_fail writes here */
  size_t err_size;
};

typedef struct weft__backend_vtable {
  int version; /* WEFT__BACKEND_VERSION */
  const char *name;
  int device_kind; /* weft_device_kind served */
  unsigned flags;  /* WEFT__BACKEND_* */
  int (*init)(struct weft__backend *b, const weft_runtime_options *o);
  void (*fini)(struct weft__backend *b);
  int (*device_count)(const struct weft__backend *b);
  int (*device_info)(const struct weft__backend *b, int index, weft_device_info *out);
  int (*can_access_peer)(const struct weft__backend *b, int a, int c);
  int (*alloc)(struct weft__backend *b, weft_tensor *t);
  void (*free)(struct weft__backend *b, weft_tensor *t);
  int (*read)(struct weft__backend *b, weft_tensor *t, void *dst);
  int (*write)(struct weft__backend *b, weft_tensor *t, const void *src);
  int (*init_tensor)(struct weft__backend *b, weft_tensor *t);
  int (*plan)(struct weft__backend *b, struct weft__plan *p);
  void (*plan_free)(struct weft__backend *b, struct weft__plan *p);
  int (*run_begin)(struct weft__backend *b, struct weft__plan *p);
  void (*run_end)(struct weft__backend *b, struct weft__plan *p);
  int (*launch)(struct weft__backend *b, weft_kernel_ctx *ctx);
  /* Pinned host memory for CPU tensors that GPUs copy to or from (NULL: none). */
  void *(*host_alloc)(struct weft__backend *b, size_t bytes);
  void (*host_free)(struct weft__backend *b, void *p);
} weft__backend_vtable;

typedef struct weft__backend {
  const weft__backend_vtable *vt;
  weft_runtime *rt;
  void *state; /* the backend's own */
} weft__backend;

extern const weft__backend_vtable weft__cpu_backend;
#if WEFT_HAVE_CUDA
extern const weft__backend_vtable weft__cuda_backend;
#endif

/* Reports the completion of a node a backend launched with WEFT__PENDING. `message` (may be
 * NULL) explains a failure. Callable from any thread, including CUDA host callbacks: it takes
 * no CUDA call and never blocks on the device. */
void weft__sched_complete(weft_run *run, uint32_t index, int status, const char *message);

/* The CPU kernels, shared by the CPU backend, the serial interpreter and (for host-side
 * checks) other backends: executes `ctx->node` with host pointers in ctx->data. */
int weft__cpu_exec(weft_kernel_ctx *ctx);
/* Sets the threads each OpenBLAS call may use (process-wide). */
void weft__cpu_set_blas_threads(int n);
/* Applies `init` to n elements of dtype at p (element indices start at 0). */
void weft__cpu_fill(void *p, int dtype, int64_t n, weft_init init);

#endif
