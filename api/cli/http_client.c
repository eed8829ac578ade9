/*
 * http_client.c - the CLI's HTTP client over libcurl (see http_client.h).
 *
 * Flow: base URL + path -> (one easy handle, reset to defaults, its
 * connection cache kept) -> options: URL, protocols http/https only, no
 * redirects, headers, method and body, CA file, connect deadline and
 * whole-request deadline, a progress callback that abandons the transfer
 * when the caller's signal counter moves -> curl_easy_perform -> status,
 * content type and body (at most MAX_REPLY bytes), or a sentence about what
 * failed. Proxies come from the environment (libcurl's own handling).
 * CURLOPT_NOSIGNAL stays off: libcurl then ignores SIGPIPE during a
 * transfer (a server that closes under a TLS write must not kill the CLI),
 * and Debian's libcurl resolves names in a thread, so it sets no alarm.
 */
#include "http_client.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sbuf.h"

#define MAX_REPLY (256u << 20)

static CURL *g_curl;
static int g_inited;

int rm__http_init(void)
{
  if (g_inited) return 0;
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) return -1;
  g_inited = 1;
  return 0;
}

void rm__http_cleanup(void)
{
  if (g_curl) curl_easy_cleanup(g_curl);
  g_curl = NULL;
  if (g_inited) curl_global_cleanup();
  g_inited = 0;
}

typedef struct {
  rm__sbuf_t in;
  int too_big;
  volatile sig_atomic_t *signals;
  sig_atomic_t seen;
  long long next_offset;
} xfer_t;

/* X-Log-Next-Offset: where a masked worker log continues (api/logs.c). */
static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
  xfer_t *x = arg;
  size_t len = size * n;
  static const char name[] = "x-log-next-offset:";
  if (len > sizeof name - 1 && len < 64 && !strncasecmp(p, name, sizeof name - 1)) {
    char v[64];
    memcpy(v, p + sizeof name - 1, len - (sizeof name - 1));
    v[len - (sizeof name - 1)] = '\0';
    x->next_offset = strtoll(v, NULL, 10);
  }
  return len;
}

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
  xfer_t *x = arg;
  size_t len = size * n;
  if (x->in.len + len > MAX_REPLY) {
    x->too_big = 1;
    return 0; /* CURLE_WRITE_ERROR */
  }
  rm__sbuf_append(&x->in, p, len);
  return len;
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
  xfer_t *x = arg;
  (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
  return x->signals && *x->signals != x->seen; /* nonzero: CURLE_ABORTED_BY_CALLBACK */
}

/* 1 when the header was added to *l. */
static int add_header(struct curl_slist **l, const char *h)
{
  struct curl_slist *n = curl_slist_append(*l, h);
  if (n == NULL) return 0;
  *l = n;
  return 1;
}

/* "http://host:port/prefix" + path in url; -1 for a scheme other than
 * http/https. A base without a scheme is http. */
static int make_url(const char *base, const char *path, char **url)
{
  rm__sbuf_t b;
  size_t n = strlen(base);
  rm__sbuf_init(&b);
  if (strncasecmp(base, "http://", 7) != 0 && strncasecmp(base, "https://", 8) != 0) {
    if (strstr(base, "://")) return -1;
    rm__sbuf_puts(&b, "http://");
  }
  while (n && base[n - 1] == '/') n--;
  rm__sbuf_append(&b, base, n);
  rm__sbuf_puts(&b, path);
  *url = rm__sbuf_take(&b, NULL);
  return 0;
}

static void describe(CURLcode rc, const char *detail, const xfer_t *x, const rm__http_opts_t *o,
                     char *err, size_t errlen)
{
  const char *d = *detail ? detail : curl_easy_strerror(rc);
  switch (rc) {
  case CURLE_OPERATION_TIMEDOUT:
    snprintf(err, errlen, "no answer from the server within the deadline (%s)", d);
    break;
  case CURLE_ABORTED_BY_CALLBACK:
    snprintf(err, errlen, "interrupted");
    break;
  case CURLE_WRITE_ERROR:
    if (x->too_big) snprintf(err, errlen, "answer larger than %u bytes", MAX_REPLY);
    else snprintf(err, errlen, "%s", d);
    break;
  case CURLE_PEER_FAILED_VERIFICATION:
    if (o->cacert && *o->cacert)
      snprintf(err, errlen, "TLS: the server's certificate is not signed by a CA in %s (%s)",
               o->cacert, d);
    else
      snprintf(err, errlen, "TLS: the server's certificate is not trusted (%s); give the CA "
               "that signed it with --cacert FILE or RINGMASTER_CACERT", d);
    break;
  case CURLE_SSL_CACERT_BADFILE:
    snprintf(err, errlen, "TLS: cannot use the CA certificate file %s (%s)",
             o->cacert && *o->cacert ? o->cacert : "(system default)", d);
    break;
  case CURLE_SSL_CONNECT_ERROR:
    snprintf(err, errlen, "TLS handshake failed (%s)", d);
    break;
  case CURLE_UNSUPPORTED_PROTOCOL:
  case CURLE_WEIRD_SERVER_REPLY:
    snprintf(err, errlen, "the answer is not HTTP (%s)", d);
    break;
  case CURLE_RECV_ERROR:
  case CURLE_SEND_ERROR:
    snprintf(err, errlen, "connection failed (%s)", d);
    break;
  case CURLE_GOT_NOTHING:
    snprintf(err, errlen, "the server closed the connection without an answer");
    break;
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY:
    snprintf(err, errlen, "cannot resolve the address (%s)", d);
    break;
  case CURLE_COULDNT_CONNECT:
    snprintf(err, errlen, "cannot connect (%s)", d);
    break;
  case CURLE_URL_MALFORMAT:
    snprintf(err, errlen, "bad server URL (%s; want http[s]://host:port)", d);
    break;
  default:
    snprintf(err, errlen, "%s", d);
    break;
  }
}

int rm__http_request(const char *base, const char *method, const char *path,
                     const rm__http_opts_t *o, const char *body, size_t body_len,
                     rm__http_reply_t *out, char *err, size_t errlen)
{
  static const rm__http_opts_t none = {NULL, NULL, 10000, 0, NULL};
  char detail[CURL_ERROR_SIZE], hdr[64 + 1024]; /* tokens: RM_API_TOKEN_MAX (256) */
  struct curl_slist *hdrs = NULL;
  xfer_t x;
  char *url = NULL;
  CURLcode rc;
  int ok = 1, ret = -1;
  long status = 0, timeout, connect_timeout;
  char *ctype = NULL;

  memset(out, 0, sizeof *out);
  memset(&x, 0, sizeof x);
  rm__sbuf_init(&x.in);
  detail[0] = '\0';
  if (o == NULL) o = &none;
  if (make_url(base, path, &url) != 0) {
    snprintf(err, errlen, "bad server URL '%s' (want http[s]://host:port)", base);
    goto exit;
  }
  if (o->token && strpbrk(o->token, "\r\n")) {
    snprintf(err, errlen, "the API token contains a line break");
    goto exit;
  }
  if (rm__http_init() != 0) {
    snprintf(err, errlen, "cannot initialise libcurl");
    goto exit;
  }
  if (g_curl == NULL && (g_curl = curl_easy_init()) == NULL) {
    snprintf(err, errlen, "cannot initialise libcurl");
    goto exit;
  }
  curl_easy_reset(g_curl); /* options to defaults; connections and caches stay */

  ok &= add_header(&hdrs, "Accept: application/json");
  ok &= add_header(&hdrs, "Expect:"); /* no 100-continue round trip for big bodies */
  if (o->token && *o->token) {
    snprintf(hdr, sizeof hdr, "Authorization: Bearer %.1024s", o->token);
    ok &= add_header(&hdrs, hdr);
  }
  if (body || !strcmp(method, "POST") || !strcmp(method, "PUT"))
    ok &= add_header(&hdrs, "Content-Type: application/json");
  if (!ok) {
    snprintf(err, errlen, "out of memory");
    goto exit;
  }

  timeout = o->timeout_ms > 0 ? o->timeout_ms : 10000;
  connect_timeout = timeout;
  if (o->connect_timeout_ms > 0 && o->connect_timeout_ms < timeout)
    connect_timeout = o->connect_timeout_ms;
  x.signals = o->signals;
  x.seen = o->signals ? *o->signals : 0;

  ok &= curl_easy_setopt(g_curl, CURLOPT_URL, url) == CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85.0 */
  ok &= curl_easy_setopt(g_curl, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK;
#else
  ok &= curl_easy_setopt(g_curl, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS)) ==
        CURLE_OK;
#endif
  ok &= curl_easy_setopt(g_curl, CURLOPT_ERRORBUFFER, detail) == CURLE_OK;
  ok &= curl_easy_setopt(g_curl, CURLOPT_USERAGENT, "ringmaster-cli") == CURLE_OK;
  ok &= curl_easy_setopt(g_curl, CURLOPT_HTTPHEADER, hdrs) == CURLE_OK;
  ok &= curl_easy_setopt(g_curl, CURLOPT_TIMEOUT_MS, timeout) == CURLE_OK;
  ok &= curl_easy_setopt(g_curl, CURLOPT_CONNECTTIMEOUT_MS, connect_timeout) == CURLE_OK;
  ok &= curl_easy_setopt(g_curl, CURLOPT_WRITEFUNCTION, on_data) == CURLE_OK;
  ok &= curl_easy_setopt(g_curl, CURLOPT_WRITEDATA, &x) == CURLE_OK;
  x.next_offset = -1;
  ok &= curl_easy_setopt(g_curl, CURLOPT_HEADERFUNCTION, on_header) == CURLE_OK;
  ok &= curl_easy_setopt(g_curl, CURLOPT_HEADERDATA, &x) == CURLE_OK;
  ok &= curl_easy_setopt(g_curl, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)MAX_REPLY) == CURLE_OK;
  if (o->signals) {
    ok &= curl_easy_setopt(g_curl, CURLOPT_NOPROGRESS, 0L) == CURLE_OK;
    ok &= curl_easy_setopt(g_curl, CURLOPT_XFERINFOFUNCTION, on_progress) == CURLE_OK;
    ok &= curl_easy_setopt(g_curl, CURLOPT_XFERINFODATA, &x) == CURLE_OK;
  }
  if (o->cacert && *o->cacert)
    ok &= curl_easy_setopt(g_curl, CURLOPT_CAINFO, o->cacert) == CURLE_OK;
  if (!strcmp(method, "HEAD")) {
    ok &= curl_easy_setopt(g_curl, CURLOPT_NOBODY, 1L) == CURLE_OK;
  } else if (body || !strcmp(method, "POST") || !strcmp(method, "PUT")) {
    ok &= curl_easy_setopt(g_curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len) == CURLE_OK;
    ok &= curl_easy_setopt(g_curl, CURLOPT_POSTFIELDS, body ? body : "") == CURLE_OK;
    if (strcmp(method, "POST"))
      ok &= curl_easy_setopt(g_curl, CURLOPT_CUSTOMREQUEST, method) == CURLE_OK;
  } else if (strcmp(method, "GET")) {
    ok &= curl_easy_setopt(g_curl, CURLOPT_CUSTOMREQUEST, method) == CURLE_OK;
  }
  if (!ok) {
    snprintf(err, errlen, "libcurl refused an option (libcurl %s)",
             curl_version_info(CURLVERSION_NOW)->version);
    goto exit;
  }

  rc = curl_easy_perform(g_curl);
  if (rc != CURLE_OK) {
    describe(rc, detail, &x, o, err, errlen);
    goto exit;
  }
  curl_easy_getinfo(g_curl, CURLINFO_RESPONSE_CODE, &status);
  if (curl_easy_getinfo(g_curl, CURLINFO_CONTENT_TYPE, &ctype) == CURLE_OK && ctype)
    snprintf(out->content_type, sizeof out->content_type, "%s", ctype);
  out->status = (int)status;
  out->next_offset = x.next_offset;
  out->body = rm__sbuf_take(&x.in, &out->len);
  ret = 0;
exit:
  if (g_curl) { /* the handle outlives this call: drop pointers into our stack */
    curl_easy_setopt(g_curl, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(g_curl, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(g_curl, CURLOPT_HEADERFUNCTION, NULL);
    curl_easy_setopt(g_curl, CURLOPT_HEADERDATA, NULL);
  }
  curl_slist_free_all(hdrs);
  rm__sbuf_free(&x.in);
  free(url);
  return ret;
}
