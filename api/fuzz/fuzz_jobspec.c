/*
 * fuzz_jobspec.c - libFuzzer target for the job-spec JSON parser
 * (api/jobspec.c): any byte string must either parse into a spec whose
 * strings are NUL-terminated within their arrays, or be refused with a code
 * and a NUL-terminated message. Built with clang -fsanitize=fuzzer,address,
 * undefined (RINGMASTER_FUZZ=ON or whenever the C compiler is clang).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec.h"

static void must_terminate(const char *s, size_t size)
{
  if (memchr(s, '\0', size) == NULL) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  rm_job_spec_t spec;
  rm_api_spec_error_t err;

  memset(&spec, 0, sizeof spec);
  if (rm__jobspec_parse((const char *)data, size, &spec, &err) == 0) {
    must_terminate(spec.name, sizeof spec.name);
    must_terminate(spec.algorithm, sizeof spec.algorithm);
    must_terminate(spec.workload_options, sizeof spec.workload_options);
    must_terminate(spec.launcher, sizeof spec.launcher);
    if (spec.name[0] == '\0' && memchr(data, '"', size) == NULL) abort();
  } else {
    must_terminate(err.code, sizeof err.code);
    must_terminate(err.message, sizeof err.message);
    if (err.code[0] == '\0' || err.field == NULL) abort();
  }
  rm__jobspec_error_free(&err);
  return 0;
}
