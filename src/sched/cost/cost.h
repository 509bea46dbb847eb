/* cost.h — the cost model: what a node costs where it runs, priced from a machine profile
 * (profile.h). One model for every user of costs: the simulator's event simulation
 * (src/backends/sim/des.c) prices a plan with it, and placement policies (src/sched/plan/) will
 * choose devices with it.
 *
 * Prices, in seconds:
 *   GPU compute   a product by its GEMM rate at its size (whole 128 x 128 output tiles when it
 *                 fills the device; no less than the smallest calibrated product), elementwise
 *                 ops and reductions by bytes over memory bandwidth, random fills at the fill
 *                 bandwidth, user ops by their cost hint at the device's peak; never less than
 *                 a kernel's floor (kernel_s). With it, the *share* of the device the kernel
 *                 needs to run at full speed, (0, 1].
 *   copies        latency plus bytes over the link's bandwidth (pinned or pageable host side,
 *                 peer or staged through the host between GPUs); within one device, twice the
 *                 bytes over memory bandwidth.
 *   CPU           a product at the BLAS rate of its threads, other ops by bytes over one
 *                 thread's bandwidth, plus the dispatcher's cost per node (node_s).
 *   submission    the host's time to enqueue a GPU node: a launch (a cuBLAS call costs more),
 *                 plus an event per predecessor on another stream; for a product that does not
 *                 fill the device, no less than the profile's measured gemm_f32_wide_s.
 *   batches       a node of a batch costs its batch's kernel batch_op_s (the first also the
 *                 kernel's launch floor) and the host batch_node_s. */
#ifndef WEFT_SCHED_COST_H
#define WEFT_SCHED_COST_H

#include "graph/graph.h"
#include "sched/cost/profile.h"

typedef struct weft__cost_model {
  weft__sim_profile prof;
  int host_lanes;   /* CPU workers */
  int blas_threads; /* BLAS threads of one CPU GEMM */
} weft__cost_model;

/* A node on a GPU (or a copy between devices, on a copy engine), without the host's
 * submission; *share receives the part of the device it needs (0 for a copy engine's). */
double weft__cost_gpu(const weft__cost_model *m, const weft_node *n, double *share);
/* A node on a CPU worker. */
double weft__cost_cpu(const weft__cost_model *m, const weft_node *n);
/* ... of a product or dense linear-algebra node on one worker while every worker runs one (the
 * host's gemm_*_wide_flops curve), or -1: not such a node, or the profile has no such curve. */
double weft__cost_cpu_wide(const weft__cost_model *m, const weft_node *n);
/* Whether the CPU backend splits node n over idle workers (a product of WEFT__CPU_SPLIT_FLOPS or
 * more, cpu_kernels.c). */
int weft__cost_cpu_splits(const weft_node *n);
/* The host's time to enqueue GPU node n with `events` predecessors on other streams, and the
 * least it takes with other nodes ready (0: no such floor). */
void weft__cost_submit(const weft__cost_model *m, const weft_node *n, int events, double *submit,
                       double *submit_min);
/* A node in a batch: its device time in the batch's kernel (`first`: it opens the kernel). */
double weft__cost_batch_op(const weft__cost_model *m, const weft_node *n, int first);
/* Whether a copy node moves data between two devices (on a copy engine). */
int weft__cost_crosses(const weft_node *n);

#endif
