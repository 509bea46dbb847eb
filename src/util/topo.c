/* topo.c — Kahn's topological order, the one sort of the house: the analysis orders a graph
 * whose explicit edges point backward with it (and finds cycles by what it cannot order), and
 * the report orders a run's model with it for the critical path. */
#include "util/util.h"

uint32_t weft__topo_order(uint32_t n, const uint32_t *off, const uint32_t *succ, uint32_t *indeg, uint32_t *order) {
  for (uint32_t v = 0; v < n; v++) indeg[v] = 0;
  for (uint32_t k = 0; k < off[n]; k++) indeg[succ[k]]++;
  uint32_t tail = 0;
  for (uint32_t v = 0; v < n; v++)
    if (indeg[v] == 0) order[tail++] = v;
  for (uint32_t head = 0; head < tail; head++) {
    uint32_t v = order[head];
    for (uint32_t k = off[v]; k < off[v + 1]; k++)
      if (--indeg[succ[k]] == 0) order[tail++] = succ[k];
  }
  return tail;
}
