/* graph.c — graphs, tensors and nodes: creation, naming and introspection.
 *
 * Owns: the graph's arena (tensors, nodes, access lists, names, parameters) and its vectors.
 * Tensors and nodes never move once created, so their pointers are stable handles. Storage of
 * tensor contents is not here: src/sched/storage.c materialises it on the tensor's device.
 * Invariant: a node only refers to tensors created before it, and node ids are insertion
 * order, which is the serial order that defines a graph's meaning. */
#include <stdio.h>
#include <string.h>

#include "graph/graph.h"

weft_graph *weft__graph_new(weft_runtime *rt, const weft__mem *mem, const weft__spare *spare) {
  weft_graph *g = weft__aligned_alloc(64, sizeof *g); /* the analysis's lines apart (graph.h) */
  if (g == NULL) {
    weft__oom("a graph");
    return NULL;
  }
  memset(g, 0, sizeof *g);
  g->rt = rt;
  if (spare != NULL) g->spare = *spare;
  g->mem = mem;
  weft__arena_init(&g->arena, 64 * 1024, mem);
  weft__arena_init(&g->storage_arena, 64 * 1024, mem);
  weft__vec_init_mem(&g->tensors, sizeof(weft_tensor *), mem);
  weft__vec_init_mem(&g->autos, sizeof(uint32_t), mem);
  weft__vec_init_mem(&g->nodes, sizeof(weft_node *), mem);
  weft__vec_init(&g->explicit_edges, sizeof(weft__edge));
  weft__vec_init(&g->call_args, sizeof(weft__arg));
  weft__vec_init_mem(&g->edges, sizeof(weft__edge), mem);
  weft__vec_init_mem(&g->order, sizeof(uint32_t), mem);
  weft__vec_init_mem(&g->dep_readers, 2 * sizeof(uint32_t), mem);
  weft__vec_init_mem(&g->dep_node, sizeof(weft__dep_node), mem);
  weft__vec_init_mem(&g->dep_tensor, sizeof(weft__dep_tensor), mem);
  g->version = 1;
  g->inc_version = 1; /* an empty graph: analysed, nothing to follow */
  atomic_init(&g->busy, 0);
  atomic_init(&g->handles, 0);
  atomic_init(&g->owns_storage, 0);
  return g;
}

void weft__graph_free(weft_graph *g) {
  weft__graph_follow_close(g, 0);
  weft__vec_fini(&g->tensors);
  weft__vec_fini(&g->autos);
  weft__vec_fini(&g->nodes);
  weft__vec_fini(&g->explicit_edges);
  weft__vec_fini(&g->call_args);
  weft__vec_fini(&g->edges);
  weft__vec_fini(&g->order);
  weft__vec_fini(&g->dep_readers);
  weft__vec_fini(&g->dep_node);
  weft__vec_fini(&g->dep_tensor);
  weft__arena_fini(&g->arena);
  weft__arena_fini(&g->storage_arena);
  weft__aligned_free(g);
}

int weft__graph_check_idle(weft_graph *g, const char *what) {
  if (atomic_load_explicit(&g->busy, memory_order_acquire))
    return weft__err(WEFT_EBUSY, "%s: a run of this graph is in flight; wait for it first", what);
  return WEFT_OK;
}

weft_runtime *weft_graph_runtime(const weft_graph *g) { return g->rt; }
void weft_graph_set_strict(weft_graph *g, int strict) { g->strict = strict != 0; }

/* ---- devices and dtypes ---------------------------------------------------------------- */

weft_device weft_cpu(void) { return (weft_device){WEFT_DEVICE_CPU, 0}; }
weft_device weft_cuda(int index) { return (weft_device){WEFT_DEVICE_CUDA, index}; }
weft_device weft_auto(void) { return (weft_device){WEFT_DEVICE_AUTO, 0}; }

weft_device weft_on_rank(weft_device d, int rank) {
  d.rank = rank;
  return d;
}

int weft_device_equal(weft_device a, weft_device b) {
  return a.kind == b.kind && a.index == b.index && a.rank == b.rank;
}

char *weft_device_str(weft_device d, char *buf, size_t size) {
  if (size == 0) return buf;
  char rank[24] = "";
  if (d.rank != 0) snprintf(rank, sizeof rank, "rank %d ", d.rank);
  if (d.kind == WEFT_DEVICE_CPU)
    snprintf(buf, size, "%scpu", rank);
  else if (d.kind == WEFT_DEVICE_AUTO)
    snprintf(buf, size, "%sauto", rank);
  else if (d.kind == WEFT_DEVICE_CUDA)
    snprintf(buf, size, "%scuda:%d", rank, d.index);
  else
    snprintf(buf, size, "%sdevice(%d,%d)", rank, d.kind, d.index);
  return buf;
}

int weft_device_parse(const char *text, weft_device *out) {
  if (text == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_device_parse: NULL argument");
  if (strncmp(text, "rank ", 5) == 0 && text[5] >= '0' && text[5] <= '9') {
    long r = 0;
    const char *p = text + 5;
    while (*p >= '0' && *p <= '9' && r < 1000000) r = r * 10 + (*p++ - '0');
    if (*p == ' ' && r < 1000000) {
      int rc = weft_device_parse(p + 1, out);
      if (rc == WEFT_OK) out->rank = (int)r;
      return rc;
    }
    return weft__err(WEFT_EINVAL, "'%s' is not a device: expected rank R DEVICE with R a number", text);
  }
  if (strcmp(text, "cpu") == 0) {
    *out = weft_cpu();
    return WEFT_OK;
  }
  if (strcmp(text, "auto") == 0) {
    *out = weft_auto();
    return WEFT_OK;
  }
  const char *rest = NULL;
  if (strncmp(text, "cuda", 4) == 0)
    rest = text + 4;
  else if (strncmp(text, "gpu", 3) == 0)
    rest = text + 3;
  if (rest != NULL) {
    if (*rest == '\0') {
      *out = weft_cuda(0);
      return WEFT_OK;
    }
    if (*rest == ':' && rest[1] >= '0' && rest[1] <= '9') {
      long v = 0;
      const char *p = rest + 1;
      while (*p >= '0' && *p <= '9' && v < 100000) v = v * 10 + (*p++ - '0');
      if (*p == '\0' && v < 100000) {
        *out = weft_cuda((int)v);
        return WEFT_OK;
      }
    }
  }
  return weft__err(WEFT_EINVAL, "'%s' is not a device: expected cpu, cuda, cuda:N, gpu:N or auto", text);
}

/* weft_dtype_size's body, inlined where tensors are made (an exported function is called even
 * from this file in a shared library). */
static inline size_t dtype_bytes(int dt) { return dt == WEFT_F64 ? 8 : dt == WEFT_F32 ? 4 : 0; }

size_t weft_dtype_size(weft_dtype dt) { return dtype_bytes(dt); }

const char *weft_dtype_name(weft_dtype dt) {
  switch (dt) {
    case WEFT_F32:
      return "f32";
    case WEFT_F64:
      return "f64";
  }
  return "?";
}

/* ---- initialisers ------------------------------------------------------------------------ */

weft_init weft_zeros(void) { return (weft_init){WEFT_INIT_ZEROS, 0, 0, 0}; }
weft_init weft_ones(void) { return (weft_init){WEFT_INIT_ONES, 1, 0, 0}; }
weft_init weft_full(double value) { return (weft_init){WEFT_INIT_FULL, value, 0, 0}; }
weft_init weft_eye(double value) { return (weft_init){WEFT_INIT_EYE, value, 0, 0}; }
weft_init weft_uniform(double lo, double hi, uint64_t seed) {
  return (weft_init){WEFT_INIT_UNIFORM, lo, hi, seed};
}
weft_init weft_normal(double mean, double std, uint64_t seed) {
  return (weft_init){WEFT_INIT_NORMAL, mean, std, seed};
}

/* ---- tensors ----------------------------------------------------------------------------- */

static int check_init(weft_init init) {
  if (init.kind < WEFT_INIT_ZEROS || init.kind > WEFT_INIT_EYE)
    return weft__err(WEFT_EINVAL, "unknown initialiser kind %d", init.kind);
  if (init.kind == WEFT_INIT_UNIFORM && !(init.a <= init.b))
    return weft__err(WEFT_EINVAL, "uniform(%g, %g): the low bound is above the high bound",
                     init.a, init.b);
  if (init.kind == WEFT_INIT_NORMAL && !(init.b >= 0))
    return weft__err(WEFT_EINVAL, "normal(%g, %g): the standard deviation is negative", init.a,
                     init.b);
  return WEFT_OK;
}

int weft__shape_numel(int ndim, const int64_t *shape, int64_t *numel) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    /* A bound well under INT64_MAX, so that bytes (numel * 8) and offsets cannot overflow. */
    if (shape[i] > 0 && n > INT64_MAX / 16 / shape[i]) return 0;
    n *= shape[i];
  }
  *numel = n;
  return 1;
}

/* Shared by weft_tensor_create and ops that create their result. */
int weft__tensor_new(weft_graph *g, const char *name, int dtype, int ndim, const int64_t *shape,
                     weft_device device, weft_init init, unsigned flags, weft_tensor **out) {
  char dev[32];
  if (dtype != WEFT_F32 && dtype != WEFT_F64)
    return weft__err(WEFT_EDTYPE, "tensor '%s': unknown dtype %d (expected WEFT_F32 or WEFT_F64)",
                     name ? name : "?", dtype);
  if (ndim < 0 || ndim > WEFT_MAX_DIMS)
    return weft__err(WEFT_ESHAPE, "tensor '%s': %d dimensions (at most %d)", name ? name : "?",
                     ndim, WEFT_MAX_DIMS);
  if (ndim > 0 && shape == NULL)
    return weft__err(WEFT_EINVAL, "tensor '%s': shape is NULL", name ? name : "?");
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0)
      return weft__err(WEFT_ESHAPE, "tensor '%s': dimension %d is negative (%lld)",
                       name ? name : "?", i, (long long)shape[i]);
  int64_t numel;
  if (!weft__shape_numel(ndim, shape, &numel))
    return weft__err(WEFT_ESHAPE, "tensor '%s': too many elements", name ? name : "?");
  if (!weft_device_exists(g->rt, device))
    return weft__err(WEFT_EDEVICE, "tensor '%s': the runtime has no device %s",
                     name ? name : "?", weft_device_str(device, dev, sizeof dev));
  int rc = check_init(init);
  if (rc != WEFT_OK) return rc;
  /* Not written back into `init`: a store into the argument, read back in wider parts by the
   * copy into the tensor, stalled store forwarding in every call. */
  uint64_t seed = init.seed;
  if (init.kind == WEFT_INIT_EYE) {
    if (ndim != 2)
      return weft__err(WEFT_ESHAPE, "tensor '%s': eye is for 2-D tensors; this one has %d dimension%s",
                       name ? name : "?", ndim, ndim == 1 ? "" : "s");
    /* The row length, which places the diagonal (a tile copies its tensor's init: its own). */
    if (seed == 0) seed = (uint64_t)shape[1];
  }
  if (g->tensors.len >= UINT32_MAX - 1)
    return weft__err(WEFT_ELIMIT, "graph has too many tensors");
  if ((rc = weft__vec_reserve(&g->tensors, 1)) != WEFT_OK) return rc;
  if ((flags & WEFT__T_AUTO) && (rc = weft__vec_reserve(&g->autos, 1)) != WEFT_OK) return rc;
  const char *tname = NULL;
  if (name != NULL && (tname = weft__arena_strdup(&g->arena, name)) == NULL) return WEFT_ENOMEM;
  /* The rare record, where the tensor has a name or an initialiser other than zeros; made first,
   * so that a tensor that cannot have it is not made at all. */
  weft_init tinit = init;
  tinit.seed = seed;
  weft__tensor_rare *rare = NULL;
  static const double zero = 0;
  int zeros = tinit.kind == 0 && tinit.seed == 0 && memcmp(&tinit.a, &zero, sizeof zero) == 0 &&
              memcmp(&tinit.b, &zero, sizeof zero) == 0;
  if (tname != NULL || !zeros) {
    if ((rare = weft__arena_alloc(&g->arena, sizeof *rare, 8)) == NULL) return WEFT_ENOMEM;
    *rare = (weft__tensor_rare){.init = tinit, .name = tname};
  }
  weft_tensor *t = weft__arena_alloc(&g->arena, sizeof *t, 64);
  if (t == NULL) return WEFT_ENOMEM;
  if (device.kind == WEFT_DEVICE_AUTO) {
    flags |= WEFT__T_AUTODEV;
    g->nauto++;
  }
  /* Each field written once, with no memset of the whole first: most are set anyway. autoname
   * is left unwritten (autoname_state 0 says so). */
  t->graph = g;
  t->id = (uint32_t)g->tensors.len;
  t->dtype = (uint8_t)dtype;
  t->ndim = (uint8_t)ndim;
  t->flags = (uint8_t)flags;
  t->storage_kind = WEFT__S_NONE;
  t->view = NULL;
  t->grid = NULL;
  t->data = NULL;
  t->bytes = (size_t)numel * dtype_bytes(dtype);
  t->device = device;
  t->initialised = 0;
  t->ipc = 0;
  t->numel = numel;
  for (int i = 0; i < WEFT_MAX_DIMS; i++) t->shape[i] = i < ndim ? shape[i] : 0;
  t->rare = rare;
  atomic_init(&t->autoname_state, 0);
  WEFT__VEC_PUSH(&g->tensors, t); /* cannot fail: reserved */
  if (flags & WEFT__T_AUTO) WEFT__VEC_PUSH(&g->autos, t->id);
  weft__graph_bump(g);
  *out = t;
  return WEFT_OK;
}

int weft_tensor_create(weft_graph *g, const char *name, weft_dtype dt, int ndim,
                       const int64_t *shape, weft_device device, weft_init init,
                       weft_tensor **out) {
  if (g == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_tensor_create: NULL argument");
  int rc = weft__graph_check_idle(g, "weft_tensor_create");
  if (rc != WEFT_OK) return rc;
  return weft__tensor_new(g, name, dt, ndim, shape, device, init, 0, out);
}

void weft_tensor_keep(weft_tensor *t) {
  if (t != NULL && !(t->flags & WEFT__T_KEEP)) {
    t->flags |= WEFT__T_KEEP;
    weft__graph_bump(t->graph); /* no edge changes: only which tensors are temporaries */
  }
}

/* ---- tiles ------------------------------------------------------------------------------ */

int weft_tensor_tiles(weft_graph *g, weft_tensor *x, int64_t tile_rows, int64_t tile_cols) {
  if (g == NULL || x == NULL) return weft__err(WEFT_EINVAL, "weft_tensor_tiles: NULL argument");
  if (x->graph != g)
    return weft__err(WEFT_EINVAL, "weft_tensor_tiles: tensor %s belongs to another graph", weft__tensor_name(x));
  if (x->ndim != 2)
    return weft__err(WEFT_ESHAPE, "weft_tensor_tiles: tensor %s has %d dimensions; tiles are of 2-D tensors",
                     weft__tensor_name(x), x->ndim);
  if (tile_rows <= 0 || tile_cols <= 0)
    return weft__err(WEFT_ESHAPE, "weft_tensor_tiles: tensor %s: tiles of %lld x %lld; both sizes must be positive",
                     weft__tensor_name(x), (long long)tile_rows, (long long)tile_cols);
  if (x->view != NULL)
    return weft__err(WEFT_ESTATE, "weft_tensor_tiles: %s is a tile; partition the tensor it views instead",
                     weft__tensor_name(x));
  if (x->grid != NULL)
    return weft__err(WEFT_ESTATE, "weft_tensor_tiles: tensor %s is already partitioned (%lld x %lld tiles)",
                     weft__tensor_name(x), (long long)x->grid->rows, (long long)x->grid->cols);
  int rc = weft__graph_check_idle(g, "weft_tensor_tiles");
  if (rc != WEFT_OK) return rc;
  weft__graph_follow_close(g, 0); /* it reads x->grid */
  int64_t rows = x->shape[0] == 0 ? 0 : (x->shape[0] + tile_rows - 1) / tile_rows;
  int64_t cols = x->shape[1] == 0 ? 0 : (x->shape[1] + tile_cols - 1) / tile_cols;
  if (rows * cols >= (int64_t)(UINT32_MAX / 2) - (int64_t)g->tensors.len)
    return weft__err(WEFT_ELIMIT, "weft_tensor_tiles: tensor %s: %lld x %lld tiles are too many",
                     weft__tensor_name(x), (long long)rows, (long long)cols);
  weft__grid *grid = weft__arena_alloc(&g->arena, sizeof *grid, 8);
  if (grid == NULL) return WEFT_ENOMEM;
  *grid = (weft__grid){rows, cols, {tile_rows, tile_cols}, (uint32_t)g->tensors.len};
  size_t tensors0 = g->tensors.len;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      int64_t shape[2] = {x->shape[0] - i * tile_rows < tile_rows ? x->shape[0] - i * tile_rows : tile_rows,
                          x->shape[1] - j * tile_cols < tile_cols ? x->shape[1] - j * tile_cols : tile_cols};
      char name[160];
      snprintf(name, sizeof name, "%s[%lld,%lld]", weft__tensor_name(x), (long long)i, (long long)j);
      weft_tensor *t = NULL;
      weft__view *v = weft__arena_alloc(&g->arena, sizeof *v, 8);
      if (v == NULL) rc = WEFT_ENOMEM;
      else rc = weft__tensor_new(g, name, x->dtype, 2, shape, x->device, weft__tensor_init(x), 0, &t);
      if (rc != WEFT_OK) {
        g->tensors.len = tensors0; /* the arena keeps the bytes until the graph dies */
        return rc;
      }
      *v = (weft__view){x, i * tile_rows * x->shape[1] + j * tile_cols, x->shape[1], i, j};
      t->view = v;
      if ((x->flags & WEFT__T_AUTODEV) && !(t->flags & WEFT__T_AUTODEV)) { /* an auto tensor's tiles are auto */
        t->flags |= WEFT__T_AUTODEV;
        g->nauto++;
      }
    }
  x->grid = grid;
  x->flags |= WEFT__T_KEEP; /* the tiles' storage: never a temporary's, released early */
  weft__graph_changed(g);
  return WEFT_OK;
}

int weft_tensor_distribute(weft_graph *g, weft_tensor *x, int P, int Q) {
  if (g == NULL || x == NULL) return weft__err(WEFT_EINVAL, "weft_tensor_distribute: NULL argument");
  if (x->graph != g)
    return weft__err(WEFT_EINVAL, "weft_tensor_distribute: tensor %s belongs to another graph", weft__tensor_name(x));
  if (x->grid == NULL)
    return weft__err(WEFT_ESTATE, "weft_tensor_distribute: tensor %s is not partitioned; give it tiles first "
                     "(weft_tensor_tiles)", weft__tensor_name(x));
  if (x->grid->P > 0)
    return weft__err(WEFT_ESTATE, "weft_tensor_distribute: tensor %s is already distributed over %d x %d %s",
                     weft__tensor_name(x), x->grid->P, x->grid->Q, weft__grid_places(x->grid));
  if (x->flags & WEFT__T_AUTODEV)
    return weft__err(WEFT_ENOTSUP, "weft_tensor_distribute: tensor %s is on auto; its tiles are placed by the planner "
                     "(give it a device to distribute it)", weft__tensor_name(x));
  /* The places: every rank's CPU, or every GPU of every rank (each rank sees as many). */
  int nranks = weft_runtime_ranks(g->rt), gpus = 0;
  if (x->device.kind == WEFT_DEVICE_CUDA && (gpus = weft_device_count(g->rt, WEFT_DEVICE_CUDA)) < 1)
    return weft__err(WEFT_EDEVICE, "weft_tensor_distribute: tensor %s is on a GPU, and this run has none",
                     weft__tensor_name(x));
  int64_t places = (int64_t)nranks * (gpus > 0 ? gpus : 1);
  if (P < 1 || Q < 1 || (int64_t)P * Q > places) {
    if (gpus > 0)
      return weft__err(WEFT_EDEVICE, "weft_tensor_distribute: tensor %s: a grid of %d x %d GPUs; this run has %lld "
                       "(%d a rank)", weft__tensor_name(x), P, Q, (long long)places, gpus);
    return weft__err(WEFT_EDEVICE, "weft_tensor_distribute: tensor %s: a grid of %d x %d ranks; this run has %d "
                     "rank%s (mpirun -np N starts N)", weft__tensor_name(x), P, Q, nranks, nranks == 1 ? "" : "s");
  }
  int rc = weft__graph_check_idle(g, "weft_tensor_distribute");
  if (rc != WEFT_OK) return rc;
  /* Before any node uses it: nodes built so far chose their devices from the tiles' old ones. */
  uint32_t lo = x->grid->first, hi = lo + (uint32_t)(x->grid->rows * x->grid->cols);
  weft_node **nodes = g->nodes.data;
  for (size_t i = 0; i < g->nodes.len; i++)
    for (int a = 0; a < nodes[i]->nargs; a++) {
      const weft_tensor *t = nodes[i]->args[a].t;
      if (t == x || (t->id >= lo && t->id < hi))
        return weft__err(WEFT_ESTATE, "weft_tensor_distribute: tensor %s is used by node %zu '%s' already; "
                         "distribute it before its first use", weft__tensor_name(x), i, weft_node_op_name(nodes[i]));
    }
  x->grid->P = P;
  x->grid->Q = Q;
  x->grid->gpus = gpus;
  for (int64_t i = 0; i < x->grid->rows; i++)
    for (int64_t j = 0; j < x->grid->cols; j++) weft_tensor_tile(x, i, j)->device = weft__grid_place(x->grid, i, j);
  /* x has no storage: each tile has its own, contiguous, at its place (weft__tile_owns_storage),
   * so a rank or GPU holds its tiles and those it receives, never the matrix. x's device is
   * every rank's own CPU, for the API calls that take the whole (gathers, writes of the tiles
   * a rank owns). */
  x->device = weft_on_rank(weft_cpu(), weft_runtime_rank(g->rt));
  weft__graph_changed(g);
  return WEFT_OK;
}

weft_tensor *weft_tensor_tile(const weft_tensor *x, int64_t i, int64_t j) {
  if (x == NULL || x->grid == NULL || i < 0 || j < 0 || i >= x->grid->rows || j >= x->grid->cols) return NULL;
  return WEFT__VEC_AT(&x->graph->tensors, weft_tensor *, x->grid->first + (size_t)(i * x->grid->cols + j));
}

int64_t weft_tensor_tile_count(const weft_tensor *x, int dim) {
  if (x == NULL || x->grid == NULL || dim < 0 || dim > 1) return 0;
  return dim == 0 ? x->grid->rows : x->grid->cols;
}

weft_tensor *weft_tensor_parent(const weft_tensor *t) { return t != NULL && t->view != NULL ? t->view->parent : NULL; }

int weft_tensor_is_kept(const weft_tensor *t) {
  if (!(t->flags & WEFT__T_AUTO) || (t->flags & WEFT__T_KEEP)) return 1;
  weft_graph *g = t->graph;
  if (g->analysed_version != g->version && weft__graph_analyse(g) != WEFT_OK) return 1;
  return !(t->flags & WEFT__T_TEMP);
}

weft_dtype weft_tensor_dtype(const weft_tensor *t) { return (weft_dtype)t->dtype; }
int weft_tensor_ndim(const weft_tensor *t) { return t->ndim; }
int64_t weft_tensor_dim(const weft_tensor *t, int i) {
  return (i >= 0 && i < t->ndim) ? t->shape[i] : 0;
}
int64_t weft_tensor_numel(const weft_tensor *t) { return t->numel; }
size_t weft_tensor_bytes(const weft_tensor *t) { return t->bytes; }
weft_device weft_tensor_device(const weft_tensor *t) { return t->device; }
size_t weft_tensor_id(const weft_tensor *t) { return t->id; }
weft_graph *weft_tensor_graph(const weft_tensor *t) { return t->graph; }
weft_init weft_tensor_init(const weft_tensor *t) { return weft__tensor_init(t); }

/* `size` zeroed bytes of g's arena (a tensor's or a node's rare record); NULL when out of
 * memory (message set). */
static void *arena_zeroed(weft_graph *g, size_t size) {
  void *p = weft__arena_alloc(&g->arena, size, 8);
  if (p != NULL) memset(p, 0, size);
  return p;
}

weft__tensor_rare *weft__tensor_rare_of(weft_tensor *t) {
  if (t->rare == NULL) t->rare = arena_zeroed(t->graph, sizeof *t->rare);
  return t->rare;
}
int weft_tensor_is_auto(const weft_tensor *t) { return (t->flags & WEFT__T_AUTODEV) != 0; }

const char *weft__tensor_name(const weft_tensor *t) {
  if (t->rare != NULL && t->rare->name != NULL) return t->rare->name;
  weft_tensor *m = (weft_tensor *)t;
  /* Acquire pairs with the release below: the name is written before it is seen ready. */
  unsigned char st = atomic_load_explicit(&m->autoname_state, memory_order_acquire);
  if (st != 2) {
    unsigned char zero = 0;
    if (atomic_compare_exchange_strong_explicit(&m->autoname_state, &zero, 1, memory_order_acquire,
                                                memory_order_acquire)) {
      snprintf(m->autoname, sizeof m->autoname, "t%u", t->id);
      atomic_store_explicit(&m->autoname_state, 2, memory_order_release);
    } else {
      while (atomic_load_explicit(&m->autoname_state, memory_order_acquire) != 2) {
        /* the writer is inside one snprintf */
      }
    }
  }
  return m->autoname;
}

const char *weft_tensor_name(const weft_tensor *t) { return weft__tensor_name(t); }

int weft_tensor_set_name(weft_tensor *t, const char *name) {
  if (t == NULL || name == NULL) return weft__err(WEFT_EINVAL, "weft_tensor_set_name: NULL argument");
  /* A worker may be reading the name to describe a failure. */
  int rc = weft__graph_check_idle(t->graph, "weft_tensor_set_name");
  if (rc != WEFT_OK) return rc;
  char *n = weft__arena_strdup(&t->graph->arena, name);
  weft__tensor_rare *r = n != NULL ? weft__tensor_rare_of(t) : NULL;
  if (r == NULL) return WEFT_ENOMEM;
  r->name = n;
  return WEFT_OK;
}

/* ---- nodes and introspection --------------------------------------------------------------- */

weft_node *weft_graph_last_node(const weft_graph *g) {
  return g->nodes.len ? WEFT__VEC_AT(&g->nodes, weft_node *, g->nodes.len - 1) : NULL;
}
size_t weft_graph_node_count(const weft_graph *g) { return g->nodes.len; }
weft_node *weft_graph_node(const weft_graph *g, size_t i) {
  return i < g->nodes.len ? WEFT__VEC_AT(&g->nodes, weft_node *, i) : NULL;
}
size_t weft_graph_tensor_count(const weft_graph *g) { return g->tensors.len; }
weft_tensor *weft_graph_tensor(const weft_graph *g, size_t i) {
  return i < g->tensors.len ? WEFT__VEC_AT(&g->tensors, weft_tensor *, i) : NULL;
}

weft_tensor *weft_graph_find_tensor(const weft_graph *g, const char *name) {
  if (name == NULL) return NULL;
  for (size_t i = 0; i < g->tensors.len; i++) {
    weft_tensor *t = WEFT__VEC_AT(&g->tensors, weft_tensor *, i);
    if (strcmp(weft__tensor_name(t), name) == 0) return t;
  }
  return NULL;
}

int weft_graph_add_edge(weft_graph *g, weft_node *before, weft_node *after) {
  if (g == NULL || before == NULL || after == NULL)
    return weft__err(WEFT_EINVAL, "weft_graph_add_edge: NULL argument");
  if (before->graph != g || after->graph != g)
    return weft__err(WEFT_EINVAL, "weft_graph_add_edge: node %u or node %u belongs to another graph",
                     before->id, after->id);
  if (before == after)
    return weft__err(WEFT_ECYCLE, "weft_graph_add_edge: an edge from node %u to itself is a cycle",
                     before->id);
  int rc = weft__graph_check_idle(g, "weft_graph_add_edge");
  if (rc != WEFT_OK) return rc;
  weft__edge e = {before->id, after->id, UINT32_MAX, WEFT_HAZARD_EXPLICIT};
  if ((rc = weft__vec_push(&g->explicit_edges, &e)) != WEFT_OK) return rc;
  weft__graph_changed(g);
  return WEFT_OK;
}

size_t weft_node_id(const weft_node *n) { return n->id; }
const char *weft_node_op_name(const weft_node *n) {
  return n->kind == WEFT__OP_USER ? n->user_op->name : weft__op_kind_name(n->kind);
}
const weft_op *weft_node_user_op(const weft_node *n) { return n->user_op; }
weft_device weft_node_device(const weft_node *n) { return n->device; }
int weft_node_nargs(const weft_node *n) { return n->nargs; }
weft_tensor *weft_node_arg(const weft_node *n, int i, weft_access *mode) {
  if (i < 0 || i >= n->nargs) return NULL;
  if (mode != NULL) *mode = (weft_access)n->args[i].mode;
  return n->args[i].t;
}
double weft_node_alpha(const weft_node *n) { return weft__node_alpha(n); }
weft_init weft_node_fill_init(const weft_node *n) { return weft__node_fill(n); }
const void *weft_node_params(const weft_node *n, size_t *size) {
  if (size != NULL) *size = n->params_size;
  return n->params;
}
int weft_node_is_inserted(const weft_node *n) { return (n->flags & WEFT__N_INSERTED) != 0; }
const char *weft_node_name(const weft_node *n) { return weft__node_name(n) ? weft__node_name(n) : ""; }
const char *weft_node_origin(const weft_node *n) { return weft__node_origin(n) ? weft__node_origin(n) : ""; }

weft__node_rare *weft__node_rare_new(weft_graph *g) { return arena_zeroed(g, sizeof(weft__node_rare)); }

weft__node_rare *weft__node_rare_of(weft_node *n) {
  if (n->rare == NULL) n->rare = weft__node_rare_new(n->graph);
  return n->rare;
}

int weft_node_set_name(weft_node *n, const char *name) {
  if (n == NULL || name == NULL) return weft__err(WEFT_EINVAL, "weft_node_set_name: NULL argument");
  int rc = weft__graph_check_idle(n->graph, "weft_node_set_name");
  if (rc != WEFT_OK) return rc;
  char *s = weft__arena_strdup(&n->graph->arena, name);
  weft__node_rare *r = s != NULL ? weft__node_rare_of(n) : NULL;
  if (r == NULL) return WEFT_ENOMEM;
  r->name = s;
  return WEFT_OK;
}

int weft_node_set_origin(weft_node *n, const char *origin) {
  if (n == NULL || origin == NULL) return weft__err(WEFT_EINVAL, "weft_node_set_origin: NULL argument");
  int rc = weft__graph_check_idle(n->graph, "weft_node_set_origin");
  if (rc != WEFT_OK) return rc;
  char *s = weft__arena_strdup(&n->graph->arena, origin);
  weft__node_rare *r = s != NULL ? weft__node_rare_of(n) : NULL;
  if (r == NULL) return WEFT_ENOMEM;
  r->origin = s;
  return WEFT_OK;
}

char *weft_node_describe(const weft_node *n, char *buf, size_t size) {
  char dev[32];
  const char *result = "";
  for (int i = n->nargs - 1; i >= 0; i--)
    if (n->args[i].mode & WEFT_WRITE) {
      result = weft__tensor_name(n->args[i].t);
      break;
    }
  int len = snprintf(buf, size, "node %u '%s'", n->id, weft_node_op_name(n));
  if (len < 0 || (size_t)len >= size) return buf;
  if (weft__node_name(n) != NULL)
    len += snprintf(buf + len, size - (size_t)len, " \"%s\"", weft__node_name(n));
  else if (*result)
    len += snprintf(buf + len, size - (size_t)len, " (%s)", result);
  if (len < 0 || (size_t)len >= size) return buf;
  len += snprintf(buf + len, size - (size_t)len, " on %s",
                  weft_device_str(n->device, dev, sizeof dev));
  if (weft__node_origin(n) != NULL && len >= 0 && (size_t)len < size)
    snprintf(buf + len, size - (size_t)len, " at %s", weft__node_origin(n));
  return buf;
}
