/* storage.c — tensor contents: where they live, when they are allocated and initialised,
 * and the synchronous reads and writes of the public API; graph creation and destruction.
 *
 * Host tensors are the scheduler's own: up to SMALL bytes they come from the graph's storage
 * arena (a graph of 90 000 one-element tensors costs no malloc per tensor); larger ones from
 * the heap, 64-byte aligned, or, when a GPU copies to or from them, from the GPU backend's
 * pinned host memory so the copy is truly asynchronous. Device tensors are their backend's
 * (`alloc`), which may defer a temporary's storage to the run that needs it.
 *
 * Storage is materialised at the first launch or the first read/write of a tensor, and the
 * creation initialiser applied then, once: contents persist from run to run. */
#include <string.h>

#include "sched/sched.h"

enum { SMALL = 256 };

/* A tensor of up to SMALL bytes in the storage arena: tiny ones (scalars, small vectors) 16-byte
 * aligned, packed several to a cache line; the rest on a line of their own. */
static size_t small_align(size_t bytes) { return bytes <= 32 ? 16 : 64; }

/* Storage that copies ask of their ends: pinned host memory for a CPU tensor a GPU copies to
 * or from; for a GPU tensor another rank's GPU copies into, memory the host's other processes
 * can map (weft__gpu_direct). */
static void mark_copy_ends(weft_graph *g) {
  if (g->rt->pinned == NULL) return;
  weft_node **nodes = g->nodes.data;
  for (size_t i = 0; i < g->nodes.len; i++) {
    weft_node *n = nodes[i];
    if (n->kind != WEFT__OP_COPY) continue;
    /* The tensors whose storage the copy reads and writes: a view's is its parent's, but a
     * distributed tensor's tile has its own (and the distributed tensor none, on a CPU). */
    weft_tensor *src = (weft_tensor *)weft__storage_owner(n->args[0].t);
    weft_tensor *dst = (weft_tensor *)weft__storage_owner(n->args[1].t);
    if (src->device.kind == WEFT_DEVICE_CPU && dst->device.kind != WEFT_DEVICE_CPU)
      src->flags |= WEFT__T_PINNED;
    if (dst->device.kind == WEFT_DEVICE_CPU && src->device.kind != WEFT_DEVICE_CPU)
      dst->flags |= WEFT__T_PINNED;
    if (weft__gpu_direct(g->rt, src->device, dst->device)) dst->ipc = 1;
  }
}

static int host_alloc_storage(weft_graph *g, weft_tensor *t) {
  /* Pinned first, small tensors too: a copy to pageable memory makes the GPU backend wait for
   * it (a logged scalar would stall its stream every step). A tensor on auto is pinned too: the
   * planner moves it (or its tiles) between the host and the GPUs, through copies of the placed
   * graph that this graph does not show (a pageable tile moved at an eighth of the link's
   * rate, an out-of-core Cholesky on an H100 at 0.12 x in core). */
  if ((t->flags & (WEFT__T_PINNED | WEFT__T_AUTODEV)) && g->rt->pinned != NULL) {
    weft__backend *b = g->rt->pinned;
    t->data = b->vt->host_alloc(b, t->bytes);
    if (t->data != NULL) {
      t->storage_kind = WEFT__S_PINNED;
      weft__storage_owned(t);
      return WEFT_OK;
    }
    /* Pinned memory is a speed-up, not a requirement: fall back to pageable memory. */
  }
  if (t->bytes <= SMALL) {
    t->data = weft__arena_alloc(&g->storage_arena, t->bytes, small_align(t->bytes));
    if (t->data == NULL) return weft__oom("tensor contents");
    t->storage_kind = WEFT__S_SMALL;
    return WEFT_OK;
  }
  t->data = weft__aligned_alloc(64, t->bytes);
  if (t->data == NULL)
    return weft__err(WEFT_ENOMEM, "out of host memory for tensor %s (%zu bytes)",
                     weft__tensor_name(t), t->bytes);
  t->storage_kind = WEFT__S_HEAP;
  weft__storage_owned(t);
  return WEFT_OK;
}

/* The runtime's count of host tensor storage (weft_device_memory_usage). */
static void host_count(weft_runtime *rt, size_t bytes) {
  size_t now = atomic_fetch_add(&rt->host_bytes, bytes) + bytes;
  size_t peak = atomic_load(&rt->host_peak);
  while (now > peak && !atomic_compare_exchange_weak(&rt->host_peak, &peak, now)) {
  }
}

/* Counted: tensors of more than SMALL bytes (the tiny ones, a few bytes each from the graph's
 * arena, would pay an atomic each for nothing a user could see). */
static int host_alloc(weft_graph *g, weft_tensor *t) {
  int rc = host_alloc_storage(g, t);
  if (rc == WEFT_OK && t->storage_kind != WEFT__S_SMALL) host_count(g->rt, t->bytes);
  return rc;
}

/* A host tensor's initialiser, in chunks of FILL_CHUNK elements that the idle workers share
 * with the caller (at most `intra` threads, the caller included, like one op's tiles): each
 * element's value depends on its index alone (cpu_fill.c), and the chunks' pages are first
 * touched by the threads that write them. */
enum { FILL_CHUNK = 1 << 18 };

typedef struct fill_job {
  char *p;
  int dtype;
  int64_t n;
  weft_init init;
} fill_job;

static void fill_tile(void *arg, uint32_t tile) {
  const fill_job *j = arg;
  int64_t lo = (int64_t)tile * FILL_CHUNK, hi = lo + FILL_CHUNK < j->n ? lo + FILL_CHUNK : j->n;
  weft__cpu_fill_at(j->p + (size_t)lo * weft_dtype_size(j->dtype), j->dtype, lo, hi - lo, j->init);
}

/* A tile of a distributed tensor, in storage of its own (dst: its contiguous elements): row by
 * row, each element the value of its index in the whole tensor (its initialiser's), as without
 * distribution. */
static void fill_tile_rows(const weft_tensor *t, void *dst) {
  const weft_tensor *p = t->view->parent;
  size_t es = weft_dtype_size(t->dtype), row = (size_t)t->shape[1];
  for (int64_t r = 0; r < t->shape[0]; r++)
    weft__cpu_fill_at((char *)dst + (size_t)r * row * es, t->dtype, t->view->offset + r * t->view->ld, t->shape[1],
                      weft__tensor_init(p));
}

static void host_fill(weft_tensor *t) {
  weft_runtime *rt = t->graph->rt;
  if (weft__tile_owns_storage(t)) {
    fill_tile_rows(t, t->data);
    return;
  }
  fill_job j = {t->data, t->dtype, t->numel, weft__tensor_init(t)};
  uint32_t tiles = (uint32_t)((t->numel + FILL_CHUNK - 1) / FILL_CHUNK);
  uint32_t helpers = (uint32_t)rt->intra - 1;
  if (tiles > 1 && helpers > 0)
    weft__pool_parallel(rt->pool, tiles, helpers, fill_tile, &j);
  else
    weft__cpu_fill(t->data, t->dtype, t->numel, weft__tensor_init(t));
}

/* Whether every element of a tensor so initialised has the same value, whatever its index. */
static int init_is_constant(weft_init init) {
  return init.kind == WEFT_INIT_ZEROS || init.kind == WEFT_INIT_ONES || init.kind == WEFT_INIT_FULL;
}

/* A distributed tile on a GPU whose values depend on their index in the whole (random, eye):
 * made on the host, row by row as there, then written (the backends fill from index 0). */
static int device_tile_fill(weft_tensor *t) {
  void *host = weft__malloc(t->bytes);
  if (host == NULL) return weft__oom("a tile's initial values");
  fill_tile_rows(t, host);
  weft__backend *b = weft__backend_for(t->graph->rt, t->device);
  int rc = b->vt->write(b, t, host);
  weft__free(host);
  return rc;
}

int weft__storage_prepare(weft_tensor *t) {
  int rc;
  weft_graph *g = t->graph;
  /* An auto tensor used before the planner gave it a home lives on the host until then, each
   * rank's on its own. */
  if (t->device.kind == WEFT_DEVICE_AUTO && t->view == NULL) t->device = weft_on_rank(weft_cpu(), g->rt->rank);
  /* A distributed or split tensor has no storage: its tiles have theirs, each where it lives. */
  if (weft__tensor_tiles_own(t)) {
    t->initialised = 1;
    return WEFT_OK;
  }
  if (t->view != NULL && t->storage_kind == WEFT__S_NONE && !weft__tile_owns_storage(t)) {
    weft_tensor *p = t->view->parent;
    if ((rc = weft__storage_prepare(p)) != WEFT_OK) return rc;
    if (p->graph == t->graph) t->device = p->device; /* a tile is where its parent is */
    t->data = (char *)p->data + (size_t)t->view->offset * weft_dtype_size(t->dtype);
    t->storage_kind = WEFT__S_VIEW;
    t->initialised = 1;
    return WEFT_OK;
  }
  /* Another rank's tensor has its storage there, not here. */
  if (!weft__rank_here(g->rt, t->device.rank)) return WEFT_OK;
  if (t->storage_kind == WEFT__S_NONE) {
    if (t->bytes == 0) {
      t->storage_kind = WEFT__S_EMPTY;
    } else if (t->device.kind == WEFT_DEVICE_CPU) {
      if ((rc = host_alloc(g, t)) != WEFT_OK) return rc;
    } else {
      weft__backend *b = weft__backend_for(g->rt, t->device);
      if ((rc = b->vt->alloc(b, t)) != WEFT_OK) return rc;
      if (t->storage_kind == WEFT__S_NONE) return WEFT_OK; /* managed per run by the backend */
    }
  }
  if (!t->initialised) {
    if (t->storage_kind == WEFT__S_EMPTY) {
    } else if (t->device.kind == WEFT_DEVICE_CPU) {
      host_fill(t);
    } else if (weft__tile_owns_storage(t) && !init_is_constant(weft__tensor_init(t))) {
      if ((rc = device_tile_fill(t)) != WEFT_OK) return rc;
    } else {
      weft__backend *b = weft__backend_for(g->rt, t->device);
      if ((rc = b->vt->init_tensor(b, t)) != WEFT_OK) return rc;
    }
    t->initialised = 1;
  }
  return WEFT_OK;
}

/* Tensors of at least SETUP_ALONE bytes are setup steps of their own; the smaller ones, which a
 * graph may hold by the hundred thousand (two clock readings each would cost more than making
 * them), share one step, timed as the whole loop less the large ones. */
enum { SETUP_ALONE = 64 << 10 };

/* ---- many small host tensors, with the pool's idle workers ---------------------------------
 *
 * A graph of one small tensor a task (Task Bench: 8000 of 16 bytes) spent 0.2-0.35 ms of its
 * first launch on 16 cores making them one by one, each record a cache miss, while the pool
 * waited for the first node. The plain ones (on this rank's host, not a view, not pinned, no
 * storage yet, up to SMALL bytes) are made in tiles of SMALL_TILE tensors instead: each tile
 * sizes its ones, the launching thread takes a block of the storage arena for each tile, and
 * each tile places its tensors in its block, packed as the arena packs them (16-byte aligned up
 * to 32 bytes, 64 above), and applies their initialisers. The rest go through the loop below.
 * The two passes over the records pay from 4 workers on: with 2 (dev) they took the wave
 * graph's 90 000 tensors from 21-22 to 31-42 ns each. Tiles of 256 tensors: of 1024, 8000
 * tensors made 8 tiles for 16 workers, and the step took 0.1-0.13 ms. */
enum { SMALL_TILE = 256, PAR_TENSORS_MIN = 2048, PAR_WORKERS_MIN = 4 };

typedef struct small_job {
  weft_graph *g;
  size_t first, n;
  size_t *bytes;    /* per tile: what its tensors take, then (after placing) their bytes */
  char **block;     /* per tile: its block of the storage arena */
  uint32_t *made;   /* per tile: tensors made */
  uint32_t *others; /* per tile: tensors the one-by-one loop has still to see */
} small_job;

static int plain_small(const weft_graph *g, const weft_tensor *t) {
  return t->view == NULL && t->grid == NULL && t->device.kind == WEFT_DEVICE_CPU && weft__rank_here(g->rt, t->device.rank) &&
         t->storage_kind == WEFT__S_NONE && !t->initialised && t->bytes > 0 && t->bytes <= SMALL &&
         !((t->flags & (WEFT__T_PINNED | WEFT__T_AUTODEV)) && g->rt->pinned != NULL);
}

static size_t place_small(size_t off, size_t bytes) {
  size_t align = small_align(bytes);
  return (off + align - 1) & ~(align - 1);
}

static void small_size_tile(void *arg, uint32_t tile) {
  small_job *j = arg;
  weft_tensor **ts = (weft_tensor **)j->g->tensors.data + j->first;
  size_t lo = (size_t)tile * SMALL_TILE, hi = j->n - lo < SMALL_TILE ? j->n : lo + SMALL_TILE, off = 0;
  uint32_t others = 0;
  for (size_t i = lo; i < hi; i++) {
    const weft_tensor *t = ts[i];
    if (i + WEFT__AHEAD < hi) WEFT__PREFETCH(ts[i + WEFT__AHEAD]);
    if (plain_small(j->g, t))
      off = place_small(off, t->bytes) + t->bytes;
    else if (t->storage_kind == WEFT__S_NONE || !t->initialised || t->device.kind == WEFT_DEVICE_AUTO)
      others++; /* (one with storage and values, not on auto, needs nothing) */
  }
  j->bytes[tile] = off;
  j->others[tile] = others;
}

static void small_make_tile(void *arg, uint32_t tile) {
  small_job *j = arg;
  weft_tensor **ts = (weft_tensor **)j->g->tensors.data + j->first;
  size_t lo = (size_t)tile * SMALL_TILE, hi = j->n - lo < SMALL_TILE ? j->n : lo + SMALL_TILE, off = 0, bytes = 0;
  uint32_t made = 0;
  for (size_t i = lo; i < hi; i++) {
    weft_tensor *t = ts[i];
    if (!plain_small(j->g, t)) continue;
    off = place_small(off, t->bytes);
    t->data = j->block[tile] + off;
    off += t->bytes;
    t->storage_kind = WEFT__S_SMALL;
    weft__cpu_fill(t->data, t->dtype, t->numel, weft__tensor_init(t));
    t->initialised = 1;
    made++;
    bytes += t->bytes;
  }
  j->made[tile] = made;
  j->bytes[tile] = bytes;
}

/* Makes the plain small tensors of [first, len) in tiles; *made and *bytes say how many and
 * how large, and *others (the caller's to free), per tile, how many tensors the loop has still
 * to see. */
static int small_in_parallel(weft_graph *g, size_t first, uint32_t *made, uint64_t *bytes, uint32_t **others) {
  size_t n = g->tensors.len - first;
  uint32_t tiles = (uint32_t)((n + SMALL_TILE - 1) / SMALL_TILE);
  small_job j = {g, first, n, weft__calloc(tiles, sizeof(size_t)), weft__calloc(tiles, sizeof(char *)),
                 weft__calloc(tiles, sizeof(uint32_t)), weft__calloc(tiles, sizeof(uint32_t))};
  int rc = WEFT_OK;
  *others = j.others;
  if (j.bytes == NULL || j.block == NULL || j.made == NULL || j.others == NULL) {
    rc = weft__oom("tensor contents");
    goto done;
  }
  weft__pool *pool = g->rt->pool;
  uint32_t helpers = (uint32_t)weft__pool_size(pool) - 1;
  weft__pool_parallel(pool, tiles, helpers, small_size_tile, &j);
  for (uint32_t t = 0; t < tiles; t++)
    if (j.bytes[t] > 0 && (j.block[t] = weft__arena_alloc(&g->storage_arena, j.bytes[t], 64)) == NULL) {
      rc = weft__oom("tensor contents");
      goto done;
    }
  weft__pool_parallel(pool, tiles, helpers, small_make_tile, &j);
  for (uint32_t t = 0; t < tiles; t++) {
    *made += j.made[t];
    *bytes += j.bytes[t];
  }
done:
  weft__free(j.bytes);
  weft__free(j.block);
  weft__free(j.made);
  return rc;
}

int weft__storage_materialise(weft_graph *g, weft__vec *setup) {
  if (g->materialised == g->tensors.len) return WEFT_OK;
  mark_copy_ends(g);
  weft_tensor **ts = g->tensors.data;
  uint64_t start = setup != NULL ? weft__clock_now() : 0, small_bytes = 0;
  uint32_t small = 0, *others = NULL;
  size_t first_rec = setup != NULL ? setup->len : 0, first = g->materialised;
  if (g->tensors.len - first >= PAR_TENSORS_MIN && weft__pool_size(g->rt->pool) >= PAR_WORKERS_MIN) {
    int rc = small_in_parallel(g, first, &small, &small_bytes, &others);
    if (rc != WEFT_OK) {
      weft__free(others);
      return rc;
    }
  }
  for (size_t i = first; i < g->tensors.len; i++) {
    if (others != NULL && others[(i - first) / SMALL_TILE] == 0) { /* a tile with nothing left */
      i = first + ((i - first) / SMALL_TILE + 1) * SMALL_TILE - 1;
      continue;
    }
    weft_tensor *t = ts[i];
    if (i + WEFT__AHEAD < g->tensors.len) { /* the two lines read here (graph.h) */
      WEFT__PREFETCH(ts[i + WEFT__AHEAD]);
      WEFT__PREFETCH((char *)ts[i + WEFT__AHEAD] + 64);
    }
    int fresh = setup != NULL && (t->view == NULL || weft__tile_owns_storage(t)) && t->bytes > 0 &&
                (t->storage_kind == WEFT__S_NONE || !t->initialised);
    uint64_t t0 = fresh && t->bytes >= SETUP_ALONE ? weft__clock_now() : 0;
    int rc = weft__storage_prepare(t);
    if (rc != WEFT_OK) {
      weft__free(others);
      return rc;
    }
    if (!fresh || (t->storage_kind == WEFT__S_NONE && !t->initialised)) continue; /* none, or deferred */
    if (t0 == 0) {
      small++;
      small_bytes += t->bytes;
      continue;
    }
    weft__setup_rec rec = {.t0 = t0, .t1 = weft__clock_now(), .bytes = t->bytes, .tensor = t->id, .count = 1,
                           .kind = WEFT__SETUP_TENSOR, .pinned = t->storage_kind == WEFT__S_PINNED};
    if ((rc = weft__vec_push(setup, &rec)) != WEFT_OK) {
      weft__free(others);
      return rc;
    }
  }
  weft__free(others);
  if (small > 0 && setup != NULL) {
    /* The large ones end to end from the start (their durations kept), then the small ones'
     * step: in order, none overlapping, ending when the loop did. */
    weft__setup_rec *recs = setup->data;
    uint64_t at = start, end = weft__clock_now();
    for (size_t i = first_rec; i < setup->len; i++) {
      uint64_t d = recs[i].t1 - recs[i].t0;
      recs[i].t0 = at;
      recs[i].t1 = at += d;
    }
    weft__setup_rec rec = {.t0 = at < end ? at : end, .t1 = end, .bytes = small_bytes, .tensor = UINT32_MAX,
                           .count = small, .kind = WEFT__SETUP_TENSOR};
    int rc = weft__vec_push(setup, &rec);
    if (rc != WEFT_OK) return rc;
  }
  g->materialised = g->tensors.len;
  return WEFT_OK;
}

void weft__storage_release(weft_tensor *t) {
  weft_graph *g = t->graph;
  if (t->storage_kind == WEFT__S_HEAP || t->storage_kind == WEFT__S_PINNED)
    atomic_fetch_sub(&g->rt->host_bytes, t->bytes);
  switch (t->storage_kind) {
      case WEFT__S_HEAP:
        weft__aligned_free(t->data);
        break;
      case WEFT__S_PINNED:
        g->rt->pinned->vt->host_free(g->rt->pinned, t->data);
        break;
      case WEFT__S_DEVICE:
      case WEFT__S_IPC: {
        weft__backend *b = weft__backend_for(g->rt, t->device);
        b->vt->free(b, t);
        break;
      }
      default:
        break;
  }
  t->data = NULL;
  t->storage_kind = WEFT__S_NONE;
}

void weft__storage_release_all(weft_graph *g) {
  /* A graph of small host tensors only (storage from its arena, freed with it) has nothing to
   * free one by one: the walk over 90 000 cold tensors was a third of the wave graph's destroy. */
  if (!atomic_load_explicit(&g->owns_storage, memory_order_relaxed)) return;
  weft_tensor **ts = g->tensors.data;
  /* Tensors dropped by a failed op call sit past tensors.len only in the arena; they never
   * got storage, since storage is made at launch or read/write time. */
  for (size_t i = 0; i < g->tensors.len; i++) {
    if (i + WEFT__AHEAD < g->tensors.len) WEFT__PREFETCH(ts[i + WEFT__AHEAD]);
    weft__storage_release(ts[i]);
  }
}

/* ---- public: reading and writing contents ---------------------------------------------- */

static int access_check(weft_tensor *t, size_t size, const char *what, int reading) {
  if (t == NULL) return weft__err(WEFT_EINVAL, "%s: tensor is NULL", what);
  int rc = weft__graph_check_idle(t->graph, what);
  if (rc != WEFT_OK) return rc;
  const weft_runtime *rt = t->graph->rt;
  /* (An auto tensor not placed yet is every rank's: each rank's on its host, until its home.) */
  if (t->device.kind != WEFT_DEVICE_AUTO && !weft__rank_here(rt, t->device.rank) && strcmp(what, "weft_tensor_read_all") != 0)
    return weft__err(WEFT_EDEVICE,
                     "%s: tensor %s lives on rank %d, not on this one (rank %d): %s it there, or read it "
                     "on every rank with weft_tensor_read_all",
                     what, weft__tensor_name(t), t->device.rank, rt->rank, reading ? "read" : "write");
  if (size != t->bytes)
    return weft__err(WEFT_EINVAL, "%s: tensor %s holds %zu bytes but the buffer has %zu", what,
                     weft__tensor_name(t), t->bytes, size);
  if (reading && !weft_tensor_is_kept(t) && t->graph->materialised > t->id)
    return weft__err(WEFT_ESTATE,
                     "%s: tensor %s is a temporary (an op made it and a later node reads it), so "
                     "its storage is released after its last use; call weft_tensor_keep before "
                     "the run to read it",
                     what, weft__tensor_name(t));
  /* A write of an auto tensor before its first placement is every rank's (each rank writes its
   * own copy alike: the ranks run one program); placement then counts its contents on every
   * rank's host. A read changes nothing placement sees: a rank's copy holds the initialiser's
   * values, which any device makes alike. */
  weft_tensor *grp = t->view != NULL ? t->view->parent : t;
  if (!reading && (grp->flags & WEFT__T_AUTODEV) && !(grp->flags & WEFT__T_PLACED)) grp->flags |= WEFT__T_EVERY_RANK;
  return weft__storage_prepare(t);
}

/* Reads or writes a strided tile through its parent: in place on the host, through a copy of
 * the parent elsewhere. */
/* Tile t's rows between `whole` (a buffer of its parent's layout) and `dense` (t's elements
 * contiguous): into dense when `to_dense`, else out of it. */
static void tile_rows(const weft_tensor *t, char *whole, char *dense, int to_dense) {
  size_t es = weft_dtype_size(t->dtype), row = (size_t)t->shape[1] * es, ld = (size_t)t->view->ld * es;
  char *at = whole + (size_t)t->view->offset * es;
  for (int64_t i = 0; i < t->shape[0]; i++)
    if (to_dense)
      memcpy(dense + (size_t)i * row, at + (size_t)i * ld, row);
    else
      memcpy(at + (size_t)i * ld, dense + (size_t)i * row, row);
}

static int tile_io(weft_tensor *t, void *buf, int reading) {
  weft_tensor *p = t->view->parent;
  char *whole = p->device.kind == WEFT_DEVICE_CPU ? p->data : weft__malloc(p->bytes);
  if (whole == NULL) return weft__oom("a copy of a tile's parent");
  int rc = p->device.kind == WEFT_DEVICE_CPU ? WEFT_OK : weft_tensor_read(p, whole, p->bytes);
  if (rc == WEFT_OK) tile_rows(t, whole, buf, reading);
  if (rc == WEFT_OK && !reading && p->device.kind != WEFT_DEVICE_CPU) rc = weft_tensor_write(p, whole, p->bytes);
  if (whole != p->data) weft__free(whole);
  return rc;
}

int weft__storage_copy_out(weft_tensor *t, void *dst) {
  if (t->bytes == 0) return WEFT_OK;
  if (t->device.kind == WEFT_DEVICE_CPU) {
    memcpy(dst, t->data, t->bytes);
    return WEFT_OK;
  }
  weft__backend *b = weft__backend_for(t->graph->rt, t->device);
  return b->vt->read(b, t, dst);
}

int weft__storage_copy_in(weft_tensor *t, const void *src) {
  if (t->bytes == 0) return WEFT_OK;
  if (t->device.kind == WEFT_DEVICE_CPU) {
    memcpy(t->data, src, t->bytes);
    return WEFT_OK;
  }
  weft__backend *b = weft__backend_for(t->graph->rt, t->device);
  return b->vt->write(b, t, src);
}

/* Partitioned tensor x's tile count, and its tile q in row-major order. */
static uint32_t tile_count(const weft_tensor *x) { return (uint32_t)(x->grid->rows * x->grid->cols); }
static weft_tensor *tile_at(const weft_tensor *x, uint32_t q) {
  return WEFT__VEC_AT(&x->graph->tensors, weft_tensor *, x->grid->first + q);
}

/* Back to views of x: each tile's own storage released. */
static void tiles_unown(weft_tensor *x) {
  x->grid->split = 0;
  for (uint32_t q = 0; q < tile_count(x); q++) {
    weft_tensor *tile = tile_at(x, q);
    weft__storage_release(tile);
    tile->initialised = 0; /* a view again: its parent's contents (storage_prepare) */
    tile->device = x->device;
  }
}

int weft__storage_split(weft_tensor *x, const weft_device *homes) {
  weft_runtime *rt = x->graph->rt;
  int had = x->storage_kind != WEFT__S_NONE && x->storage_kind != WEFT__S_EMPTY, rc = WEFT_OK;
  char *whole = had && x->device.kind == WEFT_DEVICE_CPU ? x->data : had ? weft__malloc(x->bytes) : NULL;
  char *tmp = weft__malloc((size_t)(x->grid->tile[0] * x->grid->tile[1]) * weft_dtype_size(x->dtype));
  if ((had && whole == NULL) || tmp == NULL) rc = weft__oom("splitting a tensor into its tiles");
  if (rc == WEFT_OK && had && whole != x->data) rc = weft__storage_copy_out(x, whole);
  if (rc == WEFT_OK) {
    for (uint32_t q = 0; q < tile_count(x); q++) { /* views of x until now */
      tile_at(x, q)->storage_kind = WEFT__S_NONE;
      tile_at(x, q)->data = NULL;
    }
    x->grid->split = 1;
    for (uint32_t q = 0; q < tile_count(x); q++) {
      weft_tensor *tile = tile_at(x, q);
      tile->device = homes[q];
      tile->initialised = had; /* else its initialiser's values, made where it lives */
      if (rc == WEFT_OK) rc = weft__storage_prepare(tile);
      if (rc == WEFT_OK && had) {
        tile_rows(tile, whole, tmp, 1);
        rc = weft__storage_copy_in(tile, tmp);
      }
    }
    if (rc != WEFT_OK) tiles_unown(x);
  }
  if (whole != x->data) weft__free(whole);
  weft__free(tmp);
  if (rc != WEFT_OK) return rc;
  weft__storage_release(x);
  x->device = weft_on_rank(weft_cpu(), rt->rank);
  x->initialised = 1;
  return WEFT_OK;
}

int weft__storage_join(weft_tensor *x) {
  weft_runtime *rt = x->graph->rt;
  char *whole = weft__malloc(x->bytes);
  char *tmp = weft__malloc((size_t)(x->grid->tile[0] * x->grid->tile[1]) * weft_dtype_size(x->dtype));
  int rc = whole == NULL || tmp == NULL ? weft__oom("joining a tensor's tiles") : WEFT_OK;
  for (uint32_t q = 0; q < tile_count(x) && rc == WEFT_OK; q++) {
    weft_tensor *tile = tile_at(x, q);
    rc = weft__storage_prepare(tile);
    if (rc == WEFT_OK) rc = weft__storage_copy_out(tile, tmp);
    if (rc == WEFT_OK) tile_rows(tile, whole, tmp, 0);
  }
  if (rc == WEFT_OK) { /* storage of its own first: on an error the tiles keep theirs */
    weft_device was = x->device;
    x->grid->split = 0;
    x->device = weft_on_rank(weft_cpu(), rt->rank);
    x->initialised = 1; /* its contents are the tiles' */
    rc = weft__storage_prepare(x);
    if (rc == WEFT_OK) rc = weft__storage_copy_in(x, whole);
    if (rc == WEFT_OK) {
      tiles_unown(x);
    } else {
      weft__storage_release(x);
      x->grid->split = 1;
      x->device = was;
    }
  }
  weft__free(whole);
  weft__free(tmp);
  return rc;
}

/* The tiles of t (distributed or split: tiles with storage of their own) that live on this rank
 * (write), or all of them gathered from where they live, on every rank (read: collective), from
 * or into a buffer of the whole. */
static int tiles_io(weft_tensor *t, void *buf, int reading) {
  const weft__grid *gr = t->grid;
  weft_runtime *rt = t->graph->rt;
  char *tmp = weft__malloc((size_t)(gr->tile[0] * gr->tile[1]) * weft_dtype_size(t->dtype));
  if (tmp == NULL) return weft__oom("a tile's buffer");
  int rc = WEFT_OK;
  for (int64_t i = 0; i < gr->rows; i++)
    for (int64_t j = 0; j < gr->cols; j++) {
      weft_tensor *tile = weft_tensor_tile(t, i, j);
      if (!reading && !weft__rank_here(rt, tile->device.rank)) continue;
      if (!reading) tile_rows(tile, buf, tmp, 1);
      /* A failed tile still takes part in the collective reads after it: the others wait. */
      int trc = reading ? weft_tensor_read_all(tile, tmp, tile->bytes) : weft_tensor_write(tile, tmp, tile->bytes);
      if (rc == WEFT_OK) rc = trc;
      if (reading) tile_rows(tile, buf, tmp, 0);
    }
  weft__free(tmp);
  return rc;
}

int weft_tensor_read(weft_tensor *t, void *dst, size_t size) {
  /* Across ranks a gather is collective: every rank must ask (weft_tensor_read_all). */
  if (t != NULL && weft__tensor_distributed(t) && weft__ranks_apart(t->graph->rt))
    return weft__err(WEFT_EDEVICE,
                     "weft_tensor_read: tensor %s is distributed over %d x %d %s: read it on every rank with "
                     "weft_tensor_read_all, or read the tiles this rank owns",
                     weft__tensor_name(t), t->grid->P, t->grid->Q, weft__grid_places(t->grid));
  int rc = access_check(t, size, "weft_tensor_read", 1);
  if (rc != WEFT_OK) return rc;
  if (size == 0) return WEFT_OK;
  if (dst == NULL) return weft__err(WEFT_EINVAL, "weft_tensor_read: dst is NULL");
  if (weft__tensor_tiles_own(t)) return tiles_io(t, dst, 1);
  if (!weft__tensor_contiguous(t)) return tile_io(t, dst, 1);
  return weft__storage_copy_out(t, dst);
}

int weft_tensor_read_all(weft_tensor *t, void *dst, size_t size) {
  int rc = access_check(t, size, "weft_tensor_read_all", 1);
  if (rc != WEFT_OK) return rc;
  if (size == 0) return WEFT_OK;
  if (dst == NULL) return weft__err(WEFT_EINVAL, "weft_tensor_read_all: dst is NULL");
  weft_runtime *rt = t->graph->rt;
  /* The owner reads it; then it goes to every rank. A failed read still takes part in the
   * broadcast (the others wait for it), and its error is returned after. */
  if (weft__tensor_tiles_own(t)) return tiles_io(t, dst, 1);
  int mine = weft__rank_here(rt, t->device.rank);
  if (mine) rc = !weft__tensor_contiguous(t) ? tile_io(t, dst, 1) : weft__storage_copy_out(t, dst);
  if (rt->remote == NULL) return rc;
  int brc = rt->remote->vt->bcast(rt->remote, dst, size, t->device.rank);
  return rc != WEFT_OK ? rc : brc;
}

int weft_tensor_write(weft_tensor *t, const void *src, size_t size) {
  int rc = access_check(t, size, "weft_tensor_write", 0);
  if (rc != WEFT_OK) return rc;
  if (size == 0) return WEFT_OK;
  if (src == NULL) return weft__err(WEFT_EINVAL, "weft_tensor_write: src is NULL");
  if (weft__tensor_tiles_own(t)) return tiles_io(t, (void *)src, 0);
  if (!weft__tensor_contiguous(t)) return tile_io(t, (void *)src, 0);
  return weft__storage_copy_in(t, src);
}

int weft_tensor_get(weft_tensor *t, int64_t index, double *out) {
  if (t == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_tensor_get: NULL argument");
  if (weft__tensor_distributed(t) && weft__ranks_apart(t->graph->rt))
    return weft__err(WEFT_EDEVICE, "weft_tensor_get: tensor %s is distributed over %d x %d %s: read it with "
                     "weft_tensor_read_all", weft__tensor_name(t), t->grid->P, t->grid->Q, weft__grid_places(t->grid));
  if (index < 0 || index >= t->numel)
    return weft__err(WEFT_EINVAL, "weft_tensor_get: index %lld out of range for tensor %s (%lld elements)",
                     (long long)index, weft__tensor_name(t), (long long)t->numel);
  size_t es = weft_dtype_size(t->dtype);
  if (t->device.kind == WEFT_DEVICE_CPU && !weft__tensor_tiles_own(t)) {
    int rc = access_check(t, t->bytes, "weft_tensor_get", 1);
    if (rc != WEFT_OK) return rc;
    int64_t at = weft__tensor_contiguous(t) ? index : index / t->shape[1] * t->view->ld + index % t->shape[1];
    const char *p = (const char *)t->data + (size_t)at * es;
    *out = t->dtype == WEFT_F32 ? (double)*(const float *)p : *(const double *)p;
    return WEFT_OK;
  }
  void *buf = weft__malloc(t->bytes);
  if (buf == NULL) return weft__oom("a read buffer");
  int rc = weft_tensor_read(t, buf, t->bytes);
  if (rc == WEFT_OK) {
    const char *p = (const char *)buf + (size_t)index * es;
    *out = t->dtype == WEFT_F32 ? (double)*(const float *)p : *(const double *)p;
  }
  weft__free(buf);
  return rc;
}

/* ---- public: graph lifecycle ------------------------------------------------------------ */

int weft_graph_create(weft_runtime *rt, weft_graph **out) {
  if (rt == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_graph_create: NULL argument");
  weft_graph *g = weft__graph_new(rt, weft__blockpool_mem(rt->blocks), &rt->spare);
  if (g == NULL) return WEFT_ENOMEM;
  atomic_fetch_add(&rt->graphs, 1);
  *out = g;
  return WEFT_OK;
}

void weft_graph_destroy(weft_graph *g) {
  if (g == NULL) return;
  /* A run still in flight uses the graph's storage: let it finish (its handle stays the
   * user's to destroy). Runs end on their own, so this wait is bounded. */
  while (atomic_load_explicit(&g->busy, memory_order_acquire)) weft__thread_yield();
  weft__graph_follow_close(g, 0); /* its task stops before anything of the graph goes */
  weft_runtime *rt = g->rt;
  weft__placement_free(g); /* the placed graph's views of g's tensors go first */
  weft__plan_free(rt, g->plan);
  g->plan = NULL;
  weft__storage_release_all(g);
  weft__graph_free(g);
  atomic_fetch_sub(&rt->graphs, 1);
}
