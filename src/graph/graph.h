/* graph.h — the internal layout of graphs, tensors and nodes, shared by src/graph (which
 * builds and analyses them) and src/sched (which plans and runs them).
 *
 * A graph is a program: `nodes` in insertion order, each with an access list over `tensors`.
 * Everything the graph owns comes from its arena and is freed with it. Analysis turns the
 * access lists into `edges` (RAW, WAR, WAW and explicit) and marks temporaries; it is redone
 * when `version` moved since `analysed_version`. Nothing here knows about threads or devices
 * beyond the device value each tensor and node carries. */
#ifndef WEFT_GRAPH_H
#define WEFT_GRAPH_H

#include <stdatomic.h>

#include "util/util.h"

typedef enum weft__op_kind {
  WEFT__OP_MM = 0,
  WEFT__OP_ADD,
  WEFT__OP_SUB,
  WEFT__OP_MUL,
  WEFT__OP_SCALE,
  WEFT__OP_RELU,
  WEFT__OP_SUM,
  WEFT__OP_NORM,
  WEFT__OP_LINEAR,
  WEFT__OP_COPY,
  WEFT__OP_FILL,
  WEFT__OP_GEMM,  /* the dense linear-algebra ops: in place, params in weft__la */
  WEFT__OP_POTRF,
  WEFT__OP_TRSM,
  WEFT__OP_SYRK,
  WEFT__OP_TRMM,
  WEFT__OP_TRTRI,
  WEFT__OP_USER,
  WEFT__OP_COUNT
} weft__op_kind;

/* "mm", "add", ... for built-in kinds. */
const char *weft__op_kind_name(int kind);
/* The built-in kind called `name`, or -1. */
int weft__op_kind_find(const char *name);

/* A registered user op (owned by the runtime). */
struct weft_op {
  weft_op_desc desc;
  char *name;
};

enum {
  WEFT__T_AUTO = 1u << 0,     /* created by an op with *out == NULL */
  WEFT__T_KEEP = 1u << 1,     /* weft_tensor_keep was called */
  WEFT__T_TEMP = 1u << 2,     /* analysis: auto, not kept, read by a later node */
  WEFT__T_INSERTED = 1u << 3, /* the destination of an inserted copy */
  WEFT__T_PINNED = 1u << 4,   /* a CPU tensor a GPU copies to or from: pinned storage */
  WEFT__T_AUTODEV = 1u << 5,  /* created on weft_auto(): `device` is the planner's (auto until
                                 the first placement, then the home it chose) */
  WEFT__T_EVERY_RANK = 1u << 6, /* an auto tensor written before its first placement: on this
                                   rank's host, and alike on every rank's (SPMD) */
  WEFT__T_PLACED = 1u << 7,     /* an auto tensor the planner gave a home (`device`) */
};

/* How a tensor's storage was obtained (weft_tensor.storage_kind), for the matching free. */
enum {
  WEFT__S_NONE = 0,   /* no storage yet */
  WEFT__S_EMPTY,      /* zero bytes: nothing to allocate */
  WEFT__S_SMALL,      /* host, from the graph's storage arena */
  WEFT__S_HEAP,       /* host, aligned heap block */
  WEFT__S_PINNED,     /* host, pinned by a GPU backend */
  WEFT__S_DEVICE,     /* device memory, owned by the tensor's backend */
  WEFT__S_VIEW,       /* a tile: its parent's storage */
  WEFT__S_IPC,        /* device memory the host's other processes can map (weft_tensor.ipc) */
};

/* What few tensors have, apart from the tensor, so that a tensor is two lines (128 bytes), not
 * three: a build writes each of its lines once (see weft__node_rare). Made on first use, on the
 * graph's building thread; read through the accessors below. */
typedef struct weft__tensor_rare {
  weft_init init;   /* the creation initialiser, where it is not all zero (weft_zeros) */
  const char *name; /* NULL: the name is "t<id>", written into autoname on demand */
  /* Copy cache for automatic copies: this tensor's copies, at most one per device (the list
   * runs through copy_next, newest first), valid until a later node writes this tensor or the
   * copy. So readers on several devices (or ranks) in turn share one copy on each. */
  weft_tensor *copy_cache;
  weft_tensor *copy_next; /* an inserted copy: the next copy of the same tensor in its cache */
  weft_tensor *copy_src;  /* an inserted copy: the tensor it copies (whose cache it may be in) */
} weft__tensor_rare;

struct weft_tensor {
  /* The fields the analysis, the plan and the dispatch read for every access come first, in
   * one cache line (a tensor is two, and starts one: graph.c allocates it 64-aligned); what
   * materialisation reads besides (numel, shape) is in the second. */
  weft_graph *graph;
  uint32_t id;
  uint8_t dtype, ndim, flags;
  uint8_t storage_kind; /* how `data` was allocated, for the matching free */
  /* Tiles (weft_tensor_tiles): a tile's place in the tensor it views, a partitioned tensor's
   * grid. NULL for the rest. */
  struct weft__view *view;
  struct weft__grid *grid;
  /* Storage, owned by the scheduler (src/sched/storage.c): NULL until materialised. */
  void *data;
  size_t bytes;
  weft_device device;
  uint8_t initialised; /* the creation initialiser has been applied */
  uint8_t ipc;         /* a GPU tensor another rank's GPU copies into: storage the processes of
                          its host can map (CUDA IPC; storage.c marks it, the GPU backend gives it) */
  int64_t numel;
  int64_t shape[WEFT_MAX_DIMS];
  weft__tensor_rare *rare; /* NULL: none of its fields set */
  char autoname[15];
  /* 0: autoname not written, 1: being written, 2: ready. A worker describing a failed node and
   * the user asking for a name may make it at the same moment: one writes, the other waits. */
  atomic_uchar autoname_state;
};

/* t's rare fields, made (zeroed, in the graph's arena) on first use; NULL when out of memory
 * (message set). On the graph's building thread. */
weft__tensor_rare *weft__tensor_rare_of(weft_tensor *t);
static inline weft_init weft__tensor_init(const weft_tensor *t) {
  return t->rare != NULL ? t->rare->init : (weft_init){0};
}
static inline weft_tensor *weft__copy_cache(const weft_tensor *t) { return t->rare != NULL ? t->rare->copy_cache : NULL; }
static inline weft_tensor *weft__copy_next(const weft_tensor *t) { return t->rare != NULL ? t->rare->copy_next : NULL; }
static inline weft_tensor *weft__copy_src(const weft_tensor *t) { return t->rare != NULL ? t->rare->copy_src : NULL; }

/* A tile: rows x cols of `parent` from element `offset` (row-major), rows `ld` elements
 * apart. Its storage is the parent's. */
typedef struct weft__view {
  weft_tensor *parent;
  int64_t offset, ld;
  int64_t i, j; /* its place in the grid */
} weft__view;

/* A partitioned tensor's grid: rows x cols tiles of tile[0] x tile[1] elements (the last ones
 * ragged), the first with id `first` and the rest after it in row-major order. */
typedef struct weft__grid {
  int64_t rows, cols;
  int64_t tile[2];
  uint32_t first;
  int P, Q; /* distributed over a P x Q grid of places (weft_tensor_distribute); 0: not */
  int gpus; /* the places: the ranks' CPUs (0), or their GPUs, this many a rank */
  int split; /* an auto tensor whose tiles each have a home of their own (placement decides:
                sched/plan/place.c): its tiles have storage there, it has none */
} weft__grid;

/* The place that owns tile (i, j) of a grid distributed 2-D block-cyclically over P x Q places:
 * place p = (i mod P) Q + (j mod Q), the CPU of rank p, or GPU p mod G of rank p / G. */
static inline weft_device weft__grid_place(const weft__grid *g, int64_t i, int64_t j) {
  int p = (int)(i % g->P) * g->Q + (int)(j % g->Q);
  weft_device d = {WEFT_DEVICE_CPU, 0, p};
  if (g->gpus > 0) d = (weft_device){WEFT_DEVICE_CUDA, p % g->gpus, p / g->gpus};
  return d;
}

/* What a distributed grid's places are, for messages: "ranks" or "GPUs". */
static inline const char *weft__grid_places(const weft__grid *g) { return g->gpus > 0 ? "GPUs" : "ranks"; }

/* Whether t is a tensor whose tiles are distributed over ranks (it has no one home, and no
 * storage: its tiles have their own, each on its rank). */
static inline int weft__tensor_distributed(const weft_tensor *t) { return t->grid != NULL && t->grid->P > 0; }

/* Whether t is a partitioned tensor with no storage of its own: its tiles have theirs, each
 * where it lives (a distributed tensor's on their places, a split auto tensor's at their
 * homes). Reads and writes of the whole go tile by tile. */
static inline int weft__tensor_tiles_own(const weft_tensor *t) {
  return t->grid != NULL && (t->grid->P > 0 || t->grid->split);
}

/* Whether t is a tile with storage of its own: a tile of a distributed or split tensor,
 * contiguous, where it lives (its `view` keeps its place in the whole, for initialisers and
 * gathers). */
static inline int weft__tile_owns_storage(const weft_tensor *t) {
  return t->view != NULL && weft__tensor_tiles_own(t->view->parent);
}

/* The parameters of a dense linear-algebra node (weft_node.params). */
typedef struct weft__la {
  double alpha, beta;
  uint8_t trans_a, trans_b, side, uplo; /* syrk's trans is trans_a */
} weft__la;

/* The tensor that owns t's storage: t, or the root of the views it is one of, or the tile of a
 * distributed or split tensor it is (or is a view of), which has storage of its own. */
static inline const weft_tensor *weft__storage_owner(const weft_tensor *t) {
  while (t->view != NULL && !weft__tile_owns_storage(t)) t = t->view->parent;
  return t;
}

/* weft_device_equal, inlined where every node's arguments are checked (ops.c). */
static inline int weft__same_device(weft_device a, weft_device b) {
  return a.kind == b.kind && a.index == b.index && a.rank == b.rank;
}

/* The device a tensor asks for: auto for one created on weft_auto() (whatever home the planner
 * gave it since), else its device. Ops derive their node's device from it. */
static inline weft_device weft__tensor_dev(const weft_tensor *t) {
  return (t->flags & WEFT__T_AUTODEV) ? (weft_device){WEFT_DEVICE_AUTO, 0} : t->device;
}

/* weft__tensor_dev by address, for loops over many tensors: a struct returned by value may go
 * through the stack, written in 4-byte parts and read back whole (a store-forwarding stall). */
static inline const weft_device *weft__tensor_devp(const weft_tensor *t) {
  static const weft_device auto_dev = {WEFT_DEVICE_AUTO, 0, 0};
  return (t->flags & WEFT__T_AUTODEV) ? &auto_dev : &t->device;
}

/* A 2-D tensor's row stride in elements (a tile's is its parent's), and whether its
 * elements are contiguous (every tensor but a tile narrower than its parent). */
static inline int64_t weft__tensor_ld(const weft_tensor *t) {
  return t->view != NULL && !weft__tile_owns_storage(t) ? t->view->ld : t->ndim == 2 ? t->shape[1] : 1;
}
static inline int weft__tensor_contiguous(const weft_tensor *t) {
  return t->view == NULL || t->ndim != 2 || t->shape[0] <= 1 || t->view->ld == t->shape[1] ||
         weft__tile_owns_storage(t);
}

/* Appends to g a node like n (same op, parameters, scalars, name and origin) on `device` with
 * the arguments `args` (n's modes, other tensors of g), flagged `flags`: how the planner lowers
 * a placed graph (sched/plan/place.c). WEFT_OK or WEFT_ENOMEM. */
int weft__node_clone(weft_graph *g, const weft_node *n, weft_tensor *const *args, weft_device device,
                     unsigned flags, weft_node **out);
/* Whether a copy from device s to device d of another rank goes as one copy between their GPUs
 * (ranks of one host whose GPUs map each other's memory: the transport's CUDA IPC), not
 * through their hosts. The same answer on every rank (the runtime's agreed place facts). */
int weft__gpu_direct(const weft_runtime *rt, weft_device s, weft_device d);
/* Appends a copy node src -> dst to g on `device`, flagged `flags`. */
int weft__copy_node(weft_graph *g, weft_tensor *src, weft_tensor *dst, weft_device device, unsigned flags);

typedef struct weft__arg {
  weft_tensor *t;
  uint8_t mode; /* weft_access */
} weft__arg;

enum { WEFT__N_INSERTED = 1u << 0, WEFT__N_AUTO = 1u << 1 /* its device is the planner's */ };

/* What few nodes have, apart from the node: a user op's node and its arguments take two lines
 * or less, not three (a build writes every line of a node once, and on the GPU hosts a line
 * costs: docs/architecture.md, "Building a graph"). Read through the accessors below; written
 * through weft__node_rare, which makes it on first use. */
typedef struct weft__node_rare {
  double alpha;                /* scale, and the linear-algebra ops' */
  weft_init fill;              /* fill */
  const weft_tensor **targs;   /* user ops with a cost hint: the argument tensors in order */
  const char *name, *origin;   /* NULL: none */
} weft__node_rare;

struct weft_node {
  weft_graph *graph;
  uint32_t id;
  uint8_t kind; /* weft__op_kind */
  uint8_t flags;
  uint16_t nargs; /* up to WEFT_MAX_CALL_ARGS */
  weft_device device; /* where it runs */
  const weft_op *user_op;
  weft__arg *args;
  weft__node_rare *rare; /* NULL: none of its fields set */
  void *params;          /* user op parameters (arena) */
  size_t params_size;
  weft_node *follow_next; /* the next node handed to the analysis's follower (dep_analysis.c) */
};

/* A node's rare fields, zeroed, in g's arena: the ops make them before the node, so that a call
 * that cannot have them fails before it appends anything; weft__node_rare_of makes n's on first
 * use. NULL when out of memory (message set). On the graph's building thread, as any change of
 * a node. */
weft__node_rare *weft__node_rare_new(weft_graph *g);
weft__node_rare *weft__node_rare_of(weft_node *n);
static inline double weft__node_alpha(const weft_node *n) { return n->rare != NULL ? n->rare->alpha : 0; }
static inline weft_init weft__node_fill(const weft_node *n) {
  return n->rare != NULL ? n->rare->fill : (weft_init){0};
}
static inline const weft_tensor **weft__node_targs(const weft_node *n) {
  return n->rare != NULL ? n->rare->targs : NULL;
}
static inline const char *weft__node_name(const weft_node *n) { return n->rare != NULL ? n->rare->name : NULL; }
static inline const char *weft__node_origin(const weft_node *n) { return n->rare != NULL ? n->rare->origin : NULL; }

/* The analysis's state of a node (dep_analysis.c), one cache line for both: the successor its
 * last edge went to (to list a pair once), and its successors so far — the plan's successor
 * lists are laid out from these counts (sched/plan/build.c). */
typedef struct weft__dep_node {
  uint32_t stamp, nsucc;
} weft__dep_node;

/* The analysis's state of a tensor (dep_analysis.c), by its id: the last node that wrote it and
 * the first of the readers since, UINT32_MAX for none. Kept apart from the tensor, which the
 * builder reads while a worker follows the build (the analysis's own lines). */
typedef struct weft__dep_tensor {
  uint32_t writer, head;
} weft__dep_tensor;

typedef struct weft__edge {
  uint32_t from, to;
  uint32_t tensor; /* UINT32_MAX for explicit edges */
  uint8_t hazard;  /* weft_hazard */
} weft__edge;

struct weft__plan;
struct weft__placement;

struct weft_graph {
  weft_runtime *rt;
  const weft__mem *mem;
  weft__arena arena;
  weft__arena storage_arena; /* small host tensors' contents */
  weft__vec tensors;  /* weft_tensor * */
  weft__vec autos;    /* uint32_t: the ids of the tensors ops made (WEFT__T_AUTO), in order: the
                         only ones that can be temporaries */
  weft__vec nodes;    /* weft_node * */
  weft__vec explicit_edges; /* weft__edge */
  weft__vec call_args;      /* weft__arg: weft_call's arguments past WEFT_MAX_ARGS, call to call */
  weft__vec order;    /* uint32_t: the analysis's topological order where insertion order is not
                         one (an explicit edge points backward); empty where it is */
  int strict;
  size_t nauto;       /* tensors and nodes created on auto: the graph is placed (sched/plan/place.c) */
  uint64_t version, analysed_version;
  /* The analysis follows appends as they come (dep_analysis.c): while inc_version == version
   * every node so far has its edges in `edges`, or is on its way to them on a worker (follow).
   * Any other change leaves it behind, and the next analysis starts over. */
  uint64_t inc_version;
  /* A large build's analysis follows it on an idle worker (dep_analysis.c): the follower while
   * one is open, the last node handed to it and their count, the nodes when the last one closed, and where
   * the follower's task goes (the runtime's pool; post NULL: always inline). */
  struct weft__follow *follow;
  weft_node *follow_tail;
  uint64_t follow_count; /* the nodes handed to it */
  size_t follow_from;
  uint64_t followed; /* nodes a follower analysed on a worker, all told (tests read it) */
  weft__spare spare;
  /* The analysis's state, which a follower writes while the builder goes on: on lines of its
   * own (the graph is 64-byte aligned). */
  _Alignas(64) weft__vec edges; /* weft__edge: the analysis result */
  weft__vec dep_readers; /* the analysis's reader entries (dep_analysis.c) */
  weft__vec dep_node;    /* weft__dep_node per node */
  weft__vec dep_tensor;  /* weft__dep_tensor per tensor id, as far as the nodes so far name */
  _Alignas(64) uint64_t agreed_version; /* across ranks: 1 + the version whose launch the ranks agreed on */
  /* Scheduler state (src/sched): the plan of the current version, the run in flight. */
  struct weft__plan *plan;
  struct weft__placement *placement; /* a graph with auto devices: its placed graph (place.c) */
  atomic_int busy;
  atomic_int handles; /* a placed graph: run handles of it not yet destroyed (place.c) */
  size_t materialised; /* tensors [0, materialised) have storage */
  /* Set once a tensor of the graph gets storage its release must free (heap, pinned, device:
   * weft__storage_owned); until then the release at destroy has no tensor to visit. */
  atomic_uchar owns_storage;
};

/* Says that t now holds storage its release must free (the allocators of host, pinned and
 * device storage call it): the graph's destroy then visits its tensors to free it. */
static inline void weft__storage_owned(weft_tensor *t) {
  atomic_store_explicit(&t->graph->owns_storage, 1, memory_order_relaxed);
}


/* `mem` (may be NULL) supplies the graph's large blocks; `spare` (may be NULL) the idle
 * workers a large build's analysis follows it on. */
weft_graph *weft__graph_new(weft_runtime *rt, const weft__mem *mem, const weft__spare *spare);
/* Frees everything the graph module owns (not tensor storage: that is the scheduler's). */
void weft__graph_free(weft_graph *g);

/* Stores the element count of a shape with no negative dimension in *numel and returns 1, or
 * returns 0 if it is too large for weft (more than INT64_MAX / 16 elements). */
int weft__shape_numel(int ndim, const int64_t *shape, int64_t *numel);

/* Creates a tensor (shared by weft_tensor_create and ops that make their result). */
int weft__tensor_new(weft_graph *g, const char *name, int dtype, int ndim, const int64_t *shape,
                     weft_device device, weft_init init, unsigned flags, weft_tensor **out);

/* Runs the analysis if the graph changed. */
int weft__graph_analyse(weft_graph *g);
/* The analysis of node n, just appended: its edges from the nodes before it, when the analysis
 * is up to date with the graph so far (else nothing: the next analysis starts over). From the
 * FOLLOW_MIN_NODES-th node of a build on, an idle worker analyses the nodes behind the
 * builder (a follower), until weft__graph_follow_close. */
void weft__graph_analyse_append(weft_graph *g, weft_node *n);
/* Closes the follower, on the graph's building thread: takes its claim (it lets go after the
 * batch in hand) and, with `keep`, analyses the rest of the nodes handed to it; without, leaves
 * the analysis behind (the next one starts over). Before anything reads the analysis's state
 * (keep) or changes the graph other than by an append, or destroys it (not keep); a no-op with
 * none open. */
void weft__graph_follow_close(weft_graph *g, int keep);
/* The nodes the open follower has analysed so far (0 with none open): tests wait on it. */
uint64_t weft__graph_follow_progress(const weft_graph *g);
/* A change other than an append (an explicit edge, tiles, nodes dropped): the analysis falls
 * behind, and the next one starts over. The follower closes first. */
static inline void weft__graph_changed(weft_graph *g) {
  weft__graph_follow_close(g, 0);
  g->version++;
}
/* A change that adds no edge (a new tensor, a kept one) keeps the analysis up to date. */
static inline void weft__graph_bump(weft_graph *g) {
  int in_step = g->inc_version == g->version;
  g->version++;
  if (in_step) g->inc_version = g->version;
}

/* Writes a topological order of the analysed graph's nodes into out (n entries): insertion
 * order, or the analysis's order where explicit edges point backward. */
void weft__graph_order(const weft_graph *g, uint32_t *out);

/* The floating-point operations of a dense linear-algebra node (gemm, potrf, trsm, syrk); -1
 * for other kinds. */
double weft__la_flops(const weft_node *n);

/* Returns the tensor's display name. */
const char *weft__tensor_name(const weft_tensor *t);

/* Fails with WEFT_EBUSY (message set) if a run of g is in flight. */
int weft__graph_check_idle(weft_graph *g, const char *what);

#endif
