/* topology.c — the host's cores, caches and NUMA nodes, through hwloc (the library StarPU and
 * Open MPI use for it), and the binding of the CPU workers to cores.
 *
 * The topology is loaded once per runtime, restricted to the cores this process may run on (a
 * cpuset given by taskset, a container or a batch system). Binding policy (weft_bind):
 *   cores  worker i runs on core i (cores in hwloc's order, which keeps a package's and a NUMA
 *          node's cores together), round robin past the last core;
 *   none   the operating system places the workers;
 *   auto   (the default) cores when the pool has a worker for every hardware thread the
 *          process may use (weft owns the CPU: the default pool), or on a machine of several
 *          NUMA nodes, where a worker that moves loses the memory it first touched; else none
 *          (a smaller pool, or MPI ranks sharing the host, each with its share of workers,
 *          would pile their workers onto the first cores).
 *          Unbound, a worker woken while every core ran a thread of the process was queued
 *          behind a busy worker and stayed there (the kernel does not move a task that ran
 *          within the last 0.5 ms) until that worker's slice ended, up to a tick later: in 6
 *          of 10 first runs of a 2-wide stencil of 2 us tasks on 2 cores one worker ran all
 *          or nearly all of the 1000 nodes (perf sched: the other waited 2.2 ms to run); bound,
 *          0 of 10. On 16 cores (Task Bench, 500 steps, medians of 3) binding took the first
 *          run of empty stencil_1d / nearest tasks from 6.78 / 12.0 to 5.2 / 8.91 us a step.
 * Host tensors are first touched where they are initialised: a large one in chunks by the
 * workers that share its initialisation (storage.c), so its pages spread over the NUMA nodes
 * of the bound workers rather than all landing on the launching thread's node. */
#include <hwloc.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched.h"

struct weft__topology {
  hwloc_topology_t topo;
  hwloc_cpuset_t allowed; /* the process's cores */
  weft_cpu_topology info;
};

static int count_inside(hwloc_topology_t t, hwloc_const_cpuset_t set, hwloc_obj_type_t type) {
  int n = hwloc_get_nbobjs_inside_cpuset_by_type(t, set, type);
  return n > 0 ? n : 0;
}

/* The size of the first cache of `type` above the first allowed core, or 0. */
static size_t cache_size(hwloc_topology_t t, hwloc_const_cpuset_t set, hwloc_obj_type_t type) {
  hwloc_obj_t pu = hwloc_get_obj_inside_cpuset_by_type(t, set, HWLOC_OBJ_PU, 0);
  for (hwloc_obj_t o = pu; o != NULL; o = o->parent)
    if (o->type == type && o->attr != NULL) return (size_t)o->attr->cache.size;
  return 0;
}

/* WEFT_BIND in the environment overrides the option: "auto", "cores" or "none". */
static int bind_policy(int option) {
  const char *e = getenv("WEFT_BIND");
  if (e == NULL || *e == '\0') return option;
  if (strcmp(e, "cores") == 0) return WEFT_BIND_CORES;
  if (strcmp(e, "none") == 0) return WEFT_BIND_NONE;
  if (strcmp(e, "auto") == 0) return WEFT_BIND_AUTO;
  return -1;
}

int weft__topology_load(int bind_option, int workers, weft__topology **out) {
  *out = NULL;
  int bind = bind_policy(bind_option);
  if (bind < 0)
    return weft__err(WEFT_EINVAL, "WEFT_BIND is '%s'; it must be auto, cores or none", getenv("WEFT_BIND"));
  if (bind_option < WEFT_BIND_AUTO || bind_option > WEFT_BIND_CORES)
    return weft__err(WEFT_EINVAL, "weft_runtime_create: bind is %d (WEFT_BIND_AUTO, _NONE or _CORES)", bind_option);
  weft__topology *tp = weft__calloc(1, sizeof *tp);
  if (tp == NULL) return weft__oom("the CPU topology");
  if (hwloc_topology_init(&tp->topo) != 0) {
    weft__free(tp);
    return weft__err(WEFT_ENOMEM, "hwloc could not start (hwloc_topology_init)");
  }
  if (hwloc_topology_load(tp->topo) != 0) {
    hwloc_topology_destroy(tp->topo);
    weft__free(tp);
    return weft__err(WEFT_EINVAL, "hwloc could not read the CPU topology (hwloc_topology_load)");
  }
  tp->allowed = hwloc_bitmap_alloc();
  if (tp->allowed == NULL || hwloc_get_cpubind(tp->topo, tp->allowed, HWLOC_CPUBIND_PROCESS) != 0 ||
      hwloc_bitmap_iszero(tp->allowed)) {
    if (tp->allowed == NULL) tp->allowed = hwloc_bitmap_alloc();
    if (tp->allowed != NULL) hwloc_bitmap_copy(tp->allowed, hwloc_topology_get_allowed_cpuset(tp->topo));
  }
  if (tp->allowed == NULL) {
    weft__topology_free(tp);
    return weft__oom("the CPU topology");
  }
  weft_cpu_topology *in = &tp->info;
  in->packages = count_inside(tp->topo, tp->allowed, HWLOC_OBJ_PACKAGE);
  in->numa_nodes = count_inside(tp->topo, tp->allowed, HWLOC_OBJ_NUMANODE);
  if (in->numa_nodes == 0) in->numa_nodes = hwloc_get_nbobjs_by_type(tp->topo, HWLOC_OBJ_NUMANODE);
  in->cores = count_inside(tp->topo, tp->allowed, HWLOC_OBJ_CORE);
  in->pus = count_inside(tp->topo, tp->allowed, HWLOC_OBJ_PU);
  in->l1d_bytes = cache_size(tp->topo, tp->allowed, HWLOC_OBJ_L1CACHE);
  in->l2_bytes = cache_size(tp->topo, tp->allowed, HWLOC_OBJ_L2CACHE);
  in->l3_bytes = cache_size(tp->topo, tp->allowed, HWLOC_OBJ_L3CACHE);
  int fills = in->pus > 0 && workers >= in->pus; /* a worker for every hardware thread */
  in->bound = in->cores > 0 && (bind == WEFT_BIND_CORES || (bind == WEFT_BIND_AUTO && (in->numa_nodes > 1 || fills)));
  in->workers = workers;
  *out = tp;
  return WEFT_OK;
}

void weft__topology_free(weft__topology *tp) {
  if (tp == NULL) return;
  if (tp->allowed != NULL) hwloc_bitmap_free(tp->allowed);
  hwloc_topology_destroy(tp->topo);
  weft__free(tp);
}

void weft__topology_bind_worker(const weft__topology *tp, int worker) {
  if (tp == NULL || !tp->info.bound) return;
  hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(tp->topo, tp->allowed, HWLOC_OBJ_CORE,
                                                         (unsigned)(worker % tp->info.cores));
  if (core == NULL || core->cpuset == NULL) return;
  hwloc_cpuset_t set = hwloc_bitmap_dup(core->cpuset);
  if (set == NULL) return;
  hwloc_bitmap_and(set, set, tp->allowed);
  /* A failed binding (a platform that refuses it) leaves the worker where the system put it:
   * binding is a placement hint, never a reason for a run to fail. */
  if (!hwloc_bitmap_iszero(set)) (void)hwloc_set_cpubind(tp->topo, set, HWLOC_CPUBIND_THREAD);
  hwloc_bitmap_free(set);
}

int weft_runtime_cpu_topology(const weft_runtime *rt, weft_cpu_topology *out) {
  if (rt == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_runtime_cpu_topology: NULL argument");
  *out = rt->topology->info;
  out->workers = weft__pool_size(rt->pool);
  return WEFT_OK;
}
