/* policy.c — the table of placement policies (policy.h): `fixed` and `heft`. */
#include <stdio.h>
#include <string.h>

#include "sched/plan/policy.h"

static int fixed_place(weft__pbuild *bd) { return weft__lanes_assign(bd); }

const weft__policy weft__policy_fixed = {
    .name = "fixed",
    .summary = "every node runs on the device the program gave it; GPU chains keep their stream",
    .place = fixed_place,
};

static int heft_place(weft__pbuild *bd) {
  int rc = weft__heft_order(bd);
  return rc == WEFT_OK ? weft__lanes_assign(bd) : rc;
}

const weft__policy weft__policy_heft = {
    .name = "heft",
    .summary = "every node runs on the device the program gave it, in the order list scheduling on the "
               "devices' engines gives (the critical path first: look-ahead)",
    .place = heft_place,
};

static const weft__policy *const policies[] = {&weft__policy_fixed, &weft__policy_heft};

const weft__policy *weft__policy_find(const char *name) {
  if (name == NULL) return policies[0];
  for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++)
    if (strcmp(policies[i]->name, name) == 0) return policies[i];
  return NULL;
}

void weft__policy_names(char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof policies / sizeof policies[0] && used < size; i++) {
    int k = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", policies[i]->name);
    if (k < 0) break;
    used += (size_t)k;
  }
}
