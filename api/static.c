/*
 * static.c - the dashboard files and the OpenAPI document, embedded at build
 * time (embed.cmake turns web/ and api/openapi.json into rm__assets[]), and
 * Chart.js read once at start-up from Debian's libjs-chart.js, so the
 * coordinator binary needs nothing beside it except that package.
 *
 *   /  /index.html  /jobs/{id}      web/index.html (the app routes itself)
 *   /static/chart.js                 Chart.js UMD build from the system
 *   /static/<file>                   web/<file>
 *   /api/v1/openapi.json             api/openapi.json
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "rm_alloc.h"
#include "rm_log.h"

static const char *const k_chartjs_paths[] = {
    "/usr/share/javascript/chart.js/chart.min.js",
    "/usr/share/javascript/chart.js/chart.umd.js",
    "/usr/share/javascript/chart.js/chart.js", NULL};

static int load_file(const char *path, char **data, size_t *len)
{
  FILE *f = fopen(path, "rb");
  long n;
  int rc = -1;

  if (f == NULL) return -1;
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 || n > (64L << 20) ||
      fseek(f, 0, SEEK_SET) != 0)
    goto exit;
  *data = rm__xmalloc((size_t)n);
  if (fread(*data, 1, (size_t)n, f) != (size_t)n) {
    free(*data);
    *data = NULL;
    goto exit;
  }
  *len = (size_t)n;
  rc = 0;
exit:
  fclose(f);
  return rc;
}

void rm__chartjs_load(rm_api_t *api, const char *path)
{
  const char *env = getenv("RINGMASTER_CHARTJS");
  if (path == NULL && env && *env) path = env;
  for (int i = 0; api->chartjs == NULL; i++) {
    const char *p = path ? path : k_chartjs_paths[i];
    if (p == NULL) break;
    if (load_file(p, &api->chartjs, &api->chartjs_len) == 0)
      snprintf(api->chartjs_path, sizeof api->chartjs_path, "%s", p);
    if (path) break;
  }
  if (api->chartjs == NULL)
    RM_WARN("api: Chart.js not found (%s); install Debian's libjs-chart.js: the dashboard "
            "will show tables without charts",
            path ? path : k_chartjs_paths[0]);
}

static const rm__asset_t *find_asset(const char *path)
{
  for (size_t i = 0; i < rm__assets_count; i++)
    if (strcmp(rm__assets[i].path, path) == 0) return &rm__assets[i];
  return NULL;
}

void rm__static_serve(rm__req_t *req, rm__resp_t *resp)
{
  const char *url = req->url;
  const rm__asset_t *a;

  if (strcmp(url, "/static/chart.js") == 0) {
    if (req->api->chartjs == NULL) {
      rm__resp_error(resp, 404, "not_found", NULL,
                     "Chart.js is not installed on the server (Debian package libjs-chart.js)");
      return;
    }
    rm__resp_static(resp, "text/javascript; charset=utf-8", req->api->chartjs,
                    req->api->chartjs_len);
    return;
  }
  if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0 || strncmp(url, "/jobs/", 6) == 0)
    url = "/static/index.html";
  a = find_asset(url);
  if (a == NULL) {
    rm__resp_error(resp, 404, "not_found", NULL, "no such file: %.200s", req->url);
    return;
  }
  rm__resp_static(resp, a->content_type, a->data, a->len);
}
