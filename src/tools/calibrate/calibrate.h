/* calibrate.h — the calibration tool: measures a machine profile for the simulator (weft/sim.h)
 * on a runtime's devices and writes it as JSON.
 *
 * Not part of libweft: the static library weft_calibrate_tool (src/tools/calibrate), built on
 * libweft's public API and jansson, which the `weft calibrate` command, benchmarks/weft_calibrate
 * and bench_sim_accuracy --calibrate link. calibrate.c says how each figure is measured;
 * docs/simulator.md ("Calibration") says it for users. */
#ifndef WEFT_TOOLS_CALIBRATE_H
#define WEFT_TOOLS_CALIBRATE_H

#include <stdio.h>

#include "weft/weft.h"

typedef struct weft_calibrate_options {
  const char *name;   /* the profile's "name" (NULL: "calibrated") */
  int quick;          /* 1: fewer sizes and repetitions (a rough profile in seconds) */
  FILE *log;          /* progress and each measurement, one line each (NULL: silent) */
} weft_calibrate_options;

/* Fills `o` with the defaults. */
void weft_calibrate_options_init(weft_calibrate_options *o);

/* Measures a machine profile on runtime `rt` and writes it to `out_path`: GEMM rates over
 * sizes (f32 and f64, GPU and one CPU thread), memory bandwidth, random-fill rates, host<->
 * device copy bandwidth and latency (pinned and pageable), device-to-device bandwidth (with 2
 * or more GPUs), and the host costs of launching a node, of an event on a cross-stream edge,
 * of a GPU-to-host notification, and of a replayed node. Every figure is taken by running
 * graphs through weft and timing them (the median of several runs; per-node costs from the
 * difference between two graph lengths, so fixed costs cancel), so the profile prices what
 * weft actually achieves. With no GPU, the GPU figures are left as in the "h100" profile and
 * the profile's "source" says so. On a simulated runtime the times are virtual, which makes
 * calibration checkable without a GPU. The profile written is checked with
 * weft_sim_profile_check. `o` may be NULL for the defaults. Returns WEFT_OK or an error, whose
 * message weft_calibrate_last_error gives; takes from a few seconds (quick) to about a minute.
 * Thread-safe: no (it runs graphs on rt, which must have no other work; it creates simulated
 * runtimes, and creating a runtime sets OpenBLAS's thread count for the whole process). */
WEFT_NODISCARD int weft_calibrate(weft_runtime *rt, const weft_calibrate_options *o,
                                  const char *out_path);

/* The message of the calling thread's last failed weft_calibrate: the tool's own (a temporary
 * file, the profile's JSON) or, where libweft failed, weft_last_error()'s. Valid until the
 * thread's next call into the tool or libweft. Thread-safe: yes. */
const char *weft_calibrate_last_error(void);

#endif
