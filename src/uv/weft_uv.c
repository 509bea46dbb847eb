/* weft_uv.c — the libuv adapter (include/weft/uv.h): a run's completion, observed on a weft
 * worker thread, is handed to the loop's thread through a uv_async_t owned by the launch.
 *
 * Life of one launch (a `launch_req`, heap-allocated):
 *
 *   loop thread                         weft worker thread
 *   -----------                         ------------------
 *   uv_async_init(req->async)
 *   weft_graph_launch_cb(on_done, req)  ...nodes run...
 *                                       on_done: set `fired`; uv_async_send(req->async)
 *                                       (then weft sets the run's `done` flag and returns)
 *   on_async: weft_run_wait (returns at once or after the few instructions that set `done`),
 *             user callback, weft_run_destroy, uv_close(req->async)
 *   on_close: free(req)
 *
 * Invariants: after uv_async_send the worker touches nothing of `req` (libuv guarantees that
 * the handle may be closed as soon as its callback runs: uv_async_send finishes its own
 * bookkeeping before the callback is invoked). The user's callback runs only on the loop
 * thread and only after launch succeeded; when launch fails the handle is closed at once and
 * the callback is never called. The hand-off is ordered by an atomic flag with release/acquire
 * order and by weft_run_wait's mutex, not only by libuv's internals, so thread sanitizers see
 * it.
 *
 * Allocation uses the C library's malloc: this library sits outside libweft and its
 * allocator hook. */
#include <stdatomic.h>
#include <stdlib.h>

#include "weft/uv.h"

typedef struct launch_req {
  uv_async_t async; /* first: the handle's address is the request's */
  weft_run *run;
  weft_uv_cb cb;
  void *arg;
  atomic_int fired;
} launch_req;

static void on_close(uv_handle_t *h) { free(h->data); }

/* On the weft worker that finished the run: must not block. */
static void on_done(weft_run *run, int status, void *arg) {
  (void)run;
  (void)status; /* the loop thread reads it back with weft_run_wait */
  launch_req *req = arg;
  /* Release: the run's results are published before the loop sees `fired`. */
  atomic_store_explicit(&req->fired, 1, memory_order_release);
  uv_async_send(&req->async);
  /* `req` may be freed by the loop from here on. */
}

/* On the loop thread. */
static void on_async(uv_async_t *h) {
  launch_req *req = h->data;
  /* Acquire pairs with on_done's release. libuv only calls this after uv_async_send, so
   * `fired` is set; the check keeps a stray wake-up from finishing a run twice. */
  if (!atomic_load_explicit(&req->fired, memory_order_acquire)) return;
  /* The run's `done` flag is set right after on_done returns: this wait is at most that
   * long, and it makes weft_run_error and weft_run_failed_node valid in the callback. */
  int status = weft_run_wait(req->run);
  if (req->cb != NULL) req->cb(req->run, status, req->arg);
  weft_run_destroy(req->run);
  req->run = NULL;
  uv_close((uv_handle_t *)&req->async, on_close);
}

int weft_uv_launch(uv_loop_t *loop, weft_graph *g, weft_uv_cb cb, void *arg, weft_run **out) {
  if (out != NULL) *out = NULL;
  if (loop == NULL || g == NULL) {
    /* libweft's error setter is internal; the message of a NULL argument is its status. */
    return WEFT_EINVAL;
  }
  launch_req *req = calloc(1, sizeof *req);
  if (req == NULL) return WEFT_ENOMEM;
  req->cb = cb;
  req->arg = arg;
  atomic_init(&req->fired, 0);
  if (uv_async_init(loop, &req->async, on_async) != 0) {
    free(req);
    return WEFT_EIO;
  }
  req->async.data = req;
  int rc = weft_graph_launch_cb(g, on_done, req, &req->run);
  if (rc != WEFT_OK) {
    /* No run exists, so on_done never fires: close the unused handle, never call cb. */
    uv_close((uv_handle_t *)&req->async, on_close);
    return rc;
  }
  if (out != NULL) *out = req->run;
  return WEFT_OK;
}
