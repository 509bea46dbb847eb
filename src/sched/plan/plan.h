/* plan.h — the plan of a graph: what the dispatcher runs, what the backends execute and what
 * the simulator prices. This header is the whole of what a backend may read of a plan; the
 * dispatcher's per-run state is in sched/sched.h and backends never include it.
 *
 * A plan is built from an analysed graph (src/graph) in one pass of the planner (build.c):
 *
 *   order      one topological order of the graph's edges, computed by the analysis
 *              (insertion order unless an explicit edge points backward);
 *   placement  each node's device, by the runtime's policy (policy.h; today's policy keeps the
 *              device the program gave);
 *   lanes      each GPU node's stream (lanes.c): copies on their device's copy streams, a
 *              compute node on the stream of the predecessor whose *heir* it is, a node that
 *              fills the device on the main stream, other chains round-robin;
 *   memory     the temporaries a GPU backend allocates and frees per run, and the *window*
 *              that decides which node frees which dead temporary (its *claims*), with the
 *              ordering edges that claims need (memory.c);
 *   sync       the events each GPU node records and waits for, the *turns* of the nodes that
 *              take their stream in the plan's order, and the split of a stream's last product
 *              (sync.c);
 *   batches    chains of small elementwise GPU nodes launched as one kernel (batches.c);
 *   edges      the CSR successor and predecessor lists over the graph's edges and the claims,
 *              each edge marked *early* when the device orders its two ends;
 *   explain    where each node runs and why, in words (explain.c; weft_node_placement).
 *
 * Every GPU rule reads the machine through a weft__gpu_target (streams, SMs, peer access,
 * knobs) that the backend serving the GPUs fills, so the CUDA backend and the simulator plan
 * the same graph identically. The glossary of these terms is in docs/architecture.md. */
#ifndef WEFT_SCHED_PLAN_H
#define WEFT_SCHED_PLAN_H

#include <stdatomic.h>
#include <stdint.h>

#include "graph/graph.h"

struct weft__backend;
struct weft__plan_exec;

/* The hazard of an edge the planner adds for a resource the analysis does not see (a claim,
 * memory.c); never shown to users as a data hazard. */
#define WEFT__HAZARD_RESOURCE 5

/* ---- the machine the GPU rules plan for --------------------------------------------------- */

enum {
  WEFT__PLAN_MAX_COMPUTE = 8,  /* compute streams per device */
  WEFT__PLAN_MAX_STREAMS = WEFT__PLAN_MAX_COMPUTE + 3,
};

/* A device's streams, by index: its compute streams 0 .. compute - 1, then the copy streams at
 * compute + WEFT__COPY_H2D, + WEFT__COPY_D2H and + WEFT__COPY_PEER. */
enum { WEFT__COPY_H2D = 0, WEFT__COPY_D2H = 1, WEFT__COPY_PEER = 2, WEFT__COPY_STREAMS = 3 };

/* The rules' constants (each rule's file says why it has its value). */
#define WEFT__PLAN_BATCH_MAX 128       /* nodes in one batch */
#define WEFT__PLAN_BATCH_NUMEL 16384   /* elements of a node a batch may hold */
#define WEFT__PLAN_WINDOW_COUNT 2      /* the window: this many times the new buffer ... */
#define WEFT__PLAN_WINDOW_MIN_MIB 64   /*   ... and at least this much stays unclaimed */

typedef struct weft__gpu_dev {
  int compute;            /* compute streams, 1 .. WEFT__PLAN_MAX_COMPUTE */
  int sms;                /* multiprocessors: what "fills the device" means */
} weft__gpu_dev;

typedef struct weft__gpu_target {
  int ngpus;
  int batch;              /* 1: chains of small elementwise nodes are batched */
  int turns;              /* 1: large products and copies take their stream in plan order */
  int window_count;       /* the memory window (memory.c) */
  size_t window_min_bytes;
  weft__gpu_dev *dev;     /* ngpus entries (the planner's array; the backend fills them) */
  /* Whether device a reaches device b over peer access (the backend's can_access_peer). */
  const struct weft__backend *backend;
} weft__gpu_target;

/* The index of copy stream `which` (WEFT__COPY_*) of device d. */
static inline int weft__plan_copy_stream(const weft__gpu_target *t, int d, int which) {
  return t->dev[d].compute + which;
}

/* ---- the plan of one GPU node ------------------------------------------------------------ */

enum {
  WEFT__G_RECORD = 1u << 0, /* records its event after its work (a successor on another stream) */
  WEFT__G_NOTIFY = 1u << 1, /* has a CPU successor: its completion is reported on its own */
  WEFT__G_STAGED = 1u << 2, /* device-to-device copy staged through pinned host memory */
  WEFT__G_BIG = 1u << 3,    /* fills the device on its own: kept in order on the main stream */
  WEFT__G_SPLIT = 1u << 4,  /* a product at the end of its stream whose result goes to the host:
                               computed in two row halves, an event between them (sync.c) */
  WEFT__G_SPLIT_COPY = 1u << 5, /* a copy of such a product's result: copies the first half as
                                   soon as it is done, then the second */
  WEFT__G_DEFER = 1u << 6,  /* in a batch, not its last: its op is added to the batch */
  WEFT__G_FLUSH = 1u << 7,  /* the last of a batch: adds its op and launches the batch */
};

/* Why a GPU node got its lane (explain.c words it). */
enum {
  WEFT__WHY_CHAIN = 0, /* continues the stream of the predecessor whose heir it is */
  WEFT__WHY_BIG,       /* fills the device: the main stream, in program order */
  WEFT__WHY_SPREAD,    /* starts a chain: round-robin over the compute streams */
  WEFT__WHY_H2D,
  WEFT__WHY_D2H,
  WEFT__WHY_PEER,
  WEFT__WHY_STAGED,
  WEFT__WHY_LOCAL_COPY, /* a copy within one device: a compute stream */
};

typedef struct weft__gnode {
  int16_t dev;           /* device of the stream it ends on; -1: not a GPU node */
  int16_t start_dev;     /* staged copies start on the source device */
  uint8_t stream;        /* stream it ends on (index in the device) */
  uint8_t start_stream;  /* stream it starts on */
  uint8_t flags;         /* WEFT__G_* */
  uint8_t why;           /* WEFT__WHY_* */
  uint32_t heir_of;      /* the predecessor whose stream it continues, or UINT32_MAX */
  uint32_t split_of;     /* WEFT__G_SPLIT_COPY: the split product it copies */
  uint32_t batch;        /* WEFT__G_DEFER, WEFT__G_FLUSH: its batch (weft__gpu_plan.batches) */
  uint32_t turn;         /* its turn on its stream (sync.c), or UINT32_MAX: none */
  uint32_t wait_b, wait_e;   /* gpu.lists: nodes whose events it waits for first */
  uint32_t free_b, free_e;   /* gpu.lists: dead temporaries (tensor ids) it frees, after the waits */
  uint32_t alloc_b, alloc_e; /* gpu.lists: temporaries it allocates, after the frees */
} weft__gnode;

/* A batch: the chain of nodes first .. last (each the heir of the one before), len of them. */
typedef struct weft__gbatch {
  uint32_t first, last, len;
} weft__gbatch;

/* The GPU part of a plan; node == NULL when the plan has no GPU node. */
typedef struct weft__gpu_plan {
  weft__gnode *node;     /* per node of the plan (dev -1 for the others) */
  uint32_t *lists;       /* waits, frees and allocations, by the nodes' ranges */
  uint8_t *temp;         /* per tensor: 1 if its storage is made and freed in each run */
  uint32_t nnodes;       /* GPU nodes */
  int eager_only;        /* a node a captured replay cannot hold: a user op (its kernel may do
                            host work) or a potrf or trtri (the host checks its result
                            after each run) */
  weft__gbatch *batches;
  uint32_t nbatches;
  /* Turns: per device and stream, the number of turns and where the stream's first turn is
   * in one array of all turns (turn_base + node.turn indexes it). */
  uint32_t (*turns)[WEFT__PLAN_MAX_STREAMS];
  uint32_t (*turn_base)[WEFT__PLAN_MAX_STREAMS];
  uint32_t nturns;
  uint16_t *used;            /* per device: bit mask of the streams the plan uses */
  weft__gpu_target target;   /* the machine it was planned for (its dev array is the plan's) */
} weft__gpu_plan;

/* ---- the plan ------------------------------------------------------------------------------ */

/* One node of a plan. Ready nodes are queued by pointer (work-stealing deques) or linked
 * through `next_ready` (the dispatcher's injection list), so queuing never allocates. */
typedef struct weft__xnode {
  weft_node *node;
  struct weft__plan *plan;
  struct weft__backend *backend;
  uint32_t succ_begin, succ_end;
  uint32_t pred_begin, pred_end;
  uint32_t id;
  /* The dispatcher's: predecessors not yet released in this run (in the record, not an array
   * of its own: a node's predecessors release it from as many workers, and packed 16 to a
   * cache line the counters of a step's nodes were one line that every worker of a wide
   * step wrote). */
  atomic_uint pending;
  struct weft__xnode *next_ready; /* the dispatcher's; backends never touch it */
  void **args_room;               /* a node of more than WEFT__CTX_INLINE arguments: room for
                                     its kernel context's argument pointers (weft__ctx_bind) */
  void *bstate;                   /* the node's backend state, if its backend keeps any */
} weft__xnode;

enum { WEFT__MAX_BACKENDS = 4 };

typedef struct weft__plan {
  weft_graph *graph;
  uint64_t version;
  uint32_t n;
  size_t m;             /* edges: the graph's and the claims */
  const weft__mem *mem; /* where the arrays come from */
  weft__xnode *x;
  uint32_t *order;      /* a topological order of the nodes */
  uint32_t *succ;       /* CSR of successors; succ_early[k] marks edges released at issue */
  uint8_t *succ_early;
  uint32_t *pred;       /* CSR of predecessors */
  uint32_t *roots;
  uint32_t nroots;
  void **args_room;     /* the nodes' args_room, one block */
  size_t nargs_room;
  weft__gpu_plan gpu;
  void *bstate[WEFT__MAX_BACKENDS];  /* per backend (by weft__backend.index) plan state */
  struct weft__plan_exec *exec;      /* the dispatcher's per-run state (sched/sched.h) */
} weft__plan;

/* ---- the planner --------------------------------------------------------------------------- */

/* Builds g's plan if its version moved since the last one (g->plan), through the runtime's
 * policy and every backend's plan hook. WEFT_OK, or an error with its message set and the old
 * plan kept. */
int weft__plan_build(weft_graph *g);
void weft__plan_free(weft_runtime *rt, weft__plan *p);

/* The rules every GPU backend and the cost model share. */
/* A node's work, for the longest-path heights behind the heirs: 2mnk for a product, a user
 * op's cost hint, else its first argument's element count (plus one). */
double weft__plan_work(const weft_node *nd);
/* Whether a node keeps every SM of a device with `sms` of them busy on its own: a product with
 * at least one 128 x 128 output tile per SM, an elementwise op over 2048 elements per SM. */
int weft__plan_fills_device(const weft_node *nd, int sms);

#endif
