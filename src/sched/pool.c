/* pool.c — the CPU worker pool: one work-stealing deque per worker, an injection list for
 * work arriving from other threads, the list of runs whose roots are not yet claimed, and a
 * notifier so idle workers sleep without losing a wake-up.
 *
 * Finding work, in order: the worker's own deque (newest first, for locality), a node handed
 * to it, the injection list, a chunk of some run's roots (claimed by one atomic add, so a graph
 * with 200 000 independent nodes is not queued node by node), then stealing from the other
 * workers.
 *
 * Hand-off (weft__pool_queue). A node that readies many successors at once queues the first
 * two on its own deque and hands the rest, one each, to workers that are searching (until it
 * finds none free: the rest is queued too): each worker has a slot that others fill with a
 * compare-and-swap and that it checks at every look (and between its pauses). Queued on one
 * deque, a burst reaches the idle workers one steal at a time through the deque's top, which
 * they all compete for: an empty step of all_to_all at width 32 (each of its nodes reads every
 * node of the step before, so the last to end readies the whole next step) took 37 us on 32
 * cores, its nodes waiting 15 us from ready to start, Taskflow's 21; with hand-offs 15. The
 * first two stay queued: the worker that readied them takes them back after its current chain
 * unless a thief steals them first, and handed one at a time they cost more than they save
 * (every queued node handed: a step of stencil_1d 25% slower on 32 cores, of nearest 70%). A
 * hand-off and the end of a search meet as Dekker's pair:
 *   hander:   slot := x (CAS, seq_cst)  ->  load `searching` (seq_cst)  ->  0: take x back
 *             (CAS x -> NULL) unless the worker took it; it is queued instead
 *   searcher: searching := 0 (seq_cst)  ->  load the slot (seq_cst)  ->  a node: its own
 * so either the searcher sees the node as it stops searching or the hander sees it stopped.
 * A searcher that found other work as well queues the handed node on its own deque. A node
 * still in a slot may also be taken by another worker (steal, `slots`): whoever exchanges it out
 * of the slot owns it, and the hander's take-back then fails, as when the searcher took it.
 * Hand-offs are on only in a pool of no more workers than the process's cores: with more, the
 * kernel shares the cores among the workers, a searcher is often off its core, and a node
 * handed to it waits for its next time slice unless another worker's look takes it (all_to_all
 * of 8 workers on 2 cores: a step 5 x slower than with the deque alone, and 4.5 x when the
 * searchers' yielding looks took such nodes).
 *
 * Sleeping (Taskflow's notifier, an eventcount):
 *   waiter:   waiters++ (seq_cst)  ->  look for work again  ->  found: waiters--, run it
 *                                                          ->  none: sleep until epoch moves
 *   notifier: publish work  ->  seq_cst fence  ->  if waiters > 0: epoch++ and signal (locked)
 * The waiter's increment and the notifier's load of `waiters` are ordered by seq_cst, so
 * either the waiter's second look sees the work or the notifier sees the waiter; the epoch is
 * compared under the sleep lock, so a signal between the look and the sleep is not lost.
 * Before sleeping a worker spins briefly, which keeps it awake through the short gaps of
 * fine-grained graphs and saves the futex round trip. While it spins it counts as searching,
 * and nodes queued while workers search wake that many fewer workers: a searcher will take each.
 * A worker that takes a node from where any worker may (another's deque, the injection list,
 * roots) wakes a sleeping worker unless one is searching already, since pushes it covered may
 * have left more: the protocol of Go's spinning threads (a thread that stops spinning with work
 * in hand wakes another to spin). A searcher that gives up decrements the count before its last
 * look (the sleep path's fence), and a thief that loses a race for a node tries that deque
 * again, so a node whose pusher saw it searching is seen. Without the count every push made
 * while any worker slept took the sleep lock and signalled: a first run of a 32-wide stencil of
 * 5 us tasks on 32 cores woke workers 2600-5500 times for 16 000 nodes. (Without the rule for
 * a worker just woken that steals at once, nodes stayed queued with workers asleep: test_pool's
 * 16-worker stencil of barriers hangs.) And one worker at a time, the lookout, then watches for
 * LOOKOUT_NS more, yielding its core between looks: a program that launches run after run finds
 * a worker awake for the next one. Otherwise every run long enough for the workers to fall
 * asleep would start with a wake-up, which delays its first node and adds to a short run's
 * fixed cost (docs/benchmarks.md, "Diagnostics"). A launch does not wake the pool before its
 * setup: workers watching while a large graph was planned took the cores from the setup's own
 * tiles on the 32-core GPU host, whose plan of 0.3-0.5 ms then took 2.5-7 ms in 7 first runs of
 * 25 (none of 25 without; the medians the same).
 *
 * Parallel jobs (intra-op parallelism). A worker running a node whose kernel splits its work
 * into tiles (a large product) publishes a job: a tile counter that anyone may advance. It runs
 * tiles itself, and workers that find nothing else to run (their deque, the injection list,
 * roots and steals come first: inter-op work before intra-op) join and run tiles too, so one op
 * uses the cores that the graph leaves idle and never more threads than the pool has. When no
 * tile is left to take the owner withdraws the job and waits only for the tiles in progress;
 * a helper counts itself in before it reads the job and out when it is done with it, so the
 * owner's job (on its stack) outlives every helper's use of it.
 *
 * Background tasks (weft__pool_background) come last of all: a worker with nothing else to run
 * takes one, after the parallel jobs; the block pool warms memory ahead of a graph's build with
 * them (blockpool.c). Those left when the pool ends run on the thread that ends it.
 *
 * Lock order: inject_lock, sleep_lock and jobs_lock are leaves and never held together. */
#include "sched/sched.h"

#include <stdlib.h>
#include <string.h>

typedef struct weft__pjob {
  void (*fn)(void *arg, uint32_t tile);
  void *arg;
  uint32_t ntiles;
  uint32_t max_helpers;
  atomic_uint next;    /* the next tile to take */
  atomic_uint done;    /* tiles finished */
  atomic_uint helpers; /* helpers counted in (never more than max_helpers) */
  struct weft__pjob *next_job;
} weft__pjob;

typedef struct weft__worker {
  weft__wsq q;
  struct weft__pool *pool;
  weft__thread thread;
  int index;
  uint32_t rng;
  int started;
  int hand_next; /* the worker this one's next hand-off looks at first */
  /* A node handed to this worker, and whether it searches: written by other workers (hand-off),
   * on a line of their own. */
  _Alignas(64) _Atomic(weft__xnode *) handed;
  atomic_int searching;
  /* Counted by the worker alone (relaxed; read by weft__pool_counts). */
  _Alignas(64) atomic_uint_fast64_t steals, sleeps, handoffs;
} weft__worker;

struct weft__pool {
  weft_runtime *rt;
  int n;  /* workers running */
  atomic_int hand; /* hand-offs on (see the top of the file) */
  int nq; /* workers allocated (each owns a deque) */
  weft__worker *w;
  weft__mutex inject_lock;
  weft__xnode *inject_head, *inject_tail;
  atomic_int inject_count;
  atomic_uint_fast64_t injected, wakeups;
  weft__mutex jobs_lock;
  weft__pjob *jobs;   /* published parallel jobs, newest first */
  /* Published jobs with a tile not yet taken: the taker of a job's last tile counts it out,
   * so that idle workers do not take jobs_lock to look at a job with nothing left to hand out
   * (with every worker awake at a launch, 31 would, while the job's owner waits for the lock to
   * withdraw it). */
  atomic_int njobs;
  weft__bgtask *bg;   /* background tasks, newest first (jobs_lock) */
  atomic_int nbg;
  weft_run *roots_head;
  atomic_int roots_count;
  _Alignas(64) atomic_uint_fast64_t epoch;
  atomic_int waiters;
  atomic_int searching; /* workers looking for work, awake (worker_main) */
  atomic_int lookout; /* 1 while a worker keeps watch (worker_main) */
  weft__mutex sleep_lock;
  weft__cond sleep_cond;
  atomic_int stop;
};

static _Thread_local weft__worker *self;

/* The pool and its workers hold 64-byte-aligned fields (kept apart from each other's cache
 * lines); the allocator hook only promises malloc's alignment, so they come from
 * weft__aligned_alloc. */
static void *zalloc64(size_t size) {
  void *p = weft__aligned_alloc(64, size);
  if (p != NULL) memset(p, 0, size);
  return p;
}

enum { YIELD_ROUNDS = 8, ROOT_CHUNK_MAX = 64, HAND_FROM = 2 };
#define SEARCH_NS 200000ull
#define LOOKOUT_NS 1000000ull

int weft__pool_size(const weft__pool *p) { return p->n; }

/* Wakes sleeping workers for k units of work just published: k less the workers searching,
 * each of which will take one (see worker_main). A worker a signal does not reach sleeps on: it
 * wakes when work it can take is published again (a woken worker that queues more work
 * notifies in turn). */
static void notify(weft__pool *p, int k) {
  WEFT__FENCE();
  k -= atomic_load_explicit(&p->searching, memory_order_relaxed);
  if (k <= 0 || atomic_load_explicit(&p->waiters, memory_order_relaxed) == 0) return;
  weft__mutex_lock(&p->sleep_lock);
  atomic_fetch_add_explicit(&p->epoch, 1, memory_order_relaxed);
  weft__mutex_unlock(&p->sleep_lock);
  atomic_fetch_add_explicit(&p->wakeups, (uint_fast64_t)k, memory_order_relaxed);
  if (k >= p->n)
    weft__cond_broadcast(&p->sleep_cond);
  else
    for (int i = 0; i < k; i++) weft__cond_signal(&p->sleep_cond);
}

void weft__pool_inject(weft__pool *p, weft__xnode *x) {
  x->next_ready = NULL;
  weft__mutex_lock(&p->inject_lock);
  if (p->inject_tail != NULL)
    p->inject_tail->next_ready = x;
  else
    p->inject_head = x;
  p->inject_tail = x;
  atomic_fetch_add_explicit(&p->inject_count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&p->injected, 1, memory_order_relaxed);
  weft__mutex_unlock(&p->inject_lock);
  notify(p, 1);
}

/* Hands x to a worker that searches (see the top of the file); returns 1 if one took it, 0 if
 * the one it chose stopped searching first, -1 if none searches with an empty slot. The
 * take-back's CAS cannot mistake another node for x: x is not readied again before the run
 * ends, and the run cannot end while its hander still holds its own node's count. */
static int hand_off(weft__pool *p, weft__worker *w, weft__xnode *x) {
  if (atomic_load_explicit(&p->searching, memory_order_relaxed) == 0) return -1;
  int n = p->n;
  for (int k = 0, c = w->hand_next; k < n; k++, c = c + 1 < n ? c + 1 : 0) {
    weft__worker *v = &p->w[c];
    if (v == w || !atomic_load_explicit(&v->searching, memory_order_relaxed) ||
        atomic_load_explicit(&v->handed, memory_order_relaxed) != NULL)
      continue;
    weft__xnode *slot = NULL;
    if (!atomic_compare_exchange_strong_explicit(&v->handed, &slot, x, memory_order_seq_cst, memory_order_relaxed))
      continue;
    w->hand_next = c + 1 < n ? c + 1 : 0;
    slot = x;
    if (!atomic_load_explicit(&v->searching, memory_order_seq_cst) &&
        atomic_compare_exchange_strong_explicit(&v->handed, &slot, NULL, memory_order_seq_cst, memory_order_relaxed))
      return 0; /* it stopped searching without it: taken back */
    atomic_fetch_add_explicit(&w->handoffs, 1, memory_order_relaxed);
    return 1;
  }
  return -1;
}

int weft__pool_queue(weft__pool *p, weft__xnode *x, int *burst) {
  weft__worker *w = self;
  if (w == NULL || w->pool != p) {
    weft__pool_inject(p, x);
    return 0;
  }
  if (*burst >= 0 && (*burst)++ >= HAND_FROM && atomic_load_explicit(&p->hand, memory_order_relaxed)) {
    int h = hand_off(p, w, x);
    if (h > 0) return 1;
    if (h < 0) *burst = -1; /* no searcher free: the rest of the burst is queued without a look */
  }
  if (weft__wsq_push(&w->q, x) == WEFT_OK) return 1;
  weft__pool_inject(p, x);
  return 0;
}

void weft__pool_wake(weft__pool *p, int k) { notify(p, k); }

void weft__pool_submit_roots(weft__pool *p, weft_run *run) {
  weft__mutex_lock(&p->inject_lock);
  run->next_rootrun = p->roots_head;
  p->roots_head = run;
  atomic_fetch_add_explicit(&p->roots_count, 1, memory_order_relaxed);
  weft__mutex_unlock(&p->inject_lock);
  /* As many workers as there are roots: the rest would wake, find nothing and spin, taking the
   * cores of the threads that wait for the run (a one-node GPU run woke 7 of 16 on average). */
  uint32_t nroots = run->plan->nroots;
  notify(p, nroots < (uint32_t)p->n ? (int)nroots : p->n);
}

static weft__xnode *pop_inject(weft__pool *p) {
  if (atomic_load_explicit(&p->inject_count, memory_order_relaxed) == 0) return NULL;
  weft__mutex_lock(&p->inject_lock);
  weft__xnode *x = p->inject_head;
  if (x != NULL) {
    p->inject_head = x->next_ready;
    if (p->inject_head == NULL) p->inject_tail = NULL;
    atomic_fetch_sub_explicit(&p->inject_count, 1, memory_order_relaxed);
  }
  weft__mutex_unlock(&p->inject_lock);
  return x;
}

/* Claims a chunk of roots from the first run that has some; keeps one to run now and queues
 * the rest on the worker's own deque, where idle workers can steal them. */
static weft__xnode *claim_roots(weft__pool *p, weft__worker *w) {
  if (atomic_load_explicit(&p->roots_count, memory_order_relaxed) == 0) return NULL;
  weft__xnode *chunk[ROOT_CHUNK_MAX];
  uint32_t got = 0;
  weft__mutex_lock(&p->inject_lock);
  while (p->roots_head != NULL && got == 0) {
    weft_run *r = p->roots_head;
    uint32_t nroots = r->plan->nroots;
    uint32_t want = nroots / (uint32_t)(p->n * 8);
    want = want < 1 ? 1 : want > ROOT_CHUNK_MAX ? ROOT_CHUNK_MAX : want;
    got = weft__run_claim_roots(r, chunk, want);
    if (!weft__run_has_roots(r)) {
      p->roots_head = r->next_rootrun;
      atomic_fetch_sub_explicit(&p->roots_count, 1, memory_order_relaxed);
    }
  }
  weft__mutex_unlock(&p->inject_lock);
  if (got == 0) return NULL;
  for (uint32_t i = got - 1; i >= 1; i--)
    if (weft__wsq_push(&w->q, chunk[i]) != WEFT_OK) weft__pool_inject(p, chunk[i]);
  return chunk[0];
}

/* Steals the oldest node of another worker's deque; with `slots`, in its second round, a node
 * handed to another worker that has not taken it: with more workers than free cores, a hand-off
 * to a searcher the kernel has taken off its core waited for its next time slice (all_to_all,
 * 8 workers on 2 cores: a step 5 x slower than before hand-offs). */
static weft__xnode *steal(weft__pool *p, weft__worker *w, int slots) {
  if (p->n < 2) return NULL;
  for (int round = 0; round < 2; round++) {
    w->rng = w->rng * 1664525u + 1013904223u;
    int start = (int)(w->rng >> 8) % p->n;
    for (int k = 0; k < p->n; k++) {
      int v = (start + k) % p->n;
      if (v == w->index) continue;
      /* Lost a race for the oldest node: another thief took it, and the deque may hold more.
       * Try again: a searcher's last look before it sleeps must not miss a node (the worker
       * that queued it may have woken nobody, this one searching). */
      void *x;
      while ((x = weft__wsq_steal(&p->w[v].q)) == WEFT__WSQ_ABORT) {
      }
      if (x != WEFT__WSQ_EMPTY ||
          /* A node handed to a worker that has not taken it yet: it may be off its core. */
          (round == 1 && slots && atomic_load_explicit(&p->w[v].handed, memory_order_relaxed) != NULL &&
           (x = atomic_exchange_explicit(&p->w[v].handed, NULL, memory_order_acq_rel)) != NULL)) {
        atomic_fetch_add_explicit(&w->steals, 1, memory_order_relaxed);
        return x;
      }
    }
  }
  return NULL;
}

void weft__pool_background(weft__pool *p, weft__bgtask *t) {
  weft__mutex_lock(&p->jobs_lock);
  t->next = p->bg;
  p->bg = t;
  weft__mutex_unlock(&p->jobs_lock);
  atomic_fetch_add_explicit(&p->nbg, 1, memory_order_release);
  notify(p, 1);
}

static weft__bgtask *pop_background(weft__pool *p) {
  if (atomic_load_explicit(&p->nbg, memory_order_acquire) == 0) return NULL;
  weft__mutex_lock(&p->jobs_lock);
  weft__bgtask *t = p->bg;
  if (t != NULL) {
    p->bg = t->next;
    atomic_fetch_sub_explicit(&p->nbg, 1, memory_order_relaxed);
  }
  weft__mutex_unlock(&p->jobs_lock);
  return t;
}

void weft__pool_run_background(weft__pool *p) {
  for (weft__bgtask *t; (t = pop_background(p)) != NULL;) t->fn(t);
}

/* Joins a published job with tiles left and runs its tiles, else runs a background task;
 * returns 1 if it ran anything. */
static int help(weft__pool *p) {
  weft__pjob *j = NULL;
  if (atomic_load_explicit(&p->njobs, memory_order_acquire) != 0) {
    weft__mutex_lock(&p->jobs_lock);
    for (weft__pjob *c = p->jobs; c != NULL && j == NULL; c = c->next_job)
      if (atomic_load_explicit(&c->next, memory_order_relaxed) < c->ntiles &&
          atomic_load_explicit(&c->helpers, memory_order_relaxed) < c->max_helpers) {
        atomic_fetch_add_explicit(&c->helpers, 1, memory_order_relaxed);
        j = c;
      }
    weft__mutex_unlock(&p->jobs_lock);
  }
  if (j == NULL) {
    weft__bgtask *t = pop_background(p);
    if (t == NULL) return 0;
    t->fn(t);
    return 1;
  }
  int ran = 0;
  for (;;) {
    uint32_t t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
    if (t >= j->ntiles) break;
    if (t == j->ntiles - 1) atomic_fetch_sub_explicit(&p->njobs, 1, memory_order_relaxed);
    j->fn(j->arg, t);
    ran = 1;
    /* Release: the tile's results before the count the owner waits on. */
    atomic_fetch_add_explicit(&j->done, 1, memory_order_release);
  }
  /* Release: nothing of the job is touched after this (the owner may return). */
  atomic_fetch_sub_explicit(&j->helpers, 1, memory_order_release);
  return ran;
}

void weft__pool_set_hand_offs(weft__pool *p, int on) { atomic_store_explicit(&p->hand, on, memory_order_relaxed); }

int weft__pool_is_worker(const weft__pool *p) { return self != NULL && self->pool == p; }

void weft__pool_parallel(weft__pool *p, uint32_t ntiles, uint32_t helpers, void (*fn)(void *arg, uint32_t tile),
                         void *arg) {
  if (helpers > (ntiles > 0 ? ntiles - 1 : 0)) helpers = ntiles > 0 ? ntiles - 1 : 0; /* a tile each at most */
  weft__pjob j = {.fn = fn, .arg = arg, .ntiles = ntiles, .max_helpers = helpers};
  atomic_init(&j.next, 0);
  atomic_init(&j.done, 0);
  atomic_init(&j.helpers, 0);
  int published = helpers > 0;
  if (published) {
    weft__mutex_lock(&p->jobs_lock);
    j.next_job = p->jobs;
    p->jobs = &j;
    /* Before the unlock: a helper that finds the job may take its last tile at once. */
    atomic_fetch_add_explicit(&p->njobs, 1, memory_order_release);
    weft__mutex_unlock(&p->jobs_lock);
    notify(p, (int)helpers);
  }
  uint32_t mine = 0;
  for (;;) {
    uint32_t t = atomic_fetch_add_explicit(&j.next, 1, memory_order_relaxed);
    if (t >= ntiles) break;
    if (published && t == ntiles - 1) atomic_fetch_sub_explicit(&p->njobs, 1, memory_order_relaxed);
    fn(arg, t);
    mine++;
  }
  if (!published) return;
  weft__mutex_lock(&p->jobs_lock);
  for (weft__pjob **l = &p->jobs; *l != NULL; l = &(*l)->next_job)
    if (*l == &j) {
      *l = j.next_job;
      break;
    }
  weft__mutex_unlock(&p->jobs_lock);
  /* Acquire: the helpers' tiles are visible, and none of them reads the job any more. */
  for (int spins = 0; atomic_load_explicit(&j.done, memory_order_acquire) + mine < ntiles ||
                      atomic_load_explicit(&j.helpers, memory_order_acquire) != 0;
       spins++) {
    if (spins < 1024)
      weft__cpu_relax();
    else
      weft__thread_yield();
  }
}

/* The next node for worker w, or NULL: from its own deque, else (*shared set) from where any
 * worker may take work (with `slots`, the nodes handed to others too: the searchers' yielding
 * looks, the lookout's and the last look before sleep; see steal). An empty deque is seen
 * without a take: a take writes the deque's bottom, a line every thief reads, and idle workers
 * look many times a microsecond. */
static weft__xnode *find_work(weft__pool *p, weft__worker *w, int *shared, int slots) {
  void *x = weft__wsq_empty(&w->q) ? WEFT__WSQ_EMPTY : weft__wsq_take(&w->q);
  if (x != WEFT__WSQ_EMPTY) return x;
  *shared = 1;
  if (atomic_load_explicit(&w->handed, memory_order_relaxed) != NULL &&
      (x = atomic_exchange_explicit(&w->handed, NULL, memory_order_acq_rel)) != NULL)
    return x;
  if ((x = pop_inject(p)) != NULL) return x;
  if ((x = claim_roots(p, w)) != NULL) return x;
  return steal(p, w, slots);
}

/* A worker took a node from where any worker may take work: it wakes a sleeping worker to look
 * for more, unless one is searching already. Pushes made while a worker searched woke nobody,
 * and some of that work may be left (Go's rule: a thread that stops spinning with work in hand
 * wakes another to spin). */
static void took_shared(weft__pool *p) { notify(p, 1); }

static void search_begin(weft__pool *p, weft__worker *w) {
  atomic_fetch_add_explicit(&p->searching, 1, memory_order_seq_cst);
  atomic_store_explicit(&w->searching, 1, memory_order_seq_cst);
}

/* Ends w's search; returns a node handed to it meanwhile, or NULL (Dekker's pair, see the top
 * of the file). */
static weft__xnode *search_end(weft__pool *p, weft__worker *w) {
  atomic_fetch_sub_explicit(&p->searching, 1, memory_order_seq_cst);
  atomic_store_explicit(&w->searching, 0, memory_order_seq_cst);
  if (atomic_load_explicit(&w->handed, memory_order_seq_cst) == NULL) return NULL;
  /* acq_rel, as every exchange of a slot: its NULL then heads the release sequence that a
   * hander's CAS continues, so the seq_cst load above cannot read an older NULL of this
   * worker's under C11's wording (before P0668). */
  return atomic_exchange_explicit(&w->handed, NULL, memory_order_acq_rel);
}

/* Looks for work as a searcher (counted in p->searching, see notify) for SEARCH_NS: a sleep
 * costs its wake-up (a futex and, in a VM, an interrupt to a halted CPU: tens of microseconds),
 * and when 64 rounds were the spin, workers between tasks of 20-70 us slept and were woken
 * thousands of times a run (Task Bench's fft, 32 cores: 2264-2933 sleeps in a 16 000-node run;
 * Taskflow's workers yield up to 100 times before they sleep). A round is a look and 32
 * pauses, or every YIELD_ROUNDS-th a yield: the thread woken by the end of a run
 * (weft_run_wait) otherwise waited for a spinner's core, 0.15 ms with a worker on each of 32
 * cores, 0.02 with 16 of 32. A parallel job's tiles or a background task found meanwhile run
 * uncounted (that is work, not searching; the setup's own parallel steps among them) and start
 * the search afresh. The count drops before the sleep path's last look. */
static weft__xnode *search(weft__pool *p, weft__worker *w) {
  int shared = 0;
  weft__xnode *x = NULL, *h;
  search_begin(p, w);
  uint64_t t0 = weft__now_ns();
  for (int i = 0; x == NULL; i++) {
    if (i % YIELD_ROUNDS == 0 && weft__now_ns() - t0 >= SEARCH_NS) break;
    if (i % YIELD_ROUNDS == YIELD_ROUNDS - 1)
      weft__thread_yield();
    else
      for (int k = 0; k < 32 && atomic_load_explicit(&w->handed, memory_order_relaxed) == NULL; k++)
        weft__cpu_relax();
    x = find_work(p, w, &shared, i % YIELD_ROUNDS == YIELD_ROUNDS - 1);
    if (x == NULL && (atomic_load_explicit(&p->njobs, memory_order_relaxed) != 0 ||
                      atomic_load_explicit(&p->nbg, memory_order_relaxed) != 0)) {
      if ((h = search_end(p, w)) != NULL) {
        took_shared(p);
        return h;
      }
      if (help(p)) t0 = weft__now_ns();
      search_begin(p, w);
    }
  }
  if ((h = search_end(p, w)) != NULL) {
    if (x == NULL) {
      x = h;
      shared = 1;
    } else if (weft__pool_queue(p, h, &(int){-1})) { /* -1: queued, not handed on */
      notify(p, 1);
    }
  }
  if (x != NULL && shared) took_shared(p);
  return x;
}

static void *worker_main(void *arg) {
  weft__worker *w = arg;
  weft__pool *p = w->pool;
  self = w;
  weft__topology_bind_worker(p->rt->topology, w->index);
  for (;;) {
    int shared = 0;
    weft__xnode *x = find_work(p, w, &shared, 0);
    if (x != NULL && shared) took_shared(p);
    if (x == NULL) {
      /* The nodes this worker finished count toward their runs first: a background task (a
       * build's follower, which gives way while a run is in flight) or another node's tiles
       * may follow, and a run whose last node was done but not counted stayed in flight as
       * long as the follower kept coming back (a one-node run behind a followed build on one
       * worker: until the build stopped, 50 000-130 000 appends later). */
      weft__dispatch_flush();
      if (help(p)) continue;
      x = search(p, w);
    }
    if (x == NULL && !atomic_exchange_explicit(&p->lookout, 1, memory_order_relaxed)) {
      uint64_t t0 = weft__now_ns();
      while ((x = find_work(p, w, &shared, 1)) == NULL && weft__now_ns() - t0 < LOOKOUT_NS &&
             !atomic_load_explicit(&p->stop, memory_order_acquire)) {
        if (help(p))
          t0 = weft__now_ns();
        else
          weft__thread_yield();
      }
      atomic_store_explicit(&p->lookout, 0, memory_order_relaxed);
      if (x != NULL && shared) took_shared(p);
    }
    if (x == NULL) {
      atomic_fetch_add_explicit(&p->waiters, 1, memory_order_seq_cst);
      /* Pairs with notify's fence. A seq_cst increment alone does not order the relaxed loads
       * of find_work after it (C11 orders them only between fences; x86 does anyway, ARM not):
       * without the fence the second look could miss work whose notifier saw no waiter. */
      WEFT__FENCE();
      uint_fast64_t key = atomic_load_explicit(&p->epoch, memory_order_seq_cst);
      x = find_work(p, w, &shared, 1);
      /* A job published after the count went up wakes this worker (its notify sees it). */
      if (x == NULL && help(p)) {
        atomic_fetch_sub_explicit(&p->waiters, 1, memory_order_relaxed);
        continue;
      }
      if (x == NULL) {
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) {
          atomic_fetch_sub_explicit(&p->waiters, 1, memory_order_relaxed);
          break;
        }
        atomic_fetch_add_explicit(&w->sleeps, 1, memory_order_relaxed);
        weft__mutex_lock(&p->sleep_lock);
        while (atomic_load_explicit(&p->epoch, memory_order_relaxed) == key)
          weft__cond_wait(&p->sleep_cond, &p->sleep_lock);
        weft__mutex_unlock(&p->sleep_lock);
        atomic_fetch_sub_explicit(&p->waiters, 1, memory_order_relaxed);
        continue;
      }
      atomic_fetch_sub_explicit(&p->waiters, 1, memory_order_relaxed);
      if (shared) took_shared(p);
    }
    weft__dispatch_chain(p, w->index, x);
  }
  weft__dispatch_flush();
  self = NULL;
  return NULL;
}

void weft__pool_counts(const weft__pool *p, weft_pool_counts *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < p->n; i++) {
    out->steals += atomic_load_explicit(&p->w[i].steals, memory_order_relaxed);
    out->sleeps += atomic_load_explicit(&p->w[i].sleeps, memory_order_relaxed);
    out->handoffs += atomic_load_explicit(&p->w[i].handoffs, memory_order_relaxed);
  }
  out->injected = atomic_load_explicit(&p->injected, memory_order_relaxed);
  out->wakeups = atomic_load_explicit(&p->wakeups, memory_order_relaxed);
}

int weft__pool_create(weft_runtime *rt, int nworkers, weft__pool **out) {
  int rc;
  weft__pool *p = zalloc64(sizeof *p);
  if (p == NULL) return weft__oom("the worker pool");
  p->rt = rt;
  p->n = nworkers;
  atomic_init(&p->hand, nworkers <= weft__cpu_count());
  atomic_init(&p->inject_count, 0);
  atomic_init(&p->injected, 0);
  atomic_init(&p->wakeups, 0);
  atomic_init(&p->njobs, 0);
  atomic_init(&p->nbg, 0);
  atomic_init(&p->roots_count, 0);
  atomic_init(&p->epoch, 0);
  atomic_init(&p->waiters, 0);
  atomic_init(&p->searching, 0);
  atomic_init(&p->lookout, 0);
  atomic_init(&p->stop, 0);
  int have_inject = 0, have_sleep = 0, have_cond = 0, have_jobs = 0;
  if ((rc = weft__mutex_init(&p->inject_lock)) != WEFT_OK) goto fail;
  have_inject = 1;
  if ((rc = weft__mutex_init(&p->jobs_lock)) != WEFT_OK) goto fail;
  have_jobs = 1;
  if ((rc = weft__mutex_init(&p->sleep_lock)) != WEFT_OK) goto fail;
  have_sleep = 1;
  if ((rc = weft__cond_init(&p->sleep_cond)) != WEFT_OK) goto fail;
  have_cond = 1;
  p->w = zalloc64((size_t)nworkers * sizeof *p->w);
  if (p->w == NULL) {
    rc = weft__oom("the workers");
    goto fail;
  }
  for (int i = 0; i < nworkers; i++) {
    p->w[i].pool = p;
    p->w[i].index = i;
    p->w[i].rng = 0x9e3779b9u * (uint32_t)(i + 1);
    if ((rc = weft__wsq_init(&p->w[i].q, 1024)) != WEFT_OK) {
      for (int k = 0; k < i; k++) weft__wsq_fini(&p->w[k].q);
      weft__aligned_free(p->w);
      p->w = NULL;
      goto fail;
    }
  }
  p->nq = nworkers;
  for (int i = 0; i < nworkers; i++) {
    if ((rc = weft__thread_create(&p->w[i].thread, worker_main, &p->w[i])) != WEFT_OK) {
      p->n = i; /* destroy joins the ones that started */
      weft__pool_destroy(p);
      return rc;
    }
    p->w[i].started = 1;
  }
  *out = p;
  return WEFT_OK;
fail:
  if (have_jobs) weft__mutex_destroy(&p->jobs_lock);
  if (have_cond) weft__cond_destroy(&p->sleep_cond);
  if (have_sleep) weft__mutex_destroy(&p->sleep_lock);
  if (have_inject) weft__mutex_destroy(&p->inject_lock);
  weft__aligned_free(p);
  return rc;
}

void weft__pool_destroy(weft__pool *p) {
  if (p == NULL) return;
  atomic_store_explicit(&p->stop, 1, memory_order_release);
  weft__mutex_lock(&p->sleep_lock);
  atomic_fetch_add_explicit(&p->epoch, 1, memory_order_relaxed);
  weft__mutex_unlock(&p->sleep_lock);
  weft__cond_broadcast(&p->sleep_cond);
  for (int i = 0; i < p->nq; i++)
    if (p->w[i].started) weft__thread_join(p->w[i].thread);
  weft__pool_run_background(p);
  /* Workers that never started still own a deque. */
  for (int i = 0; i < p->nq; i++) weft__wsq_fini(&p->w[i].q);
  weft__aligned_free(p->w);
  weft__cond_destroy(&p->sleep_cond);
  weft__mutex_destroy(&p->sleep_lock);
  weft__mutex_destroy(&p->inject_lock);
  weft__mutex_destroy(&p->jobs_lock);
  weft__aligned_free(p);
}
