/* dep_analysis.c — edges from access lists, explicit edges, temporaries, and the cycle check.
 *
 * One pass over the nodes in insertion order, keeping per tensor the last writer and the
 * readers since that write:
 *   read  t: RAW edge last_writer(t) -> n; n joins readers(t)
 *   write t: WAR edges readers(t) -> n, or, with no reader since the last write, a WAW edge
 *            last_writer(t) -> n (a writer that waits for the readers already waits for the
 *            write they read); then last_writer(t) = n and readers(t) is emptied.
 * A node that reads and writes t does both; then the explicit edges into n join. Edges from a
 * node to itself are skipped and each (pred, succ) pair is kept once, with the hazard found
 * first (so an explicit edge that repeats an inferred one is not listed). Inferred edges point
 * forward in insertion order, so only explicit edges can close a cycle: the cycle check runs
 * only when one points backward, and names the nodes of a cycle it finds.
 *
 * The analysis follows the graph as it is built: each appended node gets its edges at once,
 * from the state kept in the graph (each tensor's last writer and readers since, in the
 * tensor; a stamp and a successor count per node), while the tensors it names are in the cache. Any other change
 * (an explicit edge, tiles, a failed call's nodes dropped) leaves it behind, and the next
 * analysis goes over every node again. A launch only marks the temporaries.
 *
 * Edges are appended node by node, so g->edges is sorted by target, and each node counts its
 * successors as they come: the plan lays out its successor lists from both (sched/plan/build.c).
 *
 * Cost: O(nodes + accesses + edges) time; two words per node and one per read access kept. */
#include <stdio.h>
#include <string.h>

#include "graph/graph.h"

typedef struct reader {
  uint32_t node, next;
} reader;

#define NONE UINT32_MAX

/* The state lives in the graph, so that appends can follow one another (weft__graph_analyse_append):
 * per tensor its last writer and the head of its readers since (dep_tensor), per node the
 * successor its last edge went to and its successors (dep_node), the readers' list
 * (dep_readers) and the edges (g->edges). */
typedef struct state {
  weft__dep_tensor *dt;
  weft__dep_node *dn;
  reader *readers;
  uint32_t nreaders;
  weft__edge *edges;
  size_t nedges;
} state;

static inline void add_edge(state *s, uint32_t from, uint32_t to, uint32_t tensor, int hazard) {
  if (from == to || s->dn[from].stamp == to) return;
  s->dn[from].stamp = to;
  s->dn[from].nsucc++;
  s->edges[s->nedges++] = (weft__edge){from, to, tensor, (uint8_t)hazard};
}

static inline void read_access(state *s, uint32_t id, uint32_t t) {
  weft__dep_tensor *d = &s->dt[t];
  if (d->writer != NONE) add_edge(s, d->writer, id, t, WEFT_HAZARD_RAW);
  s->readers[s->nreaders] = (reader){id, d->head};
  d->head = s->nreaders++;
}

static inline void write_access(state *s, uint32_t id, uint32_t t) {
  weft__dep_tensor *d = &s->dt[t];
  int any_reader = 0;
  for (uint32_t r = d->head; r != NONE; r = s->readers[r].next) {
    uint32_t from = s->readers[r].node;
    if (from == id) continue;
    any_reader = 1;
    add_edge(s, from, id, t, WEFT_HAZARD_WAR);
  }
  if (!any_reader && d->writer != NONE) add_edge(s, d->writer, id, t, WEFT_HAZARD_WAW);
  d->writer = id;
  d->head = NONE;
}

/* The ids of a partitioned tensor's tiles. */
#define FOR_TILES(t, k) \
  for (uint32_t k = (t)->grid->first, k##_end = k + (uint32_t)((t)->grid->rows * (t)->grid->cols); k < k##_end; k++)

/* Finds a cycle among the nodes Kahn's algorithm could not order and writes its nodes into the
 * error message. `left` marks them. A leftover node need not lie on a cycle (it may only be
 * downstream of one, with no leftover successor), but every leftover node has a leftover
 * predecessor — else its in-degree would have reached zero — so the walk goes backwards,
 * from predecessor to predecessor, until a node repeats; the repeated stretch is a cycle. */
static int report_cycle(weft_graph *g, const uint8_t *left) {
  size_t n = g->nodes.len, m = g->edges.len;
  const weft__edge *e = g->edges.data;
  uint32_t *poff = weft__calloc(n + 1, sizeof *poff);
  uint32_t *pred = weft__malloc((m ? m : 1) * sizeof *pred);
  uint32_t *path = weft__malloc((n ? n : 1) * sizeof *path);
  uint32_t *seen = weft__calloc(n ? n : 1, sizeof *seen); /* position in path + 1 */
  int rc;
  if (poff == NULL || pred == NULL || path == NULL || seen == NULL) {
    rc = weft__oom("the cycle report");
    goto done;
  }
  /* Predecessor lists of the leftover nodes (CSR; path serves as the fill cursor). */
  for (size_t i = 0; i < m; i++)
    if (left[e[i].from] && left[e[i].to]) poff[e[i].to + 1]++;
  for (size_t i = 0; i < n; i++) poff[i + 1] += poff[i];
  for (size_t i = 0; i < n; i++) path[i] = poff[i];
  for (size_t i = 0; i < m; i++)
    if (left[e[i].from] && left[e[i].to]) pred[path[e[i].to]++] = e[i].from;
  uint32_t v = 0, len = 0;
  while (v < n && !left[v]) v++;
  while (!seen[v]) {
    WEFT_ASSERT(poff[v] < poff[v + 1]);
    seen[v] = ++len;
    path[len - 1] = v;
    v = pred[poff[v]];
  }
  /* path[j..len) is the cycle walked backwards: path[j] -> path[len-1] -> ... -> path[j+1]
   * -> path[j] in execution order. */
  uint32_t j = seen[v] - 1;
  char msg[900];
  int mlen = snprintf(msg, sizeof msg, "dependency cycle through nodes:");
  for (uint32_t k = 0; k < len - j && k < 64; k++) {
    uint32_t u = k == 0 ? path[j] : path[len - k];
    char d[200];
    weft_node *nd = WEFT__VEC_AT(&g->nodes, weft_node *, u);
    if (mlen > 0 && (size_t)mlen < sizeof msg - 40)
      mlen += snprintf(msg + mlen, sizeof msg - (size_t)mlen, "%s %s", k ? " ->" : "",
                       weft_node_describe(nd, d, sizeof d));
  }
  if (mlen > 0 && (size_t)mlen < sizeof msg - 40)
    snprintf(msg + mlen, sizeof msg - (size_t)mlen, " -> back to node %u (explicit edges close it)",
             path[j]);
  rc = weft__err(WEFT_ECYCLE, "%s", msg);
done:
  weft__free(poff);
  weft__free(pred);
  weft__free(path);
  weft__free(seen);
  return rc;
}

/* Orders the graph (Kahn) when an explicit edge points backward: the order goes to g->order,
 * and nodes it cannot order lie on or below a cycle, which is reported. */
static int order_or_cycle(weft_graph *g) {
  size_t n = g->nodes.len, m = g->edges.len;
  const weft__edge *e = g->edges.data;
  uint32_t *off = weft__calloc(n + 1, sizeof *off);
  uint32_t *succ = weft__malloc((m ? m : 1) * sizeof *succ);
  uint32_t *work = weft__malloc((n ? n : 1) * sizeof *work);
  uint8_t *left = weft__malloc(n ? n : 1);
  int rc = WEFT_OK;
  g->order.len = 0;
  if (!off || !succ || !work || !left || (rc = weft__vec_reserve(&g->order, n)) != WEFT_OK) {
    rc = weft__oom("the cycle check");
    goto done;
  }
  for (size_t i = 0; i < m; i++) off[e[i].from + 1]++;
  for (size_t i = 0; i < n; i++) off[i + 1] += off[i];
  for (size_t i = 0; i < n; i++) work[i] = off[i];
  for (size_t i = 0; i < m; i++) succ[work[e[i].from]++] = e[i].to;
  uint32_t *order = g->order.data;
  uint32_t done = weft__topo_order((uint32_t)n, off, succ, work, order);
  if (done < n) {
    memset(left, 1, n);
    for (uint32_t k = 0; k < done; k++) left[order[k]] = 0;
    rc = report_cycle(g, left);
  } else {
    g->order.len = n;
  }
done:
  weft__free(off);
  weft__free(succ);
  weft__free(work);
  weft__free(left);
  return rc;
}

void weft__graph_order(const weft_graph *g, uint32_t *out) {
  size_t n = g->nodes.len;
  if (g->order.len == n && n > 0)
    memcpy(out, g->order.data, n * sizeof *out);
  else
    for (size_t i = 0; i < n; i++) out[i] = (uint32_t)i;
}

/* The reader entries of tensor t since its last write: the WAR edges a write of t may add. */
static size_t readers_since(const weft_graph *g, uint32_t t) {
  const reader *rd = g->dep_readers.data;
  size_t k = 0;
  for (uint32_t r = ((const weft__dep_tensor *)g->dep_tensor.data)[t].head; r != NONE; r = rd[r].next) k++;
  return k;
}

/* Reserves room for node n's worst case (a read adds at most one RAW edge and one reader
 * entry, a write one WAR edge per reader entry of the tensor and at most one WAW edge; and the
 * explicit edges into it), gives every tensor it names a state, and points s at the graph's
 * state. The bound is the node's own, not the graph's: the edges grow with the graph, with no
 * room kept for readers elsewhere. It reads of the node and its tensors only what never changes
 * once the node is appended (its arguments, their ids and grids): a follower calls it. */
static int node_begin(weft_graph *g, const weft_node *n, size_t explicit_in, state *s) {
  size_t accesses = 0, war = 0, ids = g->dep_tensor.len;
  for (int a = 0; a < n->nargs; a++) {
    const weft_tensor *t = n->args[a].t;
    size_t end = (size_t)t->id + 1;
    if (t->grid != NULL) {
      size_t tiles = (size_t)(t->grid->rows * t->grid->cols);
      accesses += tiles;
      end = end > t->grid->first + tiles ? end : t->grid->first + tiles;
    }
    accesses++;
    ids = end > ids ? end : ids;
  }
  int rc;
  if (ids > g->dep_tensor.len) {
    if ((rc = weft__vec_reserve(&g->dep_tensor, ids - g->dep_tensor.len)) != WEFT_OK) return rc;
    weft__dep_tensor *dt = g->dep_tensor.data;
    for (size_t i = g->dep_tensor.len; i < ids; i++) dt[i] = (weft__dep_tensor){NONE, NONE};
    g->dep_tensor.len = ids;
  }
  for (int a = 0; a < n->nargs; a++) {
    const weft_tensor *t = n->args[a].t;
    if (!(n->args[a].mode & WEFT_WRITE)) continue;
    war += readers_since(g, t->id);
    if (t->grid != NULL) FOR_TILES(t, k) war += readers_since(g, k);
  }
  size_t bound = 2 * accesses + war + explicit_in;
  if ((rc = weft__vec_reserve(&g->edges, bound)) != WEFT_OK ||
      (rc = weft__vec_reserve(&g->dep_readers, accesses)) != WEFT_OK)
    return rc;
  /* Every node before this one has its stamp (an explicit edge may come from a later node:
   * the whole analysis stamps them all first). */
  if (g->dep_node.len <= n->id) {
    weft__dep_node fresh = {NONE, 0};
    if ((rc = WEFT__VEC_PUSH(&g->dep_node, fresh)) != WEFT_OK) return rc;
  }
  s->dt = g->dep_tensor.data;
  s->dn = g->dep_node.data;
  s->readers = g->dep_readers.data;
  s->nreaders = (uint32_t)g->dep_readers.len;
  s->edges = g->edges.data;
  s->nedges = g->edges.len;
  return WEFT_OK;
}

/* Node n's accesses: reads first, then writes, so a read-write access orders after the
 * previous writer and after the other readers. A partitioned tensor is accessed with each of
 * its tiles. Then the explicit edges into it, which the one stamp dedupes with the rest. */
static void node_accesses(weft_graph *g, const weft_node *n, const uint32_t *efrom, size_t nexplicit, state *s) {
  uint32_t id = n->id;
  for (int a = 0; a < n->nargs; a++) {
    if (!(n->args[a].mode & WEFT_READ)) continue;
    const weft_tensor *t = n->args[a].t;
    read_access(s, id, t->id);
    if (t->grid != NULL) FOR_TILES(t, k) read_access(s, id, k);
  }
  for (int a = 0; a < n->nargs; a++) {
    if (!(n->args[a].mode & WEFT_WRITE)) continue;
    const weft_tensor *t = n->args[a].t;
    write_access(s, id, t->id);
    if (t->grid != NULL) FOR_TILES(t, k) write_access(s, id, k);
  }
  for (size_t k = 0; k < nexplicit; k++) add_edge(s, efrom[k], id, NONE, WEFT_HAZARD_EXPLICIT);
  g->edges.len = s->nedges;
  g->dep_readers.len = s->nreaders;
}

/* ---- the follower: a large build's analysis on an idle worker ----------------------------- */

/* The builder hands the nodes to it (links each after the last one, and counts them in
 * `published` FOLLOW_BATCH at a time) and goes on; the analysis runs behind it on a worker,
 * which the build leaves idle anyway, and the launch finds it done or nearly so. Whoever holds the claim analyses: the
 * worker's task, or at the close the builder itself (the rest, when the task is late or never
 * got a worker). The task spins a while when it has caught up, then gives the worker back; the
 * builder posts it again when it finds it so. A node published after the task last looked is
 * never left behind: the builder counts it and then reads `queued`, the task clears `queued`
 * and then reads the count (both sequentially consistent), so one of them sees the other.
 * After it lets go of the claim the task reads only the follower itself, which it holds a
 * reference to: the graph may be gone by then. */

#define FOLLOW_MIN_NODES 1024 /* a build this long pays for a task and its wake-up */
#define FOLLOW_BATCH 32       /* nodes handed over at a time: the count's line moves once a batch */
#define FOLLOW_SPINS 4096     /* relaxes a caught-up task waits for the next batch */
#define FOLLOW_CHUNK 256      /* nodes the task analyses between two looks for a run to give way to */

enum { FOLLOW_FREE, FOLLOW_HELD, FOLLOW_CLOSED };

typedef struct weft__follow {
  weft__bgtask task;
  weft_graph *g;
  weft_node *first;   /* the first node handed to it */
  void (*relax)(void); /* the graph's spare.relax, for a task that must not read the graph */
  atomic_int claim;   /* FOLLOW_FREE, _HELD, _CLOSED */
  atomic_int closing; /* the builder waits for the claim to close it */
  atomic_int refs;    /* the graph's, and a posted task's */
  /* The builder's, read by the task once per batch: on a line of its own. */
  _Alignas(64) atomic_uint_fast64_t published; /* nodes handed to it */
  atomic_int queued;                           /* its task is queued or running */
  /* The claim holder's: the last node analysed (NULL: none yet), how many, and whether the
   * analysis ran out of memory (it then falls behind, and the next one starts over). */
  _Alignas(64) weft_node *last;
  uint64_t done;
  int failed;
  atomic_uint_fast64_t progress; /* `done` after each chunk, for weft__graph_follow_progress */
} weft__follow;

static void follow_unref(weft__follow *f) {
  if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) == 1) weft__aligned_free(f);
}

/* Analyses the nodes handed over so far (all `upto`, where the builder itself closes it), with
 * the claim held. The task (upto 0) spins (spin: relaxes) for more, and after each FOLLOW_CHUNK
 * nodes at most stops if the builder is closing it, or gives way (returns 1) if a run is in
 * flight: background work comes after every run's nodes, and a long build must not hold a
 * worker they need, not even while the task catches up on a backlog. */
static int follow_catch_up(weft__follow *f, unsigned spin, uint64_t upto) {
  weft_graph *g = f->g;
  weft_node *n = f->last;
  uint64_t done = f->done;
  /* Read once: the builder writes the graph's lines. */
  int (*busy)(void *) = g->spare.busy;
  void *ctx = g->spare.ctx;
  int gave_way = 0;
  for (unsigned idle = 0; !f->failed;) {
    uint64_t avail = upto ? upto : atomic_load_explicit(&f->published, memory_order_acquire);
    if (done == avail) {
      if (upto || ++idle > spin || atomic_load_explicit(&f->closing, memory_order_relaxed)) break;
      f->relax();
      continue;
    }
    idle = 0;
    if (!upto && avail - done > FOLLOW_CHUNK) avail = done + FOLLOW_CHUNK;
    for (; done < avail; done++) {
      n = n == NULL ? f->first : n->follow_next;
      state s;
      if (node_begin(g, n, 0, &s) != WEFT_OK) {
        f->failed = 1;
        break;
      }
      node_accesses(g, n, NULL, 0, &s);
      f->last = n;
    }
    atomic_store_explicit(&f->progress, done, memory_order_relaxed);
    if (upto) continue;
    if (atomic_load_explicit(&f->closing, memory_order_relaxed) || (busy != NULL && (gave_way = busy(ctx)) != 0))
      break;
  }
  f->done = done;
  return gave_way;
}

static void follow_post(weft_graph *g, weft__follow *f);

static void follow_task(weft__bgtask *t) {
  weft__follow *f = (weft__follow *)t;
  for (;;) {
    int c = FOLLOW_FREE;
    if (!atomic_compare_exchange_strong_explicit(&f->claim, &c, FOLLOW_HELD, memory_order_acquire,
                                                 memory_order_relaxed)) {
      if (c == FOLLOW_HELD) { /* the task that queued this one again, letting go */
        f->relax();
        continue;
      }
      break; /* closed: the builder did the rest */
    }
    if (follow_catch_up(f, FOLLOW_SPINS, 0) && !f->failed) {
      /* A run is in flight: this worker goes back to it, and the task queues again behind the
       * pool's other work (`queued` stays set: the builder posts no other). Posted with the
       * claim held, so the graph, and its runtime, are still there. */
      follow_post(f->g, f);
      atomic_store_explicit(&f->claim, FOLLOW_FREE, memory_order_release);
      break;
    }
    uint64_t done = f->done;
    int stop = f->failed || atomic_load_explicit(&f->closing, memory_order_relaxed);
    atomic_store_explicit(&f->claim, FOLLOW_FREE, memory_order_release);
    /* Failed (out of memory) or closing: `queued` stays set, so the builder posts no more, and
     * the close finds the analysis behind or takes over the rest. */
    if (stop) break;
    atomic_store(&f->queued, 0);
    if (atomic_load(&f->published) == done || atomic_exchange(&f->queued, 1)) break;
  }
  follow_unref(f);
}

static void follow_post(weft_graph *g, weft__follow *f) {
  atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
  g->spare.post(g->spare.ctx, &f->task);
}

/* Starts a follower at node n; 0 if it cannot (no memory: the analysis stays inline). */
static int follow_open(weft_graph *g, weft_node *n) {
  weft__follow *f = weft__aligned_alloc(64, sizeof *f);
  if (f == NULL) return 0;
  f->task = (weft__bgtask){follow_task, NULL};
  f->g = g;
  f->first = n;
  f->relax = g->spare.relax;
  f->last = NULL;
  f->done = 0;
  f->failed = 0;
  atomic_init(&f->progress, 0);
  atomic_init(&f->published, 1);
  atomic_init(&f->claim, FOLLOW_FREE);
  atomic_init(&f->queued, 1);
  atomic_init(&f->closing, 0);
  atomic_init(&f->refs, 1);
  g->follow = f;
  g->follow_tail = n;
  g->follow_count = 1;
  follow_post(g, f);
  return 1;
}

void weft__graph_follow_close(weft_graph *g, int keep) {
  weft__follow *f = g->follow;
  if (f == NULL) return;
  atomic_store_explicit(&f->closing, 1, memory_order_relaxed);
  for (unsigned spins = 0;; spins++) {
    int free_ = FOLLOW_FREE;
    if (atomic_compare_exchange_weak_explicit(&f->claim, &free_, FOLLOW_CLOSED, memory_order_acquire,
                                              memory_order_relaxed))
      break;
    if (spins < 64)
      g->spare.relax();
    else
      g->spare.yield();
  }
  g->followed += f->done;
  if (keep) follow_catch_up(f, 0, g->follow_count);
  if (!keep || f->failed) g->inc_version = 0; /* behind: the next analysis starts over */
  g->follow = NULL;
  g->follow_tail = NULL;
  g->follow_from = g->nodes.len;
  follow_unref(f);
}

uint64_t weft__graph_follow_progress(const weft_graph *g) {
  return g->follow != NULL ? atomic_load_explicit(&g->follow->progress, memory_order_relaxed) : 0;
}

void weft__graph_analyse_append(weft_graph *g, weft_node *n) {
  /* A graph with explicit edges is analysed whole at each analysis (an edge may point back):
   * following it would be work thrown away. */
  if (g->explicit_edges.len > 0) return;
  weft__follow *f = g->follow;
  if (f != NULL) {
    g->follow_tail->follow_next = n;
    g->follow_tail = n;
    if (++g->follow_count % FOLLOW_BATCH == 0) {
      atomic_store(&f->published, g->follow_count);
      if (!atomic_load(&f->queued) && !atomic_exchange(&f->queued, 1)) follow_post(g, f);
    }
  } else if (!(g->spare.post != NULL && n->id >= g->follow_from + FOLLOW_MIN_NODES && follow_open(g, n))) {
    state s;
    /* Out of memory: the analysis falls behind, and the next one starts over (and reports it). */
    if (node_begin(g, n, 0, &s) != WEFT_OK) return;
    node_accesses(g, n, NULL, 0, &s);
  }
  g->inc_version = g->version;
}

/* A tensor an op created is a temporary when its final value is read by a later node (the
 * readers since its last write are not empty) and the user did not keep it: its storage may be
 * released after that last read. A final value nobody reads is a result. Only the tensors ops
 * made are visited (g->autos): a graph of the user's tensors pays no pass over them. */
static void mark_temporaries(weft_graph *g) {
  weft_tensor **tensors = g->tensors.data;
  const uint32_t *autos = g->autos.data;
  const weft__dep_tensor *dt = g->dep_tensor.data;
  for (size_t i = 0; i < g->autos.len; i++) {
    weft_tensor *t = tensors[autos[i]];
    uint8_t f = t->flags & (uint8_t)~WEFT__T_TEMP;
    if (!(f & WEFT__T_KEEP) && t->id < g->dep_tensor.len && dt[t->id].head != NONE) f |= WEFT__T_TEMP;
    t->flags = f;
  }
}

/* The whole analysis, from the first node: after a change other than an append. */
static int analyse_all(weft_graph *g) {
  size_t nn = g->nodes.len;
  weft_node **nodes = g->nodes.data;
  g->edges.len = g->dep_readers.len = g->dep_node.len = g->dep_tensor.len = 0;
  if (weft__vec_reserve(&g->dep_node, nn) != WEFT_OK)
    return weft__oom("the dependency analysis");
  weft__dep_node *dn = g->dep_node.data;
  for (size_t i = 0; i < nn; i++) dn[i] = (weft__dep_node){NONE, 0};
  g->dep_node.len = nn;
  uint32_t *eoff = NULL, *efrom = NULL;
  size_t obytes = 0, ebytes = 0;
  int rc = WEFT_OK, backward = 0;
  /* Explicit edges, bucketed by their target, join the inferred edges into the same node so
   * that one stamp dedupes them all: a pair is listed once, with the hazard found first. */
  size_t ne = g->explicit_edges.len;
  if (ne > 0) {
    obytes = (nn + 1) * sizeof(uint32_t);
    ebytes = ne * sizeof(uint32_t);
    eoff = weft__mem_get(g->mem, obytes);
    efrom = weft__mem_get(g->mem, ebytes);
    if (eoff == NULL || efrom == NULL) {
      rc = weft__oom("the dependency analysis");
      goto done;
    }
    const weft__edge *x = g->explicit_edges.data;
    memset(eoff, 0, obytes);
    for (size_t i = 0; i < ne; i++) {
      WEFT_ASSERT(x[i].from < nn && x[i].to < nn);
      eoff[x[i].to + 1]++;
    }
    for (size_t i = 0; i < nn; i++) eoff[i + 1] += eoff[i];
    for (size_t i = 0; i < ne; i++) {
      efrom[eoff[x[i].to]++] = x[i].from; /* eoff[to] ends at the next bucket's start ... */
      backward |= x[i].from > x[i].to;
    }
    for (size_t i = nn; i > 0; i--) eoff[i] = eoff[i - 1]; /* ... so shift back by one */
    eoff[0] = 0;
  }
  for (uint32_t id = 0; id < nn; id++) {
    size_t nx = ne > 0 ? eoff[id + 1] - eoff[id] : 0;
    state s;
    if ((rc = node_begin(g, nodes[id], nx, &s)) != WEFT_OK) {
      rc = weft__oom("the dependency analysis");
      goto done;
    }
    node_accesses(g, nodes[id], ne > 0 ? efrom + eoff[id] : NULL, nx, &s);
  }
  g->order.len = 0;
  if (backward && (rc = order_or_cycle(g)) != WEFT_OK) goto done;
done:
  weft__mem_put(g->mem, eoff, obytes);
  weft__mem_put(g->mem, efrom, ebytes);
  return rc;
}

int weft__graph_analyse(weft_graph *g) {
  weft__graph_follow_close(g, 1);
  g->follow_from = g->nodes.len; /* the next follower: FOLLOW_MIN_NODES appends from here */
  if (g->analysed_version == g->version) return WEFT_OK;
  int rc = WEFT_OK;
  /* Only appends since the last analysis, and no explicit edge: their edges are in already.
   * (Explicit edges may point backward, and then the order is the analysis's: all again.) */
  if (g->inc_version != g->version || g->explicit_edges.len > 0)
    rc = analyse_all(g);
  else
    g->order.len = 0;
  if (rc != WEFT_OK) {
    g->edges.len = 0;
    g->inc_version = 0;
    return rc;
  }
  mark_temporaries(g);
  g->analysed_version = g->inc_version = g->version;
  return WEFT_OK;
}

int weft_graph_analyse(weft_graph *g) {
  if (g == NULL) return weft__err(WEFT_EINVAL, "weft_graph_analyse: graph is NULL");
  return weft__graph_analyse(g);
}

size_t weft_graph_edge_count(const weft_graph *g) {
  return g->analysed_version == g->version ? g->edges.len : 0;
}

int weft_graph_edge(const weft_graph *g, size_t i, weft_edge *out) {
  if (g->analysed_version != g->version)
    return weft__err(WEFT_ESTATE, "weft_graph_edge: the graph changed since it was analysed");
  if (i >= g->edges.len || out == NULL)
    return weft__err(WEFT_EINVAL, "weft_graph_edge: index %zu out of range (%zu edges)", i, g->edges.len);
  weft__edge e = WEFT__VEC_AT(&g->edges, weft__edge, i);
  out->from = WEFT__VEC_AT(&g->nodes, weft_node *, e.from);
  out->to = WEFT__VEC_AT(&g->nodes, weft_node *, e.to);
  out->hazard = e.hazard;
  out->tensor = e.tensor == NONE ? NULL : WEFT__VEC_AT(&g->tensors, weft_tensor *, e.tensor);
  return WEFT_OK;
}

/* Whether tensor t's storage is its own on `device`: not a view (a distributed tile's own
 * storage excepted), on that device (auto on the host). */
static int stored_on(const weft_tensor *t, weft_device device) {
  if (t->view != NULL && !weft__tile_owns_storage(t)) return 0;
  if (weft__tensor_tiles_own(t)) return 0;
  weft_device d = weft__tensor_dev(t);
  if (device.kind == WEFT_DEVICE_CUDA) return d.kind == WEFT_DEVICE_CUDA && d.index == device.index;
  return d.kind != WEFT_DEVICE_CUDA;
}

int weft_graph_memory_estimate(weft_graph *g, weft_device device, size_t *bytes) {
  if (g == NULL || bytes == NULL) return weft__err(WEFT_EINVAL, "weft_graph_memory_estimate: NULL argument");
  *bytes = 0;
  int rc = weft__graph_analyse(g);
  if (rc != WEFT_OK) return rc;
  size_t nt = g->tensors.len, nn = g->nodes.len;
  weft_tensor **ts = g->tensors.data;
  weft_node **nodes = g->nodes.data;
  /* Temporaries are born at their first access and die after their last, in node order. */
  uint32_t *first = weft__malloc((nt ? nt : 1) * sizeof *first), *last = weft__malloc((nt ? nt : 1) * sizeof *last);
  size_t *delta = weft__calloc(nn + 1, sizeof *delta), *freed = weft__calloc(nn + 1, sizeof *freed);
  if (first == NULL || last == NULL || delta == NULL || freed == NULL) {
    rc = weft__oom("the memory estimate");
    goto done;
  }
  memset(first, 0xff, nt * sizeof *first);
  memset(last, 0xff, nt * sizeof *last);
  for (uint32_t i = 0; i < nn; i++)
    for (int a = 0; a < nodes[i]->nargs; a++) {
      uint32_t t = nodes[i]->args[a].t->id;
      if (first[t] == NONE) first[t] = i;
      last[t] = i;
    }
  size_t resident = 0, live = 0, peak = 0;
  for (size_t t = 0; t < nt; t++) {
    if (!stored_on(ts[t], device)) continue;
    if ((ts[t]->flags & WEFT__T_TEMP) && first[t] != NONE) {
      delta[first[t]] += ts[t]->bytes;
      freed[last[t]] += ts[t]->bytes;
    } else {
      resident += ts[t]->bytes;
    }
  }
  for (size_t i = 0; i < nn; i++) {
    live += delta[i];
    if (live > peak) peak = live;
    live -= freed[i];
  }
  *bytes = resident + peak;
done:
  weft__free(first);
  weft__free(last);
  weft__free(delta);
  weft__free(freed);
  return rc;
}

int weft_graph_depth(weft_graph *g, size_t *out) {
  if (g == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_graph_depth: NULL argument");
  int rc = weft__graph_analyse(g);
  if (rc != WEFT_OK) return rc;
  size_t n = g->nodes.len, m = g->edges.len, depth = 0;
  *out = 0;
  if (n == 0) return WEFT_OK;
  /* level[v]: the nodes on the longest chain ending at v; in a topological order, each
   * node's level is final before its successors read it. */
  uint32_t *order = weft__malloc(n * sizeof *order), *level = weft__calloc(n, sizeof *level);
  uint32_t *poff = weft__calloc(n + 1, sizeof *poff), *pred = weft__malloc((m ? m : 1) * sizeof *pred);
  if (!order || !level || !poff || !pred) {
    rc = weft__oom("the graph's depth");
    goto done;
  }
  const weft__edge *e = g->edges.data;
  for (size_t k = 0; k < m; k++) poff[e[k].to + 1]++;
  for (size_t i = 0; i < n; i++) poff[i + 1] += poff[i];
  for (size_t k = 0; k < m; k++) pred[poff[e[k].to]++] = e[k].from; /* poff[i]: i's end */
  for (size_t i = n; i > 0; i--) poff[i] = poff[i - 1];
  poff[0] = 0;
  weft__graph_order(g, order);
  for (size_t k = 0; k < n; k++) {
    uint32_t v = order[k], best = 0;
    for (uint32_t q = poff[v]; q < poff[v + 1]; q++)
      if (level[pred[q]] > best) best = level[pred[q]];
    level[v] = best + 1;
    if (level[v] > depth) depth = level[v];
  }
  *out = depth;
done:
  weft__free(order);
  weft__free(level);
  weft__free(poff);
  weft__free(pred);
  return rc;
}
