/* uv.h — the libuv adapter: launch a weft graph from a libuv loop and get its completion as a
 * callback on the loop's own thread, without ever blocking the loop.
 *
 *     static void on_done(weft_run *run, int status, void *arg) {
 *       if (status != WEFT_OK) fprintf(stderr, "%s\n", weft_run_error(run));
 *     }
 *     ...
 *     int rc = weft_uv_launch(uv_default_loop(), graph, on_done, NULL, NULL);
 *     if (rc != WEFT_OK) fprintf(stderr, "%s\n", weft_last_error()); // on_done is never called
 *     uv_run(uv_default_loop(), UV_RUN_DEFAULT);
 *
 * How it works: each launch owns a uv_async_t on the loop. weft finishes the run on one of its
 * worker threads and calls weft_graph_launch_cb's callback there; the adapter only wakes the
 * loop with uv_async_send from it (which never blocks). On the loop thread the adapter then
 * calls the user's callback, frees the run and closes the async handle. While a run is in
 * flight its handle keeps the loop alive, so uv_run returns only after every launched run has
 * been reported.
 *
 * This header is the only weft header that includes uv.h; the adapter lives in its own library
 * (libweft_uv), so libweft itself does not depend on libuv. Link with -lweft_uv -lweft -luv. */
#ifndef WEFT_UV_H
#define WEFT_UV_H

#include <uv.h>

#include "weft/weft.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Called on the loop's thread once the run has finished. `status` is what weft_run_wait
 * returns: WEFT_OK, the first node error (weft_run_error(run) and weft_run_failed_node(run) say
 * which), or WEFT_ECANCELED. `run` is valid during the call only: the adapter destroys it when
 * the callback returns. The callback may launch the same graph again (its run has ended), or
 * destroy the graph. */
typedef void (*weft_uv_cb)(weft_run *run, int status, void *arg);

/* Launches a run of `g` and arranges for `cb` (may be NULL) to be called with `arg` on the
 * thread running `loop` when the run finishes. Returns at once: the graph runs on weft's
 * workers (and GPUs); the loop is never blocked. If `out` is not NULL it receives the run,
 * which the caller may pass to weft_run_cancel (or weft_run_poll) until `cb` has returned;
 * after that the handle is gone.
 *
 * Returns WEFT_OK, or the error of weft_graph_launch (WEFT_EBUSY when a run of `g` is already
 * in flight, WEFT_ECYCLE, ...; message in weft_last_error()), WEFT_EINVAL for a NULL loop or
 * graph, WEFT_ENOMEM, or WEFT_EIO when libuv cannot create the async handle. If it fails, `cb`
 * is never called (libuv's rule) and nothing is left to clean up.
 *
 * The graph must outlive the run: destroy it in the callback or later, never while the run is
 * in flight (weft_graph_destroy would block the loop until the run ends). A loop with runs in
 * flight is not closable (uv_loop_close returns UV_EBUSY): run it until they have finished, or
 * cancel them first.
 *
 * Thread-safe: call it on the loop's thread only (libuv handles are not thread-safe);
 * different loops on different threads may launch at once. */
WEFT_NODISCARD WEFT_API int weft_uv_launch(uv_loop_t *loop, weft_graph *g, weft_uv_cb cb,
                                           void *arg, weft_run **out);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_UV_H */
