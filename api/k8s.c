/*
 * k8s.c - GET /api/v1/jobs/{id}/k8s-manifest: the Kubernetes manifests that
 * run a submitted job's workers (Secret with the worker token, headless
 * Service, Indexed Job with completions == parallelism == world), rendered
 * by the k8s launcher's own renderer (rm_launch_k8s_manifest in
 * coordinator/launch/launch_coord.h, handed in by serve/ as
 * rm_api_options_t.k8s_render), so `ringmaster k8s-manifest JOB` and
 * what the k8s launcher writes never drift apart.
 *
 * Auth: required (the Secret holds the job's worker token).
 * Query: ?image=IMG (default: serve --k8s-image, else the renderer's),
 *        ?namespace=NS (default: none, kubectl's current namespace).
 * The workers dial serve --advertise when given, else the bound gRPC
 * address. Values are checked before rendering (400 naming the field):
 * namespace is a DNS-1123 label, image has no whitespace or control bytes.
 * The renderer quotes every string it writes, so no value can add YAML.
 * A terminal job answers 409: its workers would be refused at Join.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"

/* DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters. */
static int dns_label(const char *s)
{
  size_t n = strlen(s);
  if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-') return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-')) return 0;
  return 1;
}

/* An image reference: 1..255 printable ASCII characters, no space. */
static int image_ref(const char *s)
{
  size_t n = strlen(s);
  if (n == 0 || n > 255) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] <= ' ' || s[i] > '~') return 0;
  return 1;
}

/* Query overrides, else server defaults; 400 when a value is not valid. */
static int options(rm__req_t *req, rm__resp_t *resp, const char **image, const char **ns)
{
  const char *qi = rm__req_query(req, "image"), *qn = rm__req_query(req, "namespace");
  *image = qi ? qi : req->api->k8s_image;
  *ns = qn ? qn : req->api->k8s_namespace;
  if (*image && !image_ref(*image)) {
    rm__resp_error(resp, 400, "invalid_value", "image", "image must be 1-255 printable "
                   "characters without spaces");
    return -1;
  }
  if (*ns && !dns_label(*ns)) {
    rm__resp_error(resp, 400, "invalid_value", "namespace", "namespace must be a DNS-1123 label "
                   "(lower-case letters, digits and '-', at most 63)");
    return -1;
  }
  return 0;
}

void rm__h_k8s_manifest(rm__req_t *req, rm__resp_t *resp)
{
  uint64_t id;
  rm_job_info_t info;
  const char *image, *ns, *addr;
  char *text = NULL, err[256] = "";
  size_t len = 0;
  FILE *f = NULL;
  rm_status_t st;

  if (rm__req_job_id(req, resp, &id) || options(req, resp, &image, &ns)) return;
  if (req->api->k8s_render == NULL) {
    rm__resp_error(resp, 404, "not_found", NULL, "this coordinator has no Kubernetes "
                   "launcher to render manifests with");
    return;
  }
  st = rm_coord_job_get(req->api->coord, id, &info);
  if (st != RM_OK) {
    rm__resp_coord_error(resp, st, "k8s manifest", id);
    return;
  }
  if (rm_job_state_terminal(info.state)) {
    rm__resp_error(resp, 409, "conflict", NULL, "job %llu is already %s: its workers would be "
                   "refused", (unsigned long long)id, rm_job_state_name(info.state));
    return;
  }
  addr = req->api->advertise_addr ? req->api->advertise_addr
                                  : rm_coord_grpc_address(req->api->coord);
  f = open_memstream(&text, &len);
  if (f == NULL) {
    rm__resp_error(resp, 500, "internal", NULL, "cannot render the manifests: out of memory");
    return;
  }
  st = req->api->k8s_render(&info, addr, image, ns, f, err, sizeof err);
  if (fclose(f) != 0 && st == RM_OK) st = RM_ERR_SYSTEM;
  if (st != RM_OK) {
    rm__resp_error(resp, 500, "internal", NULL, "cannot render the manifests: %s",
                   err[0] ? err : rm_status_string(st));
    free(text);
    return;
  }
  rm__resp_text(resp, 200, "application/yaml", text, len);
}
