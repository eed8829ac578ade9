/*
 * jsonw.c - streaming JSON writer (contract in jsonw.h).
 *
 * rm__jw_str scans the string once for bytes that need escaping; runs of
 * plain bytes are appended with one memcpy each, so a typical name or
 * message costs one reserve + one copy.
 */
#include <string.h>

#include "jsonw.h"

void rm__jw_key(rm__sbuf_t *b, const char *key)
{
  size_t n = strlen(key);
  char tmp[64];
  if (n + 3 > sizeof tmp) {
    rm__jw_str(b, key);
    rm__sbuf_append(b, ":", 1);
    return;
  }
  tmp[0] = '"';
  memcpy(tmp + 1, key, n);
  tmp[n + 1] = '"';
  tmp[n + 2] = ':';
  rm__sbuf_append(b, tmp, n + 3);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when it is not. */
static size_t utf8_seq(const unsigned char *s, size_t left)
{
  unsigned c = s[0], cp;
  size_t n;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0; /* continuation byte, overlong 0xC0/0xC1, > 0xF4 */
  if (n > left) return 0;
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

int rm__jw_utf8_valid(const char *s, size_t n)
{
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    size_t k = utf8_seq(p + i, n - i);
    if (k == 0) return 0;
    i += k;
  }
  return 1;
}

static const char *escape_of(unsigned char c, char *tmp)
{
  static const char hex[] = "0123456789ABCDEF";
  switch (c) {
  case '"': return "\\\"";
  case '\\': return "\\\\";
  case '\b': return "\\b";
  case '\f': return "\\f";
  case '\n': return "\\n";
  case '\r': return "\\r";
  case '\t': return "\\t";
  default:
    memcpy(tmp, "\\u00", 4);
    tmp[4] = hex[c >> 4];
    tmp[5] = hex[c & 15];
    tmp[6] = '\0';
    return tmp;
  }
}

void rm__jw_str(rm__sbuf_t *b, const char *s)
{
  size_t n = strlen(s), run = 0;
  int valid = rm__jw_utf8_valid(s, n);
  char tmp[8];

  rm__sbuf_append(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\' && (valid || c < 0x80)) continue;
    rm__sbuf_append(b, s + run, i - run);
    run = i + 1;
    if (c >= 0x80) rm__sbuf_append(b, "?", 1);
    else rm__sbuf_puts(b, escape_of(c, tmp));
  }
  rm__sbuf_append(b, s + run, n - run);
  rm__sbuf_append(b, "\"", 1);
}

void rm__jw_u64(rm__sbuf_t *b, uint64_t v)
{
  char tmp[24];
  size_t i = sizeof tmp;
  do {
    tmp[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  rm__sbuf_append(b, tmp + i, sizeof tmp - i);
}

void rm__jw_i64(rm__sbuf_t *b, int64_t v)
{
  if (v < 0) {
    rm__sbuf_append(b, "-", 1);
    rm__jw_u64(b, (uint64_t)0 - (uint64_t)v);
  } else {
    rm__jw_u64(b, (uint64_t)v);
  }
}
