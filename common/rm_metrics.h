/*
 * rm_metrics.h - the rules of a step's named metrics (ringmaster.h
 * rm_metric_t), checked where they enter: the worker library before a
 * report is queued (so the program hears of a bad name at its own call),
 * and the coordinator on every ReportStep (any client may send one). One
 * checker, so both sides agree on what is refused and with which words.
 */
#ifndef RM_COMMON_RM_METRICS_H
#define RM_COMMON_RM_METRICS_H

#include <stddef.h>

#include "ringmaster/ringmaster.h"

/* 0 when name is a valid metric name, else -1 with a sentence in why. */
int rm__metric_name_check(const char *name, char *why, size_t len);

/* 0 when the n metrics names[i] = values[i] (stride-free: names[i] and
 * values[i]) obey every rule (count, names, no name twice, finite values),
 * else -1 with a sentence naming the first broken rule in why. */
int rm__metrics_check(const char *const *names, const double *values, size_t n, char *why,
                      size_t len);

#endif /* RM_COMMON_RM_METRICS_H */
