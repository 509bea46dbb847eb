/* blockpool.c — the runtime's recycler of large blocks (graph arenas, vectors, plans).
 *
 * Building a graph of 100 000 nodes touches tens of megabytes; freeing them at destroy hands
 * the pages back to the kernel, and the next graph faults them in again, zeroed, at a cost
 * comparable to the whole scheduling work. Like Taskflow's object pools, the runtime keeps
 * the blocks instead: sizes from 64 KiB up are rounded to a power of two and kept on a free
 * list per size class, up to CACHE_CAP bytes in all; smaller requests go to the allocation
 * hook. One mutex guards the lists (a leaf lock); blocks are taken a few times per graph, not
 * per node.
 *
 * A fresh page costs 1.8-3 us to fault in, zeroed, on the development VM and on the GPU hosts
 * alike: a Task Bench graph of 16 000 tasks built in 8.5-9 ms on fresh memory, 2.3-3.4 ms on
 * recycled, and a 2000-task first run took 1.5-1.7 ms against 0.4-0.5 for a second graph. So
 * the runtime's first graph finds warm blocks too:
 *
 * - Primed at creation (weft__blockpool_prime): 1 + W/4 blocks of each class from 64 KiB to
 *   2 MiB and W/16 of 4 MiB for W workers, W counted up to 32 (4 MiB with 2 workers, 24 with
 *   16, 44 from 32 on), touched by every worker and the creating thread at once before
 *   weft_runtime_create returns (a setup step it reports, with the bytes). A graph's arenas,
 *   vectors and plan double through those classes, several of each: a Task Bench graph of width
 *   W and 1000 steps took 1-5 blocks of each class up to 1 MiB and 4 of 2 MiB with W = 16
 *   (14 MiB in all); 4-9 of each class up to 1 MiB, 7 of 2 MiB and 2 of 4 MiB (its plan's node
 *   records, its edges) with W = 32 (31 MiB). A first graph that fits in what is primed builds
 *   about as fast as a second graph does: on 32 cores that graph's first run took 12.5 ms, 18.4
 *   before (medians of 10), and with 5 inputs a task 17.5 ms with the 4 MiB blocks primed, 19.4
 *   without, 21.4 before.
 * - Warmed ahead of demand: a graph larger than any before asks for 2 MiB (arena chunks) and
 *   4 MiB blocks again and again; when a request of those classes leaves fewer than `ahead_max`
 *   blocks of it on the list or warming (2; 4 with 8 workers or more: a builder fills fresh
 *   memory about as fast as one thread can fault it in), idle workers (weft__pool_background)
 *   take as many blocks of that class from the allocator as make up the difference, touch their
 *   pages and put them on the list, at most a worker fewer than the pool has at once (the
 *   builder keeps a core: 2 warm-ups at once on 2 cores took a first Task Bench run of 2000
 *   tasks from 1.7 to 3.2 ms; 1 left it at 1.6-1.7). The smaller classes, asked for once each
 *   as a graph's vectors double, are not warmed ahead: a block warmed for a class that is not
 *   asked for again took a worker from the graph for nothing.
 *
 * - A vector's next growth warmed ahead (weft__mem_ahead, from weft__vec_grow): a graph's
 *   vectors grow fourfold, so one that has just grown to 1 or 4 MiB (edges, readers) will next
 *   ask for 4 or 16 MiB, which no prime covers past 2 MiB blocks on 2 cores, 4 on 16 and more.
 *   One block of that class is warmed meanwhile unless one is listed or warming (or the cache
 *   is full), in equal pieces that idle workers touch at once (the workers are idle while the
 *   user's thread builds): as many as warm_max leaves room for, a power of two, so that every
 *   piece, and the task at its start, is 2 MiB-aligned within the block and at least 2 MiB:
 *   Task Bench's all_to_all of width 32, 500 steps, grows its edges to 16 MiB and its readers to
 *   8 MiB, 12 MB of fresh pages that its builder faulted in itself before. Classes up to 16 MiB:
 *   a vector's last growth leaves its hint unused, and such a block stays listed for the next
 *   graph.
 *
 * A server whose graphs recycle blocks warms none after the prime. Warm-ups still queued when
 * the runtime ends touch nothing. */
#include "sched/sched.h"

/* Classes primed: MIN_CLASS to PRIME_MAX_CLASS (4 MiB); warmed ahead of demand: AHEAD_MIN_CLASS
 * (2 MiB, an arena's chunk once it stops doubling) to WARM_MAX_CLASS. */
enum { MIN_CLASS = 16, MAX_CLASS = 40, AHEAD_MIN_CLASS = 21, WARM_MAX_CLASS = 22, PRIME_MAX_CLASS = 22 };
/* A vector's next growth warmed ahead (pool_ahead): classes from 4 MiB (above an arena's chunk)
 * to VEC_AHEAD_MAX_CLASS (16 MiB), in pieces of PIECE_BYTES or more. */
enum { VEC_AHEAD_MAX_CLASS = 24 };
#define PIECE_BYTES ((size_t)2 << 20)
#define CACHE_CAP ((size_t)256 << 20)

struct weft__blockpool {
  weft__mutex lock;
  void *free[MAX_CLASS + 1];
  size_t cached;
  weft__mem mem;
  weft__pool *workers;            /* NULL: no warming */
  int ahead_max;                  /* blocks warmed ahead (or warming) per class, at most */
  int warm_max;                   /* warm-ups in flight at once, at most: a worker fewer than the
                                     pool has, so the builder keeps a core */
  int warming_all;                /* warm-ups in flight (pieces) */
  int warming[MAX_CLASS + 1];      /* ... per class (blocks) */
  int listed[MAX_CLASS + 1];       /* blocks on each list */
};

/* A warm-up: a block's pages touched in pieces, each a background task that lives at the start
 * of its piece; the first piece's `left` counts the pieces not done, and the last to finish
 * lists the block. */
typedef struct warm_task {
  weft__bgtask task;
  weft__blockpool *pool;
  struct warm_task *first; /* the block's first piece (its start) */
  size_t len;              /* the piece's bytes, from the task */
  int c;
  atomic_int left; /* the first piece: pieces not done */
} warm_task;

/* Lists block b of class c where the cache has room (lock held); returns b, or NULL if listed. */
static void *list_locked(weft__blockpool *p, void *b, int c) {
  if (p->cached + ((size_t)1 << c) > CACHE_CAP) return b;
  *(void **)b = p->free[c];
  p->free[c] = b;
  p->cached += (size_t)1 << c;
  p->listed[c]++;
  return NULL;
}

static void warm(weft__bgtask *t) {
  warm_task *w = (warm_task *)t;
  weft__blockpool *p = w->pool;
  warm_task *first = w->first;
  int c = w->c;
  size_t len = w->len;
  weft__mutex_lock(&p->lock);
  int live = p->workers != NULL;
  weft__mutex_unlock(&p->lock);
  volatile char *b = (volatile char *)w;
  if (live) { /* every page the piece spans: it need not start on one */
    for (size_t off = 4096; off < len; off += 4096) b[off] = 0;
    b[len - 1] = 0;
  }
  int last = atomic_fetch_sub_explicit(&first->left, 1, memory_order_acq_rel) == 1;
  void *left = NULL;
  weft__mutex_lock(&p->lock);
  p->warming_all--;
  if (last) {
    p->warming[c]--;
    left = list_locked(p, (void *)first, c);
  }
  weft__mutex_unlock(&p->lock);
  weft__free(left);
}

/* Starts the warm-up of a block of class c in `pieces` pieces, a power of two no larger than the
 * block's 2 MiB parts (its count and theirs taken): each piece starts 2 MiB-aligned in the
 * block, where its task lives. */
static void start_warming(weft__blockpool *p, weft__pool *workers, int c, int pieces) {
  size_t size = (size_t)1 << c;
  char *b = weft__malloc(size);
  if (b == NULL) {
    weft__mutex_lock(&p->lock);
    p->warming[c]--;
    p->warming_all -= pieces;
    weft__mutex_unlock(&p->lock);
    return;
  }
  size_t piece = size / (size_t)pieces; /* exact: both are powers of two */
  warm_task *first = (warm_task *)b;
  atomic_init(&first->left, pieces);
  for (int k = 0; k < pieces; k++) {
    warm_task *w = (warm_task *)(b + (size_t)k * piece);
    w->task.fn = warm;
    w->pool = p;
    w->first = first;
    w->len = piece;
    w->c = c;
    weft__pool_background(workers, &w->task);
  }
}

void weft__blockpool_warm_with(weft__blockpool *p, weft__pool *workers) {
  weft__mutex_lock(&p->lock);
  p->workers = workers;
  p->ahead_max = workers != NULL && weft__pool_size(workers) >= 8 ? 4 : 2;
  p->warm_max = workers != NULL ? weft__pool_size(workers) - 1 : 0;
  weft__mutex_unlock(&p->lock);
}

size_t weft__blockpool_prime(weft__blockpool *p) {
  weft__mutex_lock(&p->lock);
  weft__pool *workers = p->workers;
  int w = workers == NULL ? 0 : weft__pool_size(workers) < 32 ? weft__pool_size(workers) : 32;
  int n[PRIME_MAX_CLASS + 1] = {0};
  size_t bytes = 0;
  if (workers != NULL)
    for (int c = MIN_CLASS; c <= PRIME_MAX_CLASS; c++) {
      n[c] = c < PRIME_MAX_CLASS ? 1 + w / 4 : w / 16;
      p->warming[c] += n[c];
      p->warming_all += n[c];
      bytes += (size_t)n[c] << c;
    }
  weft__mutex_unlock(&p->lock);
  if (workers == NULL) return 0;
  /* Largest first, so that the last to start are the quick ones. */
  for (int c = PRIME_MAX_CLASS; c >= MIN_CLASS; c--)
    for (int k = 0; k < n[c]; k++) start_warming(p, workers, c, 1);
  weft__pool_run_background(workers);
  for (;;) {
    weft__mutex_lock(&p->lock);
    int left = p->warming_all;
    weft__mutex_unlock(&p->lock);
    if (left == 0) break;
    weft__thread_yield();
  }
  return bytes;
}

static int class_of(size_t size) {
  int c = MIN_CLASS;
  while (c < MAX_CLASS && ((size_t)1 << c) < size) c++;
  return c;
}

static void *pool_get(void *ctx, size_t size) {
  weft__blockpool *p = ctx;
  if (size < ((size_t)1 << MIN_CLASS) || size > ((size_t)1 << MAX_CLASS)) return weft__malloc(size);
  int c = class_of(size);
  weft__mutex_lock(&p->lock);
  void *b = p->free[c];
  if (b != NULL) {
    p->free[c] = *(void **)b;
    p->cached -= (size_t)1 << c;
    p->listed[c]--;
  }
  weft__pool *workers = p->workers;
  int ahead = c >= AHEAD_MIN_CLASS && c <= WARM_MAX_CLASS && workers != NULL;
  int more = ahead ? p->ahead_max - p->listed[c] - p->warming[c] : 0;
  if (more > p->warm_max - p->warming_all) more = p->warm_max - p->warming_all;
  if (more > 0) {
    p->warming[c] += more;
    p->warming_all += more;
  }
  weft__mutex_unlock(&p->lock);
  for (int k = 0; k < more; k++) start_warming(p, workers, c, 1);
  return b != NULL ? b : weft__malloc((size_t)1 << c);
}

/* A vector's next growth (weft__vec_grow): one block of its class, warmed in pieces of
 * PIECE_BYTES or more by as many idle workers at once as warm_max leaves room for (a power of
 * two), unless one is listed or warming already or the cache has no room for it. */
static void pool_ahead(void *ctx, size_t size) {
  weft__blockpool *p = ctx;
  if (size <= ((size_t)1 << AHEAD_MIN_CLASS) || size > ((size_t)1 << VEC_AHEAD_MAX_CLASS)) return;
  int c = class_of(size);
  weft__mutex_lock(&p->lock);
  weft__pool *workers = p->workers;
  int room = p->warm_max - p->warming_all;
  int pieces = (int)(((size_t)1 << c) / PIECE_BYTES);
  while (pieces > room) pieces /= 2;
  if (workers == NULL || pieces < 1 || p->listed[c] + p->warming[c] > 0 ||
      p->cached + ((size_t)1 << c) > CACHE_CAP) {
    weft__mutex_unlock(&p->lock);
    return;
  }
  p->warming[c]++;
  p->warming_all += pieces;
  weft__mutex_unlock(&p->lock);
  start_warming(p, workers, c, pieces);
}

static void pool_put(void *ctx, void *b, size_t size) {
  weft__blockpool *p = ctx;
  if (size < ((size_t)1 << MIN_CLASS) || size > ((size_t)1 << MAX_CLASS)) {
    weft__free(b);
    return;
  }
  int c = class_of(size);
  weft__mutex_lock(&p->lock);
  b = list_locked(p, b, c);
  weft__mutex_unlock(&p->lock);
  weft__free(b);
}

int weft__blockpool_create(weft__blockpool **out) {
  weft__blockpool *p = weft__calloc(1, sizeof *p);
  if (p == NULL) return weft__oom("the block pool");
  int rc = weft__mutex_init(&p->lock);
  if (rc != WEFT_OK) {
    weft__free(p);
    return rc;
  }
  p->mem = (weft__mem){pool_get, pool_put, p, pool_ahead};
  *out = p;
  return WEFT_OK;
}

const weft__mem *weft__blockpool_mem(weft__blockpool *p) { return &p->mem; }

int weft__blockpool_listed(weft__blockpool *p, size_t size, int *warming) {
  int c = class_of(size);
  weft__mutex_lock(&p->lock);
  int n = p->listed[c];
  if (warming != NULL) *warming = p->warming[c];
  weft__mutex_unlock(&p->lock);
  return n;
}

size_t weft__blockpool_cached(weft__blockpool *p) {
  weft__mutex_lock(&p->lock);
  size_t n = p->cached;
  weft__mutex_unlock(&p->lock);
  return n;
}

void weft__blockpool_destroy(weft__blockpool *p) {
  if (p == NULL) return;
  for (int c = 0; c <= MAX_CLASS; c++) {
    void *b = p->free[c];
    while (b != NULL) {
      void *next = *(void **)b;
      weft__free(b);
      b = next;
    }
  }
  weft__mutex_destroy(&p->lock);
  weft__free(p);
}
