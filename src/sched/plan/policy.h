/* policy.h — placement policies, as a table (in the manner of StarPU's struct
 * starpu_sched_policy): one designated-initializer instance per policy, chosen by name when the
 * runtime is created (weft_runtime_options.policy). A policy decides where the planner puts
 * each node; the rest of the plan (memory, events, turns, batches) follows from its choice.
 *
 *   fixed   every node runs on the device the program gave it (an op where its result lives,
 *           a copy on its GPU side), and each GPU node goes to a stream by the heir rule
 *           (lanes.c), in the program's order (the default).
 *   heft    the same devices and stream rule, in the order list scheduling on the devices'
 *           engines gives (heft.c): the critical path first. The placement of `auto` devices
 *           is to come as part of it. */
#ifndef WEFT_SCHED_POLICY_H
#define WEFT_SCHED_POLICY_H

#include "sched/plan/planner.h"

typedef struct weft__policy {
  const char *name;
  const char *summary; /* one sentence, for explain and error messages */
  /* Places the GPU nodes of a plan being built: sets each one's stream (stream, start_stream,
   * why, heir_of) from what lanes.c's classify and heirs found. WEFT_OK or an error. */
  int (*place)(weft__pbuild *bd);
} weft__policy;

extern const weft__policy weft__policy_fixed, weft__policy_heft;

/* The policy called `name` (NULL: the default), or NULL when there is none by that name. */
const weft__policy *weft__policy_find(const char *name);
/* Writes the registered policies' names, comma-separated, into buf (for error messages). */
void weft__policy_names(char *buf, size_t size);

#endif
