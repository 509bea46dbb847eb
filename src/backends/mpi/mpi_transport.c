/* mpi_transport.c — one graph across processes (ranks) through Open MPI: the transport behind
 * the backend table (docs/distributed.md).
 *
 * Every rank builds the same graph. A tensor's device carries the rank that owns it; a node
 * runs on the rank that owns its device (owner-computes: an op's device is the one of what it
 * writes), and an op that reads a tensor of another rank reads the copy weft inserted for it,
 * as for a tensor on another device. This backend serves every node the local rank does not
 * compute:
 *   - a copy from this rank to another is a nonblocking send, a copy from another rank to this
 *     one a nonblocking receive into the copy's storage, matched by the node's id as the tag on
 *     a communicator of the plan's own (so two graphs, or two versions of one, never mix);
 *   - any other node of another rank is nothing here: it completes at once.
 * Tensors of other ranks get no storage here. A progress thread tests the posted requests and
 * reports each node's completion (weft__sched_complete), so a worker never waits on the
 * network and sends and receives overlap compute; MPI is initialised with
 * MPI_THREAD_MULTIPLE for that (workers post, the progress thread tests).
 *
 * A tile of a distributed tensor (strided) goes as one message of a vector type, from its rows
 * in place.
 *
 * Between the GPUs of two ranks on one host (weft__gpu_direct) a copy is one copy of the
 * sender's GPU into the receiver's tensor, through the GPU backend's shared memory (CUDA IPC,
 * backend.h version 8), and two small messages tagged like any: the receiver, once its node may
 * overwrite the tensor, sends its handle ("ready"); the sender then copies, and once the copy is
 * done sends "done" (one byte; none: not computed). A side that skips the node still sends its
 * message and takes the other's ("ready" saying: do not copy), so no rank waits; a side that
 * cannot post one ends the job (ipc_abort). Which ranks share a host, MPI says
 * (MPI_COMM_TYPE_SHARED, set_hosts).
 *
 * Agreement, so that no rank waits for one that will not send:
 *   - at a launch that planned anew, every rank meets the others once (mpi_launch_agree), even
 *     when its launch failed: a failure anywhere is every rank's; then the ranks compare a hash
 *     of the graph (ranks that built different graphs fail with the first node that differs)
 *     and make the plan's communicator;
 *   - a copy skipped here still sends (messages of no bytes: "not computed") or receives what
 *     the other rank owes or is owed (mpi_skip);
 *   - at the end of each run the ranks agree on its outcome (mpi_run_drain): the first failing
 *     rank's error becomes every rank's. */
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "sched/thread.h"

enum { MAX_CHUNKS = 64 };
#define CHUNK ((size_t)1 << 30) /* bytes a message: MPI counts are ints */

/* What the progress thread tests: a node's messages, a skipped node's, or a step of a run's
 * agreement on its outcome. */
enum { P_SEND, P_RECV, P_SKIPPED, P_AGREE, P_AGREE_TEXT, P_IPC_SEND, P_IPC_RECV };

/* "Ready" of a copy between GPUs: where to copy, or skip (do not: the receiver will not use it). */
typedef struct ready_msg {
  weft__ipc_handle at;
  int32_t skip;
} ready_msg;

/* The stages of a copy between GPUs on the sender: waiting for "ready", copying, sending "done". */
enum { IPC_READY, IPC_COPY, IPC_DONE };

typedef struct outcome {
  int32_t status;
  uint32_t node;
  char error[1024];
} outcome;

typedef struct pending {
  int kind;
  weft_run *run;
  uint32_t index;
  int nreq, err; /* err: MPI's answer when the requests were done */
  /* Room for as many messages as the node's bytes need (pending_new): one for most. */
  int *len; /* a receive: the bytes each message must bring */
  MPI_Request *req;
  MPI_Status *status;
  void *scratch;             /* a skipped receive's landing place */
  int upstream;              /* a receive found done at its launch with a short message */
  struct plan_state *ps;     /* an agreement's plan */
  uint64_t key, first;       /* P_AGREE: this rank's failure key, the lowest of all */
  outcome *text;             /* P_AGREE_TEXT: the first failing rank's outcome (P_AGREE's room) */
  /* A copy between GPUs (P_IPC_*, and its skipped sides). */
  ready_msg ready;           /* the receiver's "ready", sent or received */
  int stage;                 /* the sender's IPC_* */
  int peer;
  const weft_tensor *src;    /* the sender's tensor */
  void *token;               /* the GPU backend's copy in flight */
  char done;                 /* "done"'s byte */
  int fail;                  /* a failure of this side (weft status), reported with `msg` */
  char *msg;
  struct pending *next;
} pending;

/* The messages of a tensor of `bytes` between hosts (at least one). */
static size_t messages(size_t bytes) { return bytes <= CHUNK ? 1 : (bytes + CHUNK - 1) / CHUNK; }

/* A zeroed pending of kind with room for n messages (at least one), in one block: one is
 * allocated for every message, so it is no larger than its messages need. */
static pending *pending_new(int kind, size_t n) {
  size_t text = kind == P_AGREE ? sizeof(outcome) : 0;
  pending *x = calloc(1, sizeof *x + n * (sizeof(MPI_Status) + sizeof(MPI_Request)) + text + n * sizeof(int));
  if (x == NULL) return NULL;
  x->kind = kind;
  x->status = (MPI_Status *)(x + 1);
  x->req = (MPI_Request *)(x->status + n);
  x->text = text ? (outcome *)(x->req + n) : NULL;
  x->len = (int *)((char *)(x->req + n) + text);
  return x;
}

typedef struct mpi_state {
  int rank, nranks, initialised_here, tag_ub;
  MPI_Comm world; /* a duplicate of MPI_COMM_WORLD for the runtime's collectives */
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  _Atomic(pending *) incoming; /* posted, not yet taken by the progress thread */
  atomic_int sleeping;         /* the progress thread waits on cond (under lock) */
  atomic_int stop;             /* the runtime ends: the thread returns at its next turn */
  int started;
  weft__backend *gpu; /* the GPU backend: copies between the GPUs of ranks on one host */
} mpi_state;

/* Another rank's GPU memory this plan's copies map (the GPU backend's ipc_map), held to the plan's
 * end. */
typedef struct plan_map {
  unsigned char handle[64];
  int index; /* this process's GPU */
  void *base;
} plan_map;

typedef struct plan_state {
  MPI_Comm comm;     /* the plan's messages and agreements */
  atomic_int upstream; /* this run received a message another rank did not compute */
  pthread_mutex_t lock; /* maps: the progress thread's and the workers' copies */
  plan_map *maps;
  size_t nmaps, cap;
} plan_state;

static void error_text(int code, char *buf, size_t size) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", code);
  snprintf(buf, size, "%s", s);
}

/* ---- the progress thread ------------------------------------------------------------------ */

/* Hands x to the progress thread: a lock-free push (workers post while the thread tests, and
 * never wait for it), and a signal only when the thread sleeps. The thread sets `sleeping`
 * under the lock before it checks `incoming` a last time, so a push it did not see is signalled
 * once it waits. */
static void post(mpi_state *st, pending *x) {
  pending *head = atomic_load_explicit(&st->incoming, memory_order_relaxed);
  do x->next = head;
  while (!atomic_compare_exchange_weak_explicit(&st->incoming, &head, x, memory_order_seq_cst, memory_order_relaxed));
  if (atomic_load(&st->sleeping)) {
    pthread_mutex_lock(&st->lock);
    pthread_cond_signal(&st->cond);
    pthread_mutex_unlock(&st->lock);
  }
}

/* The agreement's first step is done: every rank knows the first failing rank (or none). That
 * rank broadcasts its outcome next (P_AGREE_TEXT), so that every rank's run ends with the
 * same error, naming the same node. */
static void agreed_key(mpi_state *st, pending *x) {
  weft_run *r = x->run;
  if (x->first == UINT64_MAX) {
    int upstream = atomic_load_explicit(&x->ps->upstream, memory_order_relaxed);
    free(x);
    if (upstream) /* cannot happen: a rank that skipped a send has a failure or a cancel */
      weft__sched_drained(r, UINT32_MAX, WEFT_EIO, "a message from another rank did not come, and no rank failed");
    else
      weft__sched_drained(r, UINT32_MAX, WEFT_OK, NULL);
    return;
  }
  int root = (int)(x->first >> 32);
  x->kind = P_AGREE_TEXT;
  memset(x->text, 0, sizeof *x->text);
  if (root == st->rank) {
    uint32_t node;
    x->text->status = weft__run_outcome(r, &node, x->text->error, sizeof x->text->error);
    x->text->node = node;
    if (x->text->status == WEFT_ECANCELED && node == UINT32_MAX)
      snprintf(x->text->error, sizeof x->text->error, "rank %d cancelled the run", st->rank);
  }
  x->nreq = 1;
  int rc = MPI_Ibcast(x->text, (int)sizeof *x->text, MPI_BYTE, root, x->ps->comm, &x->req[0]);
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING + 64];
    error_text(rc, msg, sizeof msg);
    free(x);
    weft__sched_drained(r, UINT32_MAX, WEFT_EIO, msg);
    return;
  }
  post(st, x);
}

/* A receive whose requests are done: WEFT_OK when every message brought the bytes it should,
 * else WEFT__UPSTREAM (a shorter one says that its sender skipped the copy: its input failed
 * there, or its run was cancelled; mpi_skip). */
static int received(const pending *x) {
  for (int k = 0; k < x->nreq; k++) {
    int count = 0;
    MPI_Get_count(&x->status[k], MPI_BYTE, &count);
    if (count != x->len[k]) return WEFT__UPSTREAM;
  }
  return WEFT_OK;
}

/* ---- copies between the GPUs of ranks on one host ------------------------------------------ */

/* A receive between GPUs whose messages are done: WEFT_OK when "done" brought its byte, else
 * WEFT__UPSTREAM (the sender did not copy: its input failed there, or its run was cancelled). */
static int ipc_received(const pending *x) {
  int count = 0;
  MPI_Get_count(&x->status[1], MPI_BYTE, &count);
  return count == 1 ? WEFT_OK : WEFT__UPSTREAM;
}

/* The sender's side failed (status, the GPU backend's message): reported when its messages are
 * done; the receiver is told "not copied". */
static void ipc_failed(pending *x, int status) {
  if (x->fail != WEFT_OK) return;
  x->fail = status;
  const char *m = weft_last_error();
  x->msg = malloc(strlen(m) + 1);
  if (x->msg != NULL) memcpy(x->msg, m, strlen(m) + 1);
}

/* A side of a copy between GPUs that cannot post its message: the other rank would wait for it
 * for ever (its run never ends, so no agreement can report this one's failure), and a message
 * left half-posted could be matched by the next run's. The job ends, naming the node. */
static _Noreturn void ipc_abort(const mpi_state *st, uint32_t index, const char *what, int rc) {
  char msg[MPI_MAX_ERROR_STRING] = "out of memory";
  if (rc != MPI_SUCCESS) error_text(rc, msg, sizeof msg);
  fprintf(stderr, "weft: rank %d: node %u (a copy between GPUs of two ranks): %s failed: %s; aborting the job\n",
          st->rank, index, what, msg);
  MPI_Abort(st->world, 1);
  abort();
}

/* Sends "done": one byte when the copy is in the receiver's tensor, none when it was not made. */
static void send_done(const mpi_state *st, pending *x, int copied) {
  x->stage = IPC_DONE;
  x->done = 1;
  int rc = MPI_Isend(&x->done, copied ? 1 : 0, MPI_BYTE, x->peer, (int)x->index, x->ps->comm, &x->req[0]);
  if (rc != MPI_SUCCESS) ipc_abort(st, x->index, "sending \"done\"", rc);
}

/* Where the receiver's "ready" says to copy, mapped for this process's GPU `index` (once a
 * plan). */
static int plan_dst(mpi_state *st, plan_state *ps, int index, const weft__ipc_handle *at, void **dst) {
  int rc = WEFT_OK;
  void *base = NULL;
  pthread_mutex_lock(&ps->lock);
  for (size_t i = 0; i < ps->nmaps && base == NULL; i++)
    if (ps->maps[i].index == index && memcmp(ps->maps[i].handle, at->handle, sizeof at->handle) == 0)
      base = ps->maps[i].base;
  if (base == NULL && ps->nmaps == ps->cap) {
    size_t cap = ps->cap ? 2 * ps->cap : 16;
    plan_map *v = realloc(ps->maps, cap * sizeof *v);
    if (v == NULL)
      rc = weft__err(WEFT_ENOMEM, "out of memory for the GPU memory of other ranks");
    else
      ps->maps = v, ps->cap = cap;
  }
  if (base == NULL && rc == WEFT_OK && (rc = st->gpu->vt->ipc_map(st->gpu, index, at, &base)) == WEFT_OK) {
    plan_map *m = &ps->maps[ps->nmaps++];
    memcpy(m->handle, at->handle, sizeof m->handle);
    m->index = index;
    m->base = base;
  }
  pthread_mutex_unlock(&ps->lock);
  *dst = (char *)base + at->offset;
  return rc;
}

/* One step of the sender's copy between GPUs, from any thread that holds x: 1 when it is over
 * (x->fail says how), else 0. */
static int ipc_step(mpi_state *st, pending *x) {
  int flag = 0, rc;
  if (x->stage == IPC_READY) {
    if ((rc = MPI_Test(&x->req[0], &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
      ipc_abort(st, x->index, "receiving \"ready\"", rc);
    if (!flag) return 0;
    int copy = !x->ready.skip && x->fail == WEFT_OK, put = WEFT_OK;
    void *dst = NULL;
    if (copy && x->ready.at.bytes != x->src->bytes)
      put = weft__err(WEFT_ESHAPE, "rank %d: tensor %s has %zu bytes, and rank %d receives %llu", st->rank,
                      weft__tensor_name(x->src), x->src->bytes, x->peer, (unsigned long long)x->ready.at.bytes);
    if (copy && put == WEFT_OK) put = plan_dst(st, x->ps, x->src->device.index, &x->ready.at, &dst);
    if (copy && put == WEFT_OK) put = st->gpu->vt->ipc_put(st->gpu, x->src, dst, &x->token);
    if (put != WEFT_OK) {
      ipc_failed(x, put);
      copy = 0;
    }
    if (copy)
      x->stage = IPC_COPY;
    else
      send_done(st, x, 0);
  }
  if (x->stage == IPC_COPY) {
    int done = st->gpu->vt->ipc_test(st->gpu, x->token);
    if (done == 0) return 0;
    if (done < 0) ipc_failed(x, done);
    send_done(st, x, done == 1);
  }
  flag = 0;
  if ((rc = MPI_Test(&x->req[0], &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS) ipc_abort(st, x->index, "sending \"done\"", rc);
  return flag;
}

/* Requests of x are done (rc: MPI's answer): report what they mean. */
static void finished(mpi_state *st, pending *x, int rc) {
  char msg[MPI_MAX_ERROR_STRING + 128];
  if (rc != MPI_SUCCESS) error_text(rc, msg, sizeof msg);
  switch (x->kind) {
    /* The successors that are messages too (the send answering this receive, the next
     * receive) are posted here, on this thread: no hand-off to a worker between messages. */
    case P_SEND:
      weft__sched_complete_here(x->run, x->index, rc == MPI_SUCCESS ? WEFT_OK : WEFT_EIO, msg);
      break;
    case P_RECV: {
      int status = rc != MPI_SUCCESS ? WEFT_EIO : x->upstream ? WEFT__UPSTREAM : received(x);
      if (status == WEFT__UPSTREAM) atomic_store_explicit(&x->ps->upstream, 1, memory_order_relaxed);
      weft__sched_complete_here(x->run, x->index, status, msg);
      break;
    }
    case P_IPC_SEND:
    case P_IPC_RECV: {
      if (rc != MPI_SUCCESS) ipc_abort(st, x->index, "taking \"done\"", rc); /* it may still come */
      int status = x->fail != WEFT_OK ? x->fail : WEFT_OK;
      if (status == WEFT_OK && x->kind == P_IPC_RECV && ipc_received(x) != WEFT_OK) {
        status = WEFT__UPSTREAM;
        atomic_store_explicit(&x->ps->upstream, 1, memory_order_relaxed);
      }
      weft__sched_complete_here(x->run, x->index, status, x->msg);
      free(x->msg);
      break;
    }
    case P_SKIPPED:
      free(x->scratch);
      break;
    case P_AGREE:
      if (rc != MPI_SUCCESS) {
        weft__sched_drained(x->run, UINT32_MAX, WEFT_EIO, msg);
        break;
      }
      agreed_key(st, x);
      return; /* x lives on, or was freed */
    case P_AGREE_TEXT:
      if (rc != MPI_SUCCESS)
        weft__sched_drained(x->run, UINT32_MAX, WEFT_EIO, msg);
      else {
        if ((int)(x->first >> 32) != st->rank) weft__sched_fail_as(x->run, x->text->node, x->text->status, x->text->error);
        weft__sched_drained(x->run, UINT32_MAX, WEFT_OK, NULL);
      }
      break;
  }
  free(x);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* How long the progress thread keeps testing, yielding its core between tests, after it last
 * saw something posted or done, before it naps between tests (NAP). A message or collective
 * takes several turns of both sides' progress (a rendezvous, an all-reduce's rounds): napping
 * at once would add a nap to each turn. */
#define POLL_NS 200000u
#define NAP_NS 20000
/* The first SPIN_NS of that window it tests without yielding (a pause between tests): the
 * answer to a message usually comes within it, and a yield (a system call) a test would double
 * a message's latency. */
#define SPIN_NS 20000u
/* A message this large moves in many fragments on a host without single-copy transfers (Open
 * MPI's vader in a container without CMA), each needing a turn of progress on both sides: while
 * one is posted the thread keeps testing and never naps (a nap a fragment took a 256 MiB copy
 * from 8.4 to 1.2 GB/s on nvidia-h200-x2). */
#define STREAM_BYTES (64 << 10)

static void *progress_main(void *arg) {
  mpi_state *st = arg;
  uint64_t busy_until = 0, spin_until = 0;
  pending *list = NULL; /* what this thread tests: its own, no lock */
  for (;;) {
    /* The runtime ends: what is still posted is left as it is (a skipped receive's buffer may
     * still be MPI's target; the process's MPI ends with it). */
    if (atomic_load(&st->stop)) break;
    pending *in = atomic_exchange_explicit(&st->incoming, NULL, memory_order_acquire);
    if (in != NULL) { /* something new was posted */
      pending *last = in;
      while (last->next != NULL) last = last->next;
      last->next = list;
      list = in;
      spin_until = now_ns() + SPIN_NS;
      busy_until = spin_until - SPIN_NS + POLL_NS;
    }
    if (list == NULL) { /* nothing to test: sleep until a post (or the end) */
      pthread_mutex_lock(&st->lock);
      atomic_store(&st->sleeping, 1);
      while (!atomic_load(&st->stop) && atomic_load(&st->incoming) == NULL) pthread_cond_wait(&st->cond, &st->lock);
      atomic_store(&st->sleeping, 0);
      pthread_mutex_unlock(&st->lock);
      continue;
    }
    pending *done = NULL;
    int streaming = 0;
    for (pending **p = &list; *p != NULL;) {
      int flag = 0, rc;
      if ((*p)->kind == P_IPC_SEND) {
        flag = ipc_step(st, *p);
        rc = MPI_SUCCESS;
      } else {
        rc = MPI_Testall((*p)->nreq, (*p)->req, &flag, (*p)->status);
      }
      if (rc != MPI_SUCCESS || flag) {
        pending *x = *p;
        *p = x->next;
        x->next = done;
        done = x;
        x->err = rc;
      } else {
        /* A copy between GPUs counts as a large message: "ready" and "done" answer it at once
         * (napping while they were due took a 256 MiB copy from 0.91 to 0.81 of the hand-made
         * one's rate on 2 x H200). */
        streaming |= ((*p)->nreq > 0 && (*p)->len[0] >= STREAM_BYTES) || (*p)->kind == P_IPC_SEND ||
                     (*p)->kind == P_IPC_RECV;
        p = &(*p)->next;
      }
    }
    if (streaming) busy_until = now_ns() + POLL_NS;
    for (pending *x = done, *next; x != NULL; x = next) {
      next = x->next;
      finished(st, x, x->err);
    }
    if (done != NULL) {
      spin_until = now_ns() + SPIN_NS;
      busy_until = spin_until - SPIN_NS + POLL_NS;
      continue;
    }
    /* Messages in flight: look again at once, then soon; after a while without news, without
     * holding a core. */
    uint64_t now = now_ns();
    if (now < spin_until)
      weft__cpu_relax(); /* one: a pause is about 140 cycles on Skylake and later */
    else if (now < busy_until)
      sched_yield();
    else
      nanosleep(&(struct timespec){0, NAP_NS}, NULL);
  }
  return NULL;
}

/* ---- the backend --------------------------------------------------------------------------- */

/* Each rank's host, for copies between the GPUs of ranks on one host: the lowest rank of the
 * ranks that share memory with it (MPI_COMM_TYPE_SHARED), gathered by every rank. */
static int set_hosts(weft_runtime *rt, mpi_state *st) {
  MPI_Comm node;
  int first = st->rank, rc = MPI_Comm_split_type(st->world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  if (rc == MPI_SUCCESS) {
    rc = MPI_Allreduce(&st->rank, &first, 1, MPI_INT, MPI_MIN, node);
    MPI_Comm_free(&node);
  }
  int *host = malloc((size_t)st->nranks * sizeof *host);
  if (host == NULL) return weft__err(WEFT_ENOMEM, "rank %d: out of memory for the ranks' hosts", st->rank);
  if (rc == MPI_SUCCESS) rc = MPI_Allgather(&first, 1, MPI_INT, host, 1, MPI_INT, st->world);
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    error_text(rc, msg, sizeof msg);
    free(host);
    return weft__err(WEFT_EIO, "rank %d: finding which ranks share a host failed: %s", st->rank, msg);
  }
  rc = weft__runtime_set_hosts(rt, host);
  free(host);
  return rc;
}

static int mpi_init(weft__backend *b, const weft_runtime_options *o) {
  (void)o;
  int inited = 0, provided = 0, rc;
  MPI_Initialized(&inited);
  mpi_state *st = calloc(1, sizeof *st);
  if (st == NULL) return weft__oom("the MPI transport");
  if (!inited) {
    if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided)) != MPI_SUCCESS) {
      free(st);
      return weft__err(WEFT_EIO, "MPI_Init_thread failed (error %d)", rc);
    }
    st->initialised_here = 1;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    free(st);
    return weft__err(WEFT_ENOTSUP, "the MPI library gives thread level %d; weft needs MPI_THREAD_MULTIPLE "
                     "(its workers send and receive while a progress thread tests)", provided);
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &st->world);
  MPI_Comm_set_errhandler(st->world, MPI_ERRORS_RETURN);
  MPI_Comm_rank(st->world, &st->rank);
  MPI_Comm_size(st->world, &st->nranks);
  int *ub = NULL, flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  st->tag_ub = flag && ub != NULL ? *ub : 32767;
  atomic_init(&st->incoming, NULL);
  atomic_init(&st->sleeping, 0);
  atomic_init(&st->stop, 0);
  pthread_mutex_init(&st->lock, NULL);
  pthread_cond_init(&st->cond, NULL);
  if (pthread_create(&st->thread, NULL, progress_main, st) != 0) {
    MPI_Comm_free(&st->world);
    free(st);
    return weft__err(WEFT_ENOMEM, "cannot start the MPI progress thread");
  }
  st->started = 1;
  b->state = st;
  weft__runtime_set_ranks(b->rt, st->rank, st->nranks);
  return set_hosts(b->rt, st);
}

static void finalize_at_exit(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

static void mpi_fini(weft__backend *b) {
  mpi_state *st = b->state;
  if (st == NULL) return;
  pthread_mutex_lock(&st->lock);
  atomic_store(&st->stop, 1);
  pthread_cond_signal(&st->cond);
  pthread_mutex_unlock(&st->lock);
  if (st->started) pthread_join(st->thread, NULL);
  MPI_Comm_free(&st->world);
  /* MPI cannot start twice in a process: it ends when the process does (a later runtime of
   * the same process reuses it). */
  if (st->initialised_here) atexit(finalize_at_exit);
  pthread_mutex_destroy(&st->lock);
  pthread_cond_destroy(&st->cond);
  free(st);
}

static int mpi_device_count(const weft__backend *b) {
  (void)b;
  return 0;
}

static int mpi_alloc(weft__backend *b, weft_tensor *t) {
  (void)b;
  (void)t; /* another rank's tensor: no storage here */
  return WEFT_OK;
}

/* A hash of node i as every rank must have built it: its op, its arguments (tensor, mode,
 * dtype, shape, device with rank). FNV-1a. */
static uint64_t mix(uint64_t h, uint64_t v) {
  for (int k = 0; k < 8; k++) {
    h ^= (v >> (8 * k)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}

static uint64_t node_hash(const weft_node *n) {
  uint64_t h = 1469598103934665603ull;
  h = mix(h, n->kind);
  h = mix(h, n->nargs);
  h = mix(h, (uint64_t)(uint32_t)n->device.kind << 40 | (uint64_t)(uint32_t)n->device.index << 20 |
                 (uint32_t)n->device.rank);
  for (int a = 0; a < n->nargs; a++) {
    const weft_tensor *t = n->args[a].t;
    h = mix(h, t->id);
    h = mix(h, n->args[a].mode);
    h = mix(h, t->dtype);
    for (int d = 0; d < t->ndim; d++) h = mix(h, (uint64_t)t->shape[d]);
    h = mix(h, (uint64_t)(uint32_t)t->device.kind << 40 | (uint64_t)(uint32_t)t->device.rank);
  }
  return h;
}

/* The ranks compare their graphs: WEFT_OK when every rank built this one, else an error naming
 * the first node that differs (on every rank, so that none waits). */
static int check_same_graph(mpi_state *st, weft__plan *p) {
  uint64_t n = p->n, *h = malloc((n ? n : 1) * sizeof *h);
  if (h == NULL) return weft__oom("the graph's hash");
  uint64_t all = mix(1469598103934665603ull, n);
  for (uint32_t i = 0; i < p->n; i++) all = mix(all, h[i] = node_hash(p->x[i].node));
  uint64_t mine[2] = {all, ~all}, ext[2];
  int rc = MPI_Allreduce(mine, ext, 2, MPI_UINT64_T, MPI_MAX, st->world);
  if (rc == MPI_SUCCESS && ext[0] == all && ~ext[1] == all) {
    free(h);
    return WEFT_OK;
  }
  /* Different: rank 0's node count and hashes to all, then the first difference anywhere. */
  uint64_t n0 = n;
  if (rc == MPI_SUCCESS) rc = MPI_Bcast(&n0, 1, MPI_UINT64_T, 0, st->world);
  uint64_t *h0 = rc == MPI_SUCCESS ? malloc((n0 ? n0 : 1) * sizeof *h0) : NULL;
  if (rc == MPI_SUCCESS && h0 == NULL) rc = MPI_ERR_NO_MEM;
  if (rc == MPI_SUCCESS && st->rank == 0) memcpy(h0, h, n * sizeof *h);
  if (rc == MPI_SUCCESS) rc = MPI_Bcast(h0, (int)n0, MPI_UINT64_T, 0, st->world);
  uint64_t first = n < n0 ? n : n0;
  for (uint64_t i = 0; rc == MPI_SUCCESS && i < n && i < n0; i++)
    if (h[i] != h0[i]) {
      first = i;
      break;
    }
  uint64_t at = first;
  if (rc == MPI_SUCCESS) rc = MPI_Allreduce(&first, &at, 1, MPI_UINT64_T, MPI_MIN, st->world);
  free(h0);
  free(h);
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    error_text(rc, msg, sizeof msg);
    return weft__err(WEFT_EIO, "rank %d: comparing the ranks' graphs failed: %s", st->rank, msg);
  }
  char dev[32];
  if (at < n) {
    const weft_node *x = p->x[at].node;
    return weft__err(WEFT_EINVAL,
                     "rank %d: the ranks built different graphs: node %llu differs (here: '%s' on %s, "
                     "%d arguments; this rank has %llu nodes, rank 0 %llu)",
                     st->rank, (unsigned long long)at, weft_node_op_name(x), weft_device_str(x->device, dev, sizeof dev),
                     x->nargs, (unsigned long long)n, (unsigned long long)n0);
  }
  return weft__err(WEFT_EINVAL,
                   "rank %d: the ranks built different graphs: node %llu differs (this rank has %llu nodes, "
                   "rank 0 %llu)",
                   st->rank, (unsigned long long)at, (unsigned long long)n, (unsigned long long)n0);
}

/* The plan hook makes no collective call: a rank whose launch fails before it would leave the
 * others waiting in it. The ranks meet once the launch has planned and materialised, or
 * failed (mpi_launch_agree). */
static int mpi_plan(weft__backend *b, weft__plan *p) {
  mpi_state *st = b->state;
  /* Messages carry host memory: a GPU tensor crossing ranks is staged through host memory by
   * the graph (ops.c, localise: a copy node a leg), so no copy between ranks has a GPU end, but
   * those between the GPUs of ranks on one host (weft__gpu_direct: the GPU backend's shared
   * memory). A guard: every rank finds the same node, so every rank fails the same way. */
  if (st->gpu == NULL) st->gpu = weft__runtime_backend(b->rt, WEFT_DEVICE_CUDA); /* made after the transport */
  int ipc = st->gpu != NULL && st->gpu->vt->ipc_map != NULL;
  for (uint32_t i = 0; i < p->n; i++) {
    const weft_node *n = p->x[i].node;
    if (n->kind != WEFT__OP_COPY) continue;
    const weft_tensor *src = n->args[0].t, *dst = n->args[1].t;
    if (src->device.rank == dst->device.rank) continue;
    if (ipc && weft__gpu_direct(b->rt, src->device, dst->device)) {
      if (!weft__tensor_contiguous(dst))
        return weft__err(WEFT_ENOTSUP, "rank %d: node %u copies %s into a strided tile of another rank's GPU; weft "
                         "copies into a contiguous tensor there", st->rank, i, weft__tensor_name(src));
      continue;
    }
    if (src->device.kind != WEFT_DEVICE_CPU || dst->device.kind != WEFT_DEVICE_CPU) {
      char a[40], c[40];
      return weft__err(WEFT_ENOTSUP,
                       "rank %d: node %u copies %s from %s to %s: a copy between ranks must have host memory "
                       "at both ends (weft stages GPU tensors through host memory when it makes the copies)",
                       st->rank, i, weft__tensor_name(src), weft_device_str(src->device, a, sizeof a),
                       weft_device_str(dst->device, c, sizeof c));
    }
  }
  if (p->n > (uint32_t)st->tag_ub)
    return weft__err(WEFT_ELIMIT, "rank %d: the graph has %u nodes; MPI tags go to %d", st->rank, p->n, st->tag_ub);
  plan_state *ps = calloc(1, sizeof *ps);
  if (ps == NULL) return weft__oom("the MPI transport's plan");
  ps->comm = MPI_COMM_NULL; /* made when the ranks agree on the launch */
  pthread_mutex_init(&ps->lock, NULL);
  p->bstate[b->index] = ps;
  return WEFT_OK;
}

/* A launch that planned anew: the first failing rank (or none), its error to all; then, when
 * every rank got here, the graphs compared and the plan's communicator made. */
static int mpi_launch_agree(weft__backend *b, weft__plan *p, int status) {
  mpi_state *st = b->state;
  int key = status != WEFT_OK ? st->rank : INT_MAX, first = INT_MAX;
  char msg[MPI_MAX_ERROR_STRING];
  int rc = MPI_Allreduce(&key, &first, 1, MPI_INT, MPI_MIN, st->world);
  if (rc == MPI_SUCCESS && first != INT_MAX) {
    outcome o = {0};
    if (first == st->rank) {
      o.status = status;
      snprintf(o.error, sizeof o.error, "%s", weft_last_error());
    }
    rc = MPI_Bcast(&o, (int)sizeof o, MPI_BYTE, first, st->world);
    if (rc == MPI_SUCCESS) {
      if (status != WEFT_OK) return status; /* this rank's own error stands */
      return weft__err(o.status, "rank %d: %s", first, o.error);
    }
  }
  if (rc != MPI_SUCCESS) {
    error_text(rc, msg, sizeof msg);
    return weft__err(WEFT_EIO, "rank %d: agreeing on the launch with the other ranks failed: %s", st->rank, msg);
  }
  plan_state *ps = p->bstate[b->index];
  if ((rc = check_same_graph(st, p)) != WEFT_OK) return rc;
  if (ps->comm == MPI_COMM_NULL) {
    if ((rc = MPI_Comm_dup(st->world, &ps->comm)) != MPI_SUCCESS) {
      error_text(rc, msg, sizeof msg);
      return weft__err(WEFT_EIO, "rank %d: making the plan's communicator failed: %s", st->rank, msg);
    }
    MPI_Comm_set_errhandler(ps->comm, MPI_ERRORS_RETURN);
  }
  return WEFT_OK;
}

static void mpi_plan_free(weft__backend *b, weft__plan *p) {
  plan_state *ps = p->bstate[b->index];
  if (ps == NULL) return;
  if (ps->comm != MPI_COMM_NULL) MPI_Comm_free(&ps->comm);
  mpi_state *st = b->state;
  for (size_t i = 0; i < ps->nmaps; i++) st->gpu->vt->ipc_unmap(st->gpu, ps->maps[i].base);
  free(ps->maps);
  pthread_mutex_destroy(&ps->lock);
  free(ps);
  p->bstate[b->index] = NULL;
}

/* Node n as this rank sees it: 1 when it is a copy between this rank and another (sending:
 * this rank sends; peer: the other rank), else 0 (another rank's node: nothing here). */
static int copy_peer(const mpi_state *st, const weft_node *n, int *sending, int *peer) {
  if (n->kind != WEFT__OP_COPY) return 0;
  int from = n->args[0].t->device.rank, to = n->args[1].t->device.rank;
  if (from == to || (from != st->rank && to != st->rank) || n->args[0].t->bytes == 0) return 0;
  *sending = from == st->rank;
  *peer = *sending ? to : from;
  return 1;
}

/* Posts node x->index's messages (a tensor over 1 GiB goes as several): from buf, or into it.
 * A skipped send posts messages of no bytes, which tell the receiver that its input was not
 * computed here. Returns MPI's answer; on failure nothing is left posted. */
static int post_messages(plan_state *ps, pending *x, int sending, int peer, char *buf, size_t bytes, int empty,
                         const weft_tensor *strided) {
  static char marker;
  if (strided != NULL && !empty) {
    /* A tile of a distributed tensor, sent from its rows in place: one message of a vector
     * type (its rows, a row stride apart); the receiver takes it as contiguous bytes. */
    size_t es = weft_dtype_size(strided->dtype), row = (size_t)strided->shape[1] * es;
    MPI_Datatype rows;
    if (row > INT_MAX || strided->shape[0] > INT_MAX) return MPI_ERR_COUNT;
    int rc = MPI_Type_create_hvector((int)strided->shape[0], (int)row, (MPI_Aint)((size_t)strided->view->ld * es),
                                     MPI_BYTE, &rows);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&rows);
    if (rc != MPI_SUCCESS) return rc;
    x->len[0] = (int)bytes;
    rc = MPI_Isend(buf, 1, rows, peer, (int)x->index, ps->comm, &x->req[0]);
    MPI_Type_free(&rows); /* released when the send is done */
    if (rc == MPI_SUCCESS) x->nreq = 1;
    return rc;
  }
  for (size_t off = 0; off < bytes; off += CHUNK) {
    int len = (int)(bytes - off < CHUNK ? bytes - off : CHUNK);
    MPI_Request *req = &x->req[x->nreq];
    x->len[x->nreq] = len;
    int rc = sending ? MPI_Isend(empty ? &marker : buf + off, empty ? 0 : len, MPI_BYTE, peer, (int)x->index, ps->comm, req)
                     : MPI_Irecv(buf + off, len, MPI_BYTE, peer, (int)x->index, ps->comm, req);
    if (rc != MPI_SUCCESS) {
      for (int k = 0; k < x->nreq; k++) MPI_Cancel(&x->req[k]);
      return rc;
    }
    x->nreq++;
  }
  return MPI_SUCCESS;
}

/* A copy between the GPUs of this rank and another of its host: "ready" and "done" (above). */
static int ipc_launch(mpi_state *st, weft_kernel_ctx *ctx, int sending, int peer) {
  pending *x = pending_new(sending ? P_IPC_SEND : P_IPC_RECV, 2);
  if (x == NULL) ipc_abort(st, ctx->index, "allocating its messages", MPI_SUCCESS);
  x->run = ctx->run;
  x->index = ctx->index;
  x->ps = ctx->plan->bstate[ctx->backend->index];
  x->peer = peer;
  int rc, tag = (int)ctx->index;
  if (sending) {
    x->src = ctx->node->args[0].t;
    x->len[0] = (int)sizeof x->ready;
    if ((rc = MPI_Irecv(&x->ready, (int)sizeof x->ready, MPI_BYTE, peer, tag, x->ps->comm, &x->req[0])) != MPI_SUCCESS)
      ipc_abort(st, ctx->index, "receiving \"ready\"", rc);
    x->nreq = 1;
    ipc_step(st, x); /* "ready" may be in: the copy starts on this worker */
  } else {
    int ex = st->gpu->vt->ipc_export(st->gpu, ctx->node->args[1].t, &x->ready.at);
    if (ex != WEFT_OK) { /* the sender is told to skip; this node fails once it has answered */
      x->ready.skip = 1;
      ipc_failed(x, ex);
    }
    x->len[1] = 1;
    if ((rc = MPI_Isend(&x->ready, (int)sizeof x->ready, MPI_BYTE, peer, tag, x->ps->comm, &x->req[0])) != MPI_SUCCESS)
      ipc_abort(st, ctx->index, "sending \"ready\"", rc);
    if ((rc = MPI_Irecv(&x->done, 1, MPI_BYTE, peer, tag, x->ps->comm, &x->req[1])) != MPI_SUCCESS)
      ipc_abort(st, ctx->index, "receiving \"done\"", rc);
    x->nreq = 2;
  }
  post(st, x);
  return WEFT__PENDING;
}

static int mpi_launch(weft__backend *b, weft_kernel_ctx *ctx) {
  mpi_state *st = b->state;
  const weft_node *n = ctx->node;
  int sending, peer;
  if (!copy_peer(st, n, &sending, &peer)) { /* another rank computes it */
    weft__sched_elsewhere(ctx);
    return WEFT_OK;
  }
  const weft_tensor *src = n->args[0].t, *dst = n->args[1].t;
  if (src->device.kind == WEFT_DEVICE_CUDA && dst->device.kind == WEFT_DEVICE_CUDA) return ipc_launch(st, ctx, sending, peer);
  size_t bytes = src->bytes;
  if (bytes > CHUNK * MAX_CHUNKS)
    return weft_ctx_fail(ctx, "a tensor of %zu bytes between ranks %d and %d; the transport moves up to %zu",
                         bytes, src->device.rank, dst->device.rank, CHUNK * MAX_CHUNKS);
  pending *x = pending_new(sending ? P_SEND : P_RECV, messages(bytes));
  if (x == NULL) return weft_ctx_fail(ctx, "out of memory for a message");
  x->run = ctx->run;
  x->index = ctx->index;
  x->ps = ctx->plan->bstate[b->index];
  if (!weft__tensor_contiguous(dst)) { /* inserted copies are contiguous; weft_copy takes no tile */
    free(x);
    return weft_ctx_fail(ctx, "a copy between ranks into a strided tile is not built");
  }
  if (!weft__tensor_contiguous(src) && bytes > CHUNK) { /* one message: both sides fail alike */
    free(x);
    return weft_ctx_fail(ctx, "tile %s has %zu bytes; a tile between ranks goes as one message, up to %zu",
                         weft__tensor_name(src), bytes, CHUNK);
  }
  int rc = post_messages(x->ps, x, sending, peer, sending ? src->data : dst->data, bytes, 0,
                         sending && !weft__tensor_contiguous(src) ? src : NULL);
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    error_text(rc, msg, sizeof msg);
    free(x);
    return weft_ctx_fail(ctx, "rank %d: %s rank %d failed: %s", st->rank, sending ? "sending to" : "receiving from",
                         peer, msg);
  }
  /* Done already (an eager send is, and a receive whose message is in): no turn of the
   * progress thread, and the worker goes on with what the node readied. */
  int flag = 0;
  if ((rc = MPI_Testall(x->nreq, x->req, &flag, x->status)) != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    error_text(rc, msg, sizeof msg);
    free(x);
    return weft_ctx_fail(ctx, "rank %d: %s rank %d failed: %s", st->rank, sending ? "sending to" : "receiving from",
                         peer, msg);
  }
  if (flag) {
    int status = sending ? WEFT_OK : received(x);
    if (status == WEFT_OK) {
      free(x);
      return WEFT_OK;
    }
    x->upstream = 1; /* the progress thread reports it (its requests are inactive now) */
  }
  post(st, x);
  return WEFT__PENDING;
}

/* A copy with another rank that will not run here (its input failed, or the run was
 * cancelled): the other rank still waits for its side. A send goes as messages of no bytes
 * (the receiver skips what depends on it, and the ranks agree on the error at the end); a
 * receive still takes the sender's messages, into a buffer of its own, so that the sender's
 * requests complete. Nothing is reported for it: the scheduler counts the node done. */
static void mpi_skip(weft__backend *b, weft_run *run, uint32_t index) {
  mpi_state *st = b->state;
  weft__plan *p = weft__run_plan(run);
  const weft_node *n = p->x[index].node;
  int sending, peer;
  if (!copy_peer(st, n, &sending, &peer)) return;
  if (n->args[0].t->device.kind == WEFT_DEVICE_CUDA && n->args[1].t->device.kind == WEFT_DEVICE_CUDA) {
    /* Between GPUs: the sender takes "ready" and says "not copied"; the receiver says "do not
     * copy" and takes "done". */
    pending *x = pending_new(P_SKIPPED, 2);
    if (x == NULL) ipc_abort(st, index, "allocating its messages", MPI_SUCCESS);
    x->index = index;
    x->ready.skip = 1;
    MPI_Comm comm = ((plan_state *)p->bstate[b->index])->comm;
    int tag = (int)index, rc;
    if (sending)
      rc = MPI_Irecv(&x->ready, (int)sizeof x->ready, MPI_BYTE, peer, tag, comm, &x->req[0]);
    else
      rc = MPI_Isend(&x->ready, (int)sizeof x->ready, MPI_BYTE, peer, tag, comm, &x->req[0]);
    if (rc == MPI_SUCCESS)
      rc = sending ? MPI_Isend(&x->done, 0, MPI_BYTE, peer, tag, comm, &x->req[1])
                   : MPI_Irecv(&x->done, 1, MPI_BYTE, peer, tag, comm, &x->req[1]);
    if (rc != MPI_SUCCESS) ipc_abort(st, index, "posting the skipped copy's messages", rc);
    x->nreq = 2;
    post(st, x);
    return;
  }
  if (n->args[0].t->bytes > CHUNK * MAX_CHUNKS) return;
  size_t bytes = n->args[0].t->bytes;
  pending *x = pending_new(P_SKIPPED, messages(bytes));
  void *scratch = sending ? NULL : malloc(bytes);
  if (x == NULL || (!sending && scratch == NULL)) {
    /* Nothing can be posted: the other rank would wait for ever. */
    fprintf(stderr, "weft: rank %d: out of memory skipping node %u; aborting the job\n", st->rank, index);
    MPI_Abort(st->world, 1);
  }
  x->index = index;
  x->scratch = scratch;
  int rc = post_messages(p->bstate[b->index], x, sending, peer, scratch, bytes, sending, NULL);
  if (rc != MPI_SUCCESS) {
    free(scratch);
    free(x);
    return; /* an MPI failure: the run's agreement reports it */
  }
  post(st, x);
}

static int mpi_run_begin(weft__backend *b, weft__plan *p, weft_run *run) {
  (void)run;
  plan_state *ps = p->bstate[b->index];
  if (ps->comm == MPI_COMM_NULL) /* planned at a launch the ranks did not agree on */
    return weft__err(WEFT_ESTATE, "rank %d: the graph was planned again without the other ranks; every rank "
                     "must change and launch it alike", ((mpi_state *)b->state)->rank);
  atomic_store_explicit(&ps->upstream, 0, memory_order_relaxed);
  return WEFT_OK;
}

/* Every node of the run is done here. The ranks agree on the run's outcome, so that a failure
 * on one rank ends every rank's run with the same error, naming the node and its rank: an
 * MPI_Iallreduce of each rank's first failure (rank, node), then the first failing rank's
 * outcome broadcast (agreed_key). Nonblocking: the progress thread completes it. */
static int mpi_run_drain(weft__backend *b, weft__plan *p, weft_run *run) {
  mpi_state *st = b->state;
  pending *x = pending_new(P_AGREE, 1);
  if (x == NULL) {
    weft__sched_drained(run, UINT32_MAX, WEFT_ENOMEM, "out of memory for the ranks' agreement on the run's outcome");
    return WEFT__PENDING;
  }
  x->run = run;
  x->ps = p->bstate[b->index];
  uint32_t node;
  char error[8];
  int status = weft__run_outcome(run, &node, error, sizeof error);
  x->key = status == WEFT_OK ? UINT64_MAX : (uint64_t)st->rank << 32 | node;
  x->nreq = 1;
  int rc = MPI_Iallreduce(&x->key, &x->first, 1, MPI_UINT64_T, MPI_MIN, x->ps->comm, &x->req[0]);
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING], text[MPI_MAX_ERROR_STRING + 64];
    error_text(rc, msg, sizeof msg);
    free(x);
    snprintf(text, sizeof text, "rank %d: agreeing on the run's outcome failed: %s", st->rank, msg);
    weft__sched_drained(run, UINT32_MAX, WEFT_EIO, text);
  } else {
    post(st, x);
  }
  return WEFT__PENDING;
}

static int mpi_bcast(weft__backend *b, void *buf, size_t bytes, int root) {
  mpi_state *st = b->state;
  for (size_t off = 0; off < bytes; off += CHUNK) {
    int len = (int)(bytes - off < CHUNK ? bytes - off : CHUNK);
    int rc = MPI_Bcast((char *)buf + off, len, MPI_BYTE, root, st->world);
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      error_text(rc, msg, sizeof msg);
      return weft__err(WEFT_EIO, "rank %d: broadcasting %zu bytes from rank %d failed: %s", st->rank, bytes, root, msg);
    }
  }
  return WEFT_OK;
}

const weft__backend_vtable weft__mpi_backend = {
    .version = WEFT__BACKEND_VERSION,
    .name = "mpi",
    .device_kind = -1,
    .flags = WEFT__BACKEND_PENDING,
    .init = mpi_init,
    .fini = mpi_fini,
    .device_count = mpi_device_count,
    .alloc = mpi_alloc,
    .plan = mpi_plan,
    .plan_free = mpi_plan_free,
    .launch = mpi_launch,
    .skip = mpi_skip,
    .run_begin = mpi_run_begin,
    .run_drain = mpi_run_drain,
    .bcast = mpi_bcast,
    .launch_agree = mpi_launch_agree,
};

int weft__mpi_wanted(void) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) return 1;
  /* Started by a process manager: Open MPI's mpirun, or a PMI/PMIx launcher. */
  return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMIX_RANK") != NULL || getenv("PMI_SIZE") != NULL;
}

int weft__mpi_local_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v != NULL && atoi(v) >= 0) return atoi(v);
  }
  return 0;
}

int weft__mpi_local_ranks(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    int n = v != NULL ? atoi(v) : 0;
    if (n > 0) return n;
  }
  return 1;
}
