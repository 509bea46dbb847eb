/* runtime.c — the runtime: options, the backends and their devices, the worker pool, the
 * registry of user ops, and the thread policy: weft's workers own the cores.
 *
 * Thread policy: weft's workers own the cores. Every BLAS call runs on one thread (the worker
 * that makes it); a product large enough is split into tiles that the pool's idle workers run
 * (intra-op parallelism, pool.c "Parallel jobs"), at most `intra` of them (the blas_threads
 * option, else all), so inter-op and intra-op parallelism share the same threads and never
 * multiply.
 *
 * weft links a serial, thread-safe BLAS where its build finds one (CMakeLists.txt, "BLAS"),
 * else OpenBLAS's pthreads build; an application may have brought another one, which then
 * serves weft's calls too. The CPU backend finds out at runtime creation (rt->blas,
 * cpu_blas.c); a threaded library is held to one thread a call (a process-wide setting).
 *
 * The library's one `#if WEFT_HAVE_CUDA` outside the CUDA backend is here, where the table of
 * backends is filled (backend.h declares the CUDA table under the same condition). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/plan/policy.h"
#include "sched/sched.h"
#include "util/clock.h"

/* The simulated machine's backend (src/backends/sim/sim_backend.c). */
extern const weft__backend_vtable weft__sim_backend;


void weft_runtime_options_init(weft_runtime_options *o) {
  memset(o, 0, sizeof *o);
  o->max_gpus = -1;
  o->first_gpu = -1;
}

void weft__runtime_local(const weft_runtime *rt, int *rank, int *ranks) {
  *rank = rt->local_rank;
  *ranks = rt->local_ranks;
}

weft__backend *weft__backend_for(weft_runtime *rt, weft_device d) {
  if (d.rank != rt->rank && !rt->all_ranks) return rt->remote; /* another rank's: the transport */
  return (d.kind >= 0 && d.kind <= 1) ? rt->by_kind[d.kind] : NULL;
}

weft__backend *weft__node_backend(weft_runtime *rt, const weft_node *n) {
  /* A node that touches another rank's tensor is the transport's: a copy between ranks is a
   * message, any other node of another rank nothing here. */
  if (rt->remote != NULL) {
    if (n->device.rank != rt->rank) return rt->remote;
    for (int a = 0; a < n->nargs; a++)
      if (n->args[a].t->device.rank != rt->rank) return rt->remote;
  }
  return weft__backend_for(rt, n->device);
}

void weft__runtime_set_ranks(weft_runtime *rt, int rank, int nranks) {
  rt->rank = rank;
  rt->nranks = nranks;
}

int weft_runtime_rank(const weft_runtime *rt) { return rt->rank; }
int weft_runtime_ranks(const weft_runtime *rt) { return rt->nranks; }

weft__backend *weft__runtime_backend(const weft_runtime *rt, int kind) {
  return rt != NULL && kind >= 0 && kind <= 1 ? rt->by_kind[kind] : NULL;
}

static int add_backend(weft_runtime *rt, const weft__backend_vtable *vt, const weft_runtime_options *o) {
  weft__backend *b = &rt->backends[rt->nbackends];
  b->vt = vt;
  b->rt = rt;
  b->index = rt->nbackends;
  b->state = NULL;
  int rc = vt->init != NULL ? vt->init(b, o) : WEFT_OK;
  if (rc != WEFT_OK) return rc;
  rt->nbackends++;
  return WEFT_OK;
}

/* A step of the runtime's creation from *t0 to now (its first run shows them); *t0 becomes now.
 * On a failed allocation the step goes unrecorded: it is a report, not a result. */
static void made_bytes(weft_runtime *rt, const char *what, uint64_t bytes, uint64_t *t0) {
  weft__setup_rec rec = {.t0 = *t0, .t1 = weft__clock_now(), .kind = WEFT__SETUP_RUNTIME, .tensor = UINT32_MAX,
                         .what = what, .bytes = bytes};
  int rc = weft__vec_push(&rt->setup, &rec);
  (void)rc;
  *t0 = rec.t1;
}

static void made(weft_runtime *rt, const char *what, uint64_t *t0) { made_bytes(rt, what, 0, t0); }

int weft__gpu_direct(const weft_runtime *rt, weft_device s, weft_device d) {
  const weft__place_facts *f = &rt->place_facts;
  return f->ipc && s.rank != d.rank && s.kind == WEFT_DEVICE_CUDA && d.kind == WEFT_DEVICE_CUDA &&
         weft__same_host(rt, f->per_host, s.rank, d.rank);
}

int weft__runtime_set_hosts(weft_runtime *rt, const int *host) {
  int *h = weft__malloc((size_t)(rt->nranks > 0 ? rt->nranks : 1) * sizeof *h);
  if (h == NULL) return weft__oom("the ranks' hosts");
  memcpy(h, host, (size_t)rt->nranks * sizeof *h);
  weft__free(rt->rank_host);
  rt->rank_host = h;
  return WEFT_OK;
}

/* What auto placement takes of this machine, and under MPI rank 0's for every rank (a
 * collective: every rank makes its runtime). */
static int place_facts(weft_runtime *rt) {
  weft__place_facts *f = &rt->place_facts;
  memset(f, 0, sizeof *f);
  f->gpus = weft_device_count(rt, WEFT_DEVICE_CUDA);
  f->lanes = rt->opts.cpu_workers > 0 ? rt->opts.cpu_workers : rt->cores;
  f->per_host = weft__ranks_per_host(rt);
  const weft__backend *gb = rt->by_kind[WEFT_DEVICE_CUDA];
  f->peer = f->gpus > 1 && gb != NULL && gb->vt->can_access_peer(gb, 0, 1);
  /* Copies between the GPUs of ranks on one host go directly (the transport's CUDA IPC, or the
   * simulated machine's peer links) unless WEFT_GPU_IPC=0 says not to: through the hosts. */
  const char *ipc = getenv("WEFT_GPU_IPC");
  f->ipc = f->gpus > 0 && f->per_host > 1 && (rt->remote != NULL || rt->all_ranks) && gb != NULL &&
           gb->vt->ipc_capable != NULL && gb->vt->ipc_capable(gb) && !(ipc != NULL && strcmp(ipc, "0") == 0);
  weft_device_info info;
  if (f->gpus > 0 && weft_device_info_get(rt, weft_cuda(0), &info) == WEFT_OK) f->gpu_bytes = (double)info.memory_bytes;
  if (!weft__ranks_apart(rt)) return WEFT_OK;
  return rt->remote->vt->bcast(rt->remote, f, sizeof *f, 0);
}

static void post_background(void *rt, weft__bgtask *t) { weft__pool_background(((weft_runtime *)rt)->pool, t); }
static int runs_in_flight(void *rt) {
  return atomic_load_explicit(&((weft_runtime *)rt)->running, memory_order_relaxed) > 0;
}

int weft_runtime_create(const weft_runtime_options *opts, weft_runtime **out) {
  if (out == NULL) return weft__err(WEFT_EINVAL, "weft_runtime_create: out is NULL");
  weft__clock_init(); /* the clock's anchor: its first calibration window starts now */
  weft_runtime_options o;
  if (opts != NULL)
    o = *opts;
  else
    weft_runtime_options_init(&o);
  const char *lb = getenv("WEFT_LAUNCH_BLOCKING");
  if (lb != NULL && strcmp(lb, "1") == 0) o.flags |= WEFT_RUNTIME_LAUNCH_BLOCKING;
  int cores = weft__cpu_count();
  if (o.cpu_workers < 0 || o.cpu_workers > 4096)
    return weft__err(WEFT_EINVAL, "weft_runtime_create: cpu_workers is %d (0 for one per core, or 1..4096)",
                     o.cpu_workers);
  if (o.blas_threads < 0)
    return weft__err(WEFT_EINVAL, "weft_runtime_create: blas_threads is %d (0 for the policy)", o.blas_threads);
  if (o.first_gpu < -1)
    return weft__err(WEFT_EINVAL, "weft_runtime_create: first_gpu is %d (-1 for the default, or a GPU's index)",
                     o.first_gpu);
  if (o.sim_ranks < 0 || o.sim_ranks > 4096 || o.sim_ranks_per_host < 0)
    return weft__err(WEFT_EINVAL, "weft_runtime_create: sim_ranks is %d, sim_ranks_per_host %d (0 or 1..4096 ranks, "
                     "0 or more a host)", o.sim_ranks, o.sim_ranks_per_host);
  if ((o.sim_ranks > 1 || o.sim_ranks_per_host > 0) && o.simulate == NULL)
    return weft__err(WEFT_EINVAL, "weft_runtime_create: sim_ranks and sim_ranks_per_host simulate a job of several "
                     "ranks: they need simulate (a machine profile); a real job's ranks come from mpirun");
  const weft__policy *policy = weft__policy_find(o.policy);
  if (policy == NULL) {
    char names[128];
    weft__policy_names(names, sizeof names);
    return weft__err(WEFT_EINVAL, "weft_runtime_create: no placement policy '%s' (there are: %s)", o.policy, names);
  }
  int workers = o.cpu_workers ? o.cpu_workers : cores;
  /* A product's threads are workers running its tiles: never more than the pool has. */
  int intra = o.blas_threads && o.blas_threads < workers ? o.blas_threads : workers;

  int rc;
  weft_runtime *rt = weft__calloc(1, sizeof *rt);
  if (rt == NULL) return weft__oom("the runtime");
  rt->opts = o;
  rt->opts.simulate = NULL;
  rt->opts.policy = NULL;
  rt->opts.profile = NULL;
  rt->policy = policy;
  rt->cores = cores;
  rt->intra = intra;
  rt->nranks = 1;
  rt->local_ranks = 1;
  atomic_init(&rt->graphs, 0);
  atomic_init(&rt->running, 0);
  atomic_init(&rt->host_bytes, 0);
  atomic_init(&rt->host_peak, 0);
  weft__vec_init(&rt->ops, sizeof(weft_op *));
  weft__vec_init(&rt->setup, sizeof(weft__setup_rec));
  uint64_t t0 = weft__clock_now();
  if ((rc = weft__mutex_init(&rt->ops_lock)) != WEFT_OK) {
    weft__free(rt);
    return rc;
  }
  if ((rc = weft__blockpool_create(&rt->blocks)) != WEFT_OK) goto fail;
  /* Placement's prices: the profile asked for (loaded now, so a bad one fails here), else the
   * simulated machine's; without either, a shipped one chosen below by the GPUs found. */
  if (o.profile != NULL || o.simulate != NULL) {
    if ((rt->place_profile = weft__strdup(o.profile != NULL ? o.profile : o.simulate)) == NULL) {
      rc = weft__oom("the runtime");
      goto fail;
    }
  }
  if (o.profile != NULL && (rc = weft__place_model_load(rt)) != WEFT_OK) goto fail;
  if (o.profile != NULL) made(rt, "the placement profile", &t0);
  if (o.simulate != NULL) {
    /* A simulated machine: one backend stands for its host and all its GPUs, so that every
     * node is priced in the same virtual time (src/backends/sim). */
    if ((rc = add_backend(rt, &weft__sim_backend, &o)) != WEFT_OK) goto fail;
    weft__backend *sb = &rt->backends[0];
    if (o.sim_ranks > 1) { /* every rank of the simulated job runs here */
      rt->nranks = o.sim_ranks;
      rt->all_ranks = 1;
    }
    rt->by_kind[WEFT_DEVICE_CPU] = sb;
    if (sb->vt->device_count(sb) > 0) rt->by_kind[WEFT_DEVICE_CUDA] = sb;
    rt->pinned = sb;
    made(rt, "the simulated machine", &t0);
  } else {
    if ((rc = add_backend(rt, &weft__cpu_backend, &o)) != WEFT_OK) goto fail;
    rt->by_kind[WEFT_DEVICE_CPU] = &rt->backends[0];
    made(rt, "the CPU backend", &t0);
#if WEFT_HAVE_MPI
    if (weft__mpi_wanted()) {
      if ((rc = add_backend(rt, &weft__mpi_backend, &o)) != WEFT_OK) goto fail;
      rt->remote = &rt->backends[rt->nbackends - 1];
      made(rt, "the MPI transport: the ranks' communicator, the progress thread", &t0);
      /* Ranks sharing this host share its cores: by default each takes its share, less one
       * for its progress thread, which tests its messages without sleeping while they move
       * (2 ranks x 16 workers on 32 cores ran a stencil at 0.75 of one rank's rate; 2 x 15,
       * 1.0). The pool is made below. */
      int local = weft__mpi_local_ranks();
      rt->local_ranks = local;
      rt->local_rank = weft__mpi_local_rank();
      if (o.cpu_workers == 0 && local > 1) {
        workers = cores / local - 1 > 1 ? cores / local - 1 : 1;
        rt->intra = o.blas_threads && o.blas_threads < workers ? o.blas_threads : workers;
      }
    }
#endif
#if WEFT_HAVE_CUDA
    if (o.max_gpus != 0) {
      if ((rc = add_backend(rt, &weft__cuda_backend, &o)) != WEFT_OK) goto fail;
      made(rt, "the CUDA backend: device contexts, streams, cuBLAS and cuSOLVER handles, memory pools", &t0);
      weft__backend *cb = &rt->backends[rt->nbackends - 1];
      if (cb->vt->device_count(cb) > 0) {
        rt->by_kind[WEFT_DEVICE_CUDA] = cb;
        rt->pinned = cb;
      }
    }
#endif
  }
  if (rt->place_profile == NULL) {
    /* No profile named: the shipped one of a machine like this one — one GPU: h100; several:
     * the h200 family with as many (h200x2 and h200x4 measured; their peer links are what
     * makes a transfer between GPUs cheap enough to spread work over them), loaded at the
     * first placement. */
    weft__backend *cb = rt->by_kind[WEFT_DEVICE_CUDA];
    int gpus = cb != NULL ? cb->vt->device_count(cb) : 0;
    char name[32] = "h100";
    if (gpus > 1) snprintf(name, sizeof name, "h200x%d", gpus);
    if ((rt->place_profile = weft__strdup(name)) == NULL) {
      rc = weft__oom("the runtime");
      goto fail;
    }
  }
  if (rt->by_kind[WEFT_DEVICE_CUDA] == NULL && o.max_gpus != 0 && o.simulate == NULL &&
      !(o.flags & WEFT_RUNTIME_QUIET)) {
    static atomic_int said;
    if (atomic_exchange(&said, 1) == 0)
      fprintf(stderr, "weft: no CUDA GPU found%s; running on the CPU alone\n",
              WEFT_HAVE_CUDA ? "" : " (built without CUDA)");
  }
  /* The probe keeps the library's own thread count (the first probe of the process reads it),
   * then each BLAS call is held to one thread (weft splits large ones) and a threaded OpenBLAS's
   * pool, stopped when weft loaded, is stopped again should the application have restarted it;
   * the probe after it reports that. */
  t0 = weft__clock_now();
  weft__cpu_blas_probe(&rt->blas);
  weft__cpu_set_blas_threads(1);
  weft__cpu_blas_probe(&rt->blas);
  made(rt, "the BLAS: its build probed, held to one thread a call", &t0);
  if ((rc = weft__topology_load(o.bind, workers, &rt->topology)) != WEFT_OK) goto fail;
  made(rt, "the CPU topology (hwloc)", &t0);
  if ((rc = place_facts(rt)) != WEFT_OK) goto fail;
  if ((rc = weft__pool_create(rt, workers, &rt->pool)) != WEFT_OK) goto fail;
  weft__blockpool_warm_with(rt->blocks, rt->pool);
  /* A large build's analysis follows it on an idle worker, where this rank's share of the
   * cores leaves one for it beside the building thread (graph/dep_analysis.c). */
  if (cores / rt->local_ranks >= 2)
    rt->spare = (weft__spare){post_background, runs_in_flight, rt, weft__cpu_relax, weft__thread_yield};
  made(rt, "the CPU worker pool", &t0);
  made_bytes(rt, "the block pool: blocks for the first graphs, their pages touched", weft__blockpool_prime(rt->blocks),
             &t0);
  *out = rt;
  return WEFT_OK;
fail:
  for (int b = rt->nbackends - 1; b >= 0; b--)
    if (rt->backends[b].vt->fini != NULL) rt->backends[b].vt->fini(&rt->backends[b]);
  weft__blockpool_destroy(rt->blocks);
  weft__free(rt->place_model);
  weft__free(rt->place_profile);
  weft__free(rt->rank_host);
  weft__learned_free(rt);
  weft__mutex_destroy(&rt->ops_lock);
  weft__vec_fini(&rt->ops);
  weft__vec_fini(&rt->setup);
  weft__topology_free(rt->topology);
  weft__free(rt);
  return rc;
}

void weft_runtime_destroy(weft_runtime *rt) {
  if (rt == NULL) return;
  if (atomic_load(&rt->graphs) != 0)
    fprintf(stderr, "weft: weft_runtime_destroy: %d graphs are still alive; destroy them first\n",
            atomic_load(&rt->graphs));
  weft__blockpool_warm_with(rt->blocks, NULL); /* the warm-ups left run as the pool ends */
  weft__pool_destroy(rt->pool);
  for (int b = rt->nbackends - 1; b >= 0; b--)
    if (rt->backends[b].vt->fini != NULL) rt->backends[b].vt->fini(&rt->backends[b]);
  for (size_t i = 0; i < rt->ops.len; i++) {
    weft_op *op = WEFT__VEC_AT(&rt->ops, weft_op *, i);
    weft__free(op->name);
    weft__free(op);
  }
  weft__vec_fini(&rt->ops);
  weft__blockpool_destroy(rt->blocks);
  weft__free(rt->place_model);
  weft__free(rt->place_profile);
  weft__free(rt->rank_host);
  weft__learned_free(rt);
  weft__mutex_destroy(&rt->ops_lock);
  weft__vec_fini(&rt->setup);
  weft__topology_free(rt->topology);
  weft__free(rt);
}

int weft_runtime_cpu_workers(const weft_runtime *rt) { return weft__pool_size(rt->pool); }

int weft_runtime_blas_threads(const weft_runtime *rt) {
  const weft__backend *b = rt->by_kind[WEFT_DEVICE_CPU];
  return b->vt->blas_threads != NULL ? b->vt->blas_threads(b) : rt->intra;
}

int weft_runtime_blas_info(const weft_runtime *rt, weft_blas_info *out) {
  if (rt == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_runtime_blas_info: NULL argument");
  *out = rt->blas;
  return WEFT_OK;
}

void weft_runtime_set_batching(weft_runtime *rt, int enabled) {
  for (int b = 0; b < rt->nbackends; b++)
    if (rt->backends[b].vt->set_batching != NULL) rt->backends[b].vt->set_batching(&rt->backends[b], enabled);
}

/* ---- devices ----------------------------------------------------------------------------- */

int weft_device_count(const weft_runtime *rt, int kind) {
  if (kind == WEFT_DEVICE_CPU) return 1;
  if (kind != WEFT_DEVICE_CUDA || rt->by_kind[kind] == NULL) return 0;
  const weft__backend *b = rt->by_kind[kind];
  return b->vt->device_count(b);
}

int weft_device_exists(const weft_runtime *rt, weft_device d) {
  /* Every rank runs the same program on the same kind of machine: another rank's device
   * exists where this rank's does. */
  if (d.rank < 0 || d.rank >= rt->nranks) return 0;
  if (d.kind == WEFT_DEVICE_CPU || d.kind == WEFT_DEVICE_AUTO) return d.index == 0;
  return d.index >= 0 && d.index < weft_device_count(rt, d.kind);
}

weft_device weft_try_gpu(const weft_runtime *rt, int i) {
  return weft_device_exists(rt, weft_cuda(i)) ? weft_cuda(i) : weft_cpu();
}

int weft_all_gpus(const weft_runtime *rt, weft_device *out, int cap) {
  int n = weft_device_count(rt, WEFT_DEVICE_CUDA);
  if (n == 0) {
    if (cap > 0 && out != NULL) out[0] = weft_cpu();
    return 1;
  }
  for (int i = 0; i < n && i < cap && out != NULL; i++) out[i] = weft_cuda(i);
  return n;
}

int weft_device_info_get(const weft_runtime *rt, weft_device d, weft_device_info *out) {
  char name[32];
  if (rt == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_device_info_get: NULL argument");
  if (!weft_device_exists(rt, d))
    return weft__err(WEFT_EDEVICE, "weft_device_info_get: no device %s", weft_device_str(d, name, sizeof name));
  memset(out, 0, sizeof *out);
  out->device = d;
  const weft__backend *b = rt->by_kind[d.kind];
  return b->vt->device_info(b, d.index, out);
}

int weft_device_memory_usage(weft_runtime *rt, weft_device d, weft_memory_usage *out) {
  char name[32];
  if (rt == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_device_memory_usage: NULL argument");
  if (!weft_device_exists(rt, d))
    return weft__err(WEFT_EDEVICE, "weft_device_memory_usage: no device %s", weft_device_str(d, name, sizeof name));
  memset(out, 0, sizeof *out);
  if (d.kind == WEFT_DEVICE_CPU) {
    out->in_use = out->reserved = atomic_load(&rt->host_bytes);
    out->peak = atomic_load(&rt->host_peak);
    return WEFT_OK;
  }
  const weft__backend *b = rt->by_kind[d.kind];
  if (b->vt->memory_usage == NULL)
    return weft__err(WEFT_ENOTSUP, "weft_device_memory_usage: %s is %s, which reports no memory use",
                     weft_device_str(d, name, sizeof name),
                     b->vt->flags & WEFT__BACKEND_SIMULATED ? "a simulated GPU" : "served by a backend");
  return b->vt->memory_usage(b, d.index, out);
}

int weft_device_can_access_peer(const weft_runtime *rt, weft_device a, weft_device b) {
  if (a.kind != WEFT_DEVICE_CUDA || b.kind != WEFT_DEVICE_CUDA) return 0;
  if (!weft_device_exists(rt, a) || !weft_device_exists(rt, b)) return 0;
  const weft__backend *be = rt->by_kind[WEFT_DEVICE_CUDA];
  return be->vt->can_access_peer != NULL && be->vt->can_access_peer(be, a.index, b.index);
}

/* ---- user ops ---------------------------------------------------------------------------- */

static int valid_name(const char *s) {
  if (s == NULL || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_')) return 0;
  for (; *s; s++)
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
      return 0;
  return 1;
}

int weft_op_register(weft_runtime *rt, const weft_op_desc *d, const weft_op **out) {
  if (rt == NULL || d == NULL) return weft__err(WEFT_EINVAL, "weft_op_register: NULL argument");
  if (!valid_name(d->name))
    return weft__err(WEFT_EINVAL, "weft_op_register: '%s' is not a valid op name ([A-Za-z_][A-Za-z0-9_]*)",
                     d->name ? d->name : "(null)");
  if (weft__op_kind_find(d->name) >= 0)
    return weft__err(WEFT_EINVAL, "weft_op_register: '%s' is the name of a built-in op", d->name);
  if (d->nargs < 0 || d->nargs > WEFT_MAX_ARGS)
    return weft__err(WEFT_EINVAL, "weft_op_register: op '%s' has %d arguments (0..%d)", d->name,
                     d->nargs, WEFT_MAX_ARGS);
  for (int i = 0; i < d->nargs; i++)
    if (d->access[i] != WEFT_READ && d->access[i] != WEFT_WRITE && d->access[i] != WEFT_READ_WRITE)
      return weft__err(WEFT_EINVAL, "weft_op_register: op '%s' argument %d has access mode %d "
                       "(WEFT_READ, WEFT_WRITE or WEFT_READ_WRITE)", d->name, i, (int)d->access[i]);
  if (d->rest != 0 && d->rest != WEFT_READ && d->rest != WEFT_WRITE && d->rest != WEFT_READ_WRITE)
    return weft__err(WEFT_EINVAL, "weft_op_register: op '%s' has rest access mode %d (0 for a fixed "
                     "arity, or WEFT_READ, WEFT_WRITE or WEFT_READ_WRITE)", d->name, (int)d->rest);
  if (d->cpu == NULL && d->cuda == NULL)
    return weft__err(WEFT_EINVAL, "weft_op_register: op '%s' has no kernel", d->name);
  weft_op *op = weft__calloc(1, sizeof *op);
  char *name = weft__strdup(d->name);
  if (op == NULL || name == NULL) {
    weft__free(op);
    weft__free(name);
    return weft__oom("a user op");
  }
  op->desc = *d;
  op->name = name;
  op->desc.name = name;
  int rc = WEFT_OK;
  weft__mutex_lock(&rt->ops_lock);
  for (size_t i = 0; i < rt->ops.len; i++)
    if (strcmp(WEFT__VEC_AT(&rt->ops, weft_op *, i)->name, d->name) == 0) {
      rc = weft__err(WEFT_EINVAL, "weft_op_register: an op named '%s' is already registered", d->name);
      break;
    }
  if (rc == WEFT_OK) rc = weft__vec_push(&rt->ops, &op);
  weft__mutex_unlock(&rt->ops_lock);
  if (rc != WEFT_OK) {
    weft__free(name);
    weft__free(op);
    return rc;
  }
  if (out != NULL) *out = op;
  return WEFT_OK;
}

const weft_op *weft_op_find(const weft_runtime *rt, const char *name) {
  if (rt == NULL || name == NULL) return NULL;
  weft_runtime *m = (weft_runtime *)rt;
  const weft_op *found = NULL;
  weft__mutex_lock(&m->ops_lock);
  for (size_t i = 0; i < rt->ops.len && found == NULL; i++)
    if (strcmp(WEFT__VEC_AT(&rt->ops, weft_op *, i)->name, name) == 0)
      found = WEFT__VEC_AT(&rt->ops, weft_op *, i);
  weft__mutex_unlock(&m->ops_lock);
  return found;
}

const char *weft_op_name(const weft_op *op) { return op->name; }
