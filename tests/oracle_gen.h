/* oracle_gen.h — the differential oracle's program generator: seeded random weft programs built
 * through the public API only, so that any front end (the C API, a .weft round trip) can
 * replay them and any executor (the scheduler, a serial interpreter) can be checked on them.
 *
 * A program is: a few tensors (f32/f64, 0-D to 4-D, mostly small 1-D and 2-D shapes, some with
 * a zero dimension; on the CPU, or with cfg->devices > 1 also on GPUs, so that weft inserts
 * copies) with random creation initialisers; then a sequence of nodes: every
 * built-in op (mm, add, sub, mul, scale, relu, sum, norm, linear with and without bias, copy
 * to a device, fill), results either new tensors or written into existing ones (in place into an
 * input too), user ops over several tensors with READ, WRITE and READ_WRITE accesses and a
 * parameter, and random forward explicit edges; most op results are kept (weft_tensor_keep),
 * some are left as temporaries. A few programs end with a backward explicit edge between two
 * nodes that touch the same tensor, which closes a dependency cycle.
 *
 * Determinism: the same seed and configuration build the same graph (same tensors, nodes,
 * accesses, names, parameters, edges) on every call and every machine. The user ops' CPU
 * kernels are deterministic functions of their inputs and parameters, so a graph's results
 * depend only on the order its conflicting nodes run in. */
#ifndef WEFT_ORACLE_GEN_H
#define WEFT_ORACLE_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "weft/weft.h"

/* What programs oracle_build makes. Fill with oracle_cfg_init, then change what you need. */
typedef struct oracle_cfg {
  int min_nodes, max_nodes; /* nodes per program, inserted copies excluded (default 4..32) */
  int max_inputs;           /* tensors created before the first node: 1..max (default 6) */
  int max_dim;              /* largest dimension (default 6) */
  int max_ndim;             /* highest rank, 0..4 (default 4) */
  int f64_percent;          /* share of f64 dtypes (default 30) */
  int zero_dims;            /* 1: a dimension may be 0 now and then (default 1) */
  int user_ops;             /* 1: use the oracle's user ops; needs oracle_register_ops (default 1) */
  int keep_percent;         /* share of new op results marked kept (default 75) */
  int edge_percent;         /* chance per node of one random forward explicit edge (default 15) */
  int cycle_per_mille;      /* programs that end with a cycle-closing backward edge (default 15);
                               with devices > 1 the two nodes may only conflict through a copy
                               weft inserted, which orders nothing: use 0 there */
  int auto_percent;         /* share of inputs created on weft_auto() (default 0): ops on them are
                               placed by the planner */
  int tiles_percent;        /* chance per node of a tiled Cholesky block instead (default 0): a
                               symmetric positive definite matrix made by gemm, partitioned,
                               factored by potrf, trsm, syrk and gemm on its tiles, then summed
                               whole */
  int devices;              /* 1: CPU only (default); N: the CPU and cuda:0..N-2 where they exist
                               (with user ops: a simulated machine, see oracle_register_ops) */
  int ranks;                /* > 1: intended device d is rank d's CPU (MPI: every rank builds the
                               same program; set devices to the same count); 1 (default): none */
  int large_percent;        /* share of 1-D random inputs of 2^18 to 3 x 2^18 elements (default 0):
                               elementwise ops, fills, copies and reductions over more than one
                               of the CPU kernels' chunks, split across the workers */
} oracle_cfg;

/* What a built program holds, for the caller's checks. */
typedef struct oracle_info {
  size_t nodes;       /* weft_graph_node_count after the build */
  size_t tensors;     /* weft_graph_tensor_count after the build */
  int cycle;          /* 1 if the program ends with a backward edge that closes a cycle */
  size_t cycle_from;  /* that edge: node cycle_from (the later one) -> node cycle_to */
  size_t cycle_to;
} oracle_info;

/* Fills `cfg` with the defaults above. */
void oracle_cfg_init(oracle_cfg *cfg);

/* Registers the oracle's user ops in `rt` (names start with "orc_"). They have a CPU kernel
 * only, except on a simulated machine, where they may also be placed on its GPUs (which compute
 * with the CPU kernel). Calling it again on the same runtime is a no-op. Aborts the process if
 * the runtime refuses one (a broken build). */
void oracle_register_ops(weft_runtime *rt);

/* Builds the program of `seed` into the empty graph `g` (cfg NULL: the defaults). Returns
 * WEFT_OK, or the status of the first weft call that failed (its message is in
 * weft_last_error()), or WEFT_ENOENT if cfg->user_ops is set and the runtime lacks the
 * oracle's ops. Thread-safe: yes, for different graphs. */
int oracle_build(weft_graph *g, uint64_t seed, const oracle_cfg *cfg);

/* As oracle_build, and describes the program in *info (may be NULL). */
int oracle_build_info(weft_graph *g, uint64_t seed, const oracle_cfg *cfg, oracle_info *info);

/* Continues the program of `seed` built by oracle_build: adds `nodes` more random nodes (and
 * now and then a new input tensor) over all of g's tensors. Round r of a seed always adds the
 * same nodes to the same graph, so two twins grown alike stay identical. Returns as
 * oracle_build does. */
int oracle_grow(weft_graph *g, uint64_t seed, int round, int nodes, const oracle_cfg *cfg);

/* The program's own tensors of g — all but the copies weft inserted — in creation order: stores
 * up to `cap` of them in out (may be NULL) and returns how many there are. They correspond one
 * to one between two graphs of one seed, whatever copies either holds. */
size_t oracle_program_tensors(weft_graph *g, weft_tensor **out, size_t cap);

/* The serial interpreter: runs a graph's nodes one by one in insertion order with weft's CPU
 * kernels (weft__cpu_exec) on buffers of its own, which start from the tensors' creation
 * initialisers as weft's storage does. It reads the graph only (never launches it), so it is
 * given a second, identically built graph. Thread-safe: yes, for different interpreters. */
typedef struct oracle_serial oracle_serial;

/* Buffers for every tensor of g (CPU tensors only), initialised; NULL if out of memory. */
oracle_serial *oracle_serial_create(weft_graph *g);
void oracle_serial_destroy(oracle_serial *s);
/* Gives buffers (with their creation initialisers) to tensors created since; WEFT_ENOMEM. */
int oracle_serial_sync(oracle_serial *s);
/* One run of every node. Returns WEFT_OK or the first kernel's error (message in msg). */
int oracle_serial_run(oracle_serial *s, char *msg, size_t msg_size);
/* The contents of tensor `id` (NULL for a tensor of zero bytes). */
void *oracle_serial_data(oracle_serial *s, size_t id);

/* Compares graph `ga` after a run with the interpreter of its twin, tensor by tensor of the
 * program (oracle_program_tensors): every kept one must be bit for bit the interpreter's, every
 * temporary must refuse to be read (WEFT_ESTATE). The twin may be built on a CPU-only runtime
 * (no copies: the program exactly as written) when ga's tensors live on several devices.
 * Returns 0, or 1 with what differs in msg. `bytes`, if not NULL, grows by the bytes compared. */
int oracle_compare(weft_graph *ga, oracle_serial *s, char *msg, size_t msg_size, long *bytes);

#endif
