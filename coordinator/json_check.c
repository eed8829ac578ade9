/*
 * json_check.c - a strict JSON validator for the results workers send.
 *
 * The coordinator has no JSON library by design (api/ links Jansson, the
 * coordinator does not), yet it stores what a worker's Leave call carries as
 * the job's result and api/ later hands it to Jansson. So the text is
 * checked here, structurally, before it is stored: whatever is in the
 * database parses with Jansson's default flags.
 *
 * Grammar (RFC 8259), recursive descent, one pass, no allocation:
 *
 *   text    = ws object ws                    (the top level MUST be an object)
 *   value   = object | array | string | number | "true" | "false" | "null"
 *   object  = '{' ws [ member *( ws ',' ws member ) ] ws '}'
 *   member  = string ws ':' ws value
 *   array   = '[' ws [ value *( ws ',' ws value ) ] ws ']'
 *   number  = [ '-' ] ( '0' | [1-9][0-9]* ) [ '.' [0-9]+ ] [ [eE] [+-] [0-9]+ ]
 *   string  = '"' *( unescaped | escape ) '"'
 *
 * Refused as well, because Jansson (default flags) refuses them: raw control
 * characters in strings, invalid UTF-8 (overlong forms, surrogates encoded
 * in UTF-8, code points above U+10FFFF, truncated sequences), "\u0000", and
 * a \u escape of a lone surrogate, an integer outside long long, a real
 * that overflows a double. Nesting deeper than RM__JSON_MAX_DEPTH is
 * refused so a hostile input cannot exhaust the stack.
 *
 * Top-level members are reported to a callback as raw spans (key without
 * its quotes, value as written), which is how result.c writes the figures of
 * a result in words and compares ranks' results, without decoding anything.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"

#define RM__JSON_MAX_DEPTH 32

typedef struct parser {
  const unsigned char *s;
  size_t n, i;
  int depth;
  const char *why;
} parser_t;

static int fail(parser_t *p, const char *why)
{
  if (!p->why) p->why = why;
  return -1;
}

static void ws(parser_t *p)
{
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' ||
                         p->s[p->i] == '\n' || p->s[p->i] == '\r'))
    p->i++;
}

static int peek(const parser_t *p) { return p->i < p->n ? p->s[p->i] : -1; }

static int hex4(parser_t *p, unsigned *out)
{
  unsigned v = 0;
  if (p->n - p->i < 4) return fail(p, "truncated \\u escape");
  for (int k = 0; k < 4; k++) {
    unsigned char ch = p->s[p->i++];
    v <<= 4;
    if (ch >= '0' && ch <= '9') v |= ch - '0';
    else if (ch >= 'a' && ch <= 'f') v |= ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'F') v |= ch - 'A' + 10;
    else return fail(p, "bad hex digit in \\u escape");
  }
  *out = v;
  return 0;
}

/* After the backslash. */
static int escape(parser_t *p)
{
  unsigned u, lo;
  if (p->i >= p->n) return fail(p, "truncated escape");
  switch (p->s[p->i++]) {
  case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
    return 0;
  case 'u':
    if (hex4(p, &u)) return -1;
    if (u == 0) return fail(p, "\\u0000 in a string");
    if (u >= 0xDC00 && u <= 0xDFFF) return fail(p, "lone low surrogate");
    if (u < 0xD800 || u > 0xDBFF) return 0;
    if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
      return fail(p, "high surrogate without its low half");
    p->i += 2;
    if (hex4(p, &lo)) return -1;
    if (lo < 0xDC00 || lo > 0xDFFF) return fail(p, "high surrogate without its low half");
    return 0;
  default:
    return fail(p, "unknown escape");
  }
}

/* One UTF-8 sequence starting with a byte >= 0x80. */
static int utf8(parser_t *p)
{
  unsigned char b = p->s[p->i++];
  unsigned cp, min;
  int more;
  if (b >= 0xC2 && b <= 0xDF) more = 1, cp = b & 0x1F, min = 0x80;
  else if (b >= 0xE0 && b <= 0xEF) more = 2, cp = b & 0x0F, min = 0x800;
  else if (b >= 0xF0 && b <= 0xF4) more = 3, cp = b & 0x07, min = 0x10000;
  else return fail(p, "invalid UTF-8");
  if (p->n - p->i < (size_t)more) return fail(p, "truncated UTF-8 sequence");
  for (int k = 0; k < more; k++) {
    unsigned char ch = p->s[p->i++];
    if ((ch & 0xC0) != 0x80) return fail(p, "invalid UTF-8");
    cp = (cp << 6) | (ch & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return fail(p, "invalid UTF-8 code point");
  return 0;
}

static int string(parser_t *p)
{
  if (peek(p) != '"') return fail(p, "expected a string");
  p->i++;
  while (p->i < p->n) {
    unsigned char ch = p->s[p->i];
    if (ch == '"') {
      p->i++;
      return 0;
    }
    if (ch < 0x20) return fail(p, "control character in a string");
    if (ch == '\\') {
      p->i++;
      if (escape(p)) return -1;
    } else if (ch >= 0x80) {
      if (utf8(p)) return -1;
    } else {
      p->i++;
    }
  }
  return fail(p, "unterminated string");
}

static int digits(parser_t *p)
{
  size_t start = p->i;
  while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
  return p->i > start ? 0 : fail(p, "expected a digit");
}

/* Jansson keeps integers in long long and reals in double: an integer
 * outside long long or a real that overflows to infinity is an error there,
 * so it is one here (a real that underflows to 0 is accepted by both). */
static int number_range(parser_t *p, size_t start, int is_real)
{
  char buf[512];
  size_t len = p->i - start;
  if (len >= sizeof buf) return fail(p, "number too long");
  memcpy(buf, p->s + start, len);
  buf[len] = '\0';
  errno = 0;
  if (!is_real) {
    (void)strtoll(buf, NULL, 10);
    if (errno == ERANGE) return fail(p, "integer out of range");
  } else {
    double v = strtod(buf, NULL);
    if (errno == ERANGE && (v == HUGE_VAL || v == -HUGE_VAL))
      return fail(p, "real number overflow");
  }
  return 0;
}

static int number(parser_t *p)
{
  size_t start = p->i;
  int is_real = 0;
  if (peek(p) == '-') p->i++;
  if (peek(p) == '0') p->i++;
  else if (peek(p) >= '1' && peek(p) <= '9') digits(p);
  else return fail(p, "bad number");
  if (peek(p) == '.') {
    p->i++;
    is_real = 1;
    if (digits(p)) return -1;
  }
  if (peek(p) == 'e' || peek(p) == 'E') {
    p->i++;
    is_real = 1;
    if (peek(p) == '+' || peek(p) == '-') p->i++;
    if (digits(p)) return -1;
  }
  return number_range(p, start, is_real);
}

static int literal(parser_t *p, const char *word)
{
  size_t len = strlen(word);
  if (p->n - p->i < len || memcmp(p->s + p->i, word, len) != 0)
    return fail(p, "unexpected character");
  p->i += len;
  return 0;
}

static int value(parser_t *p);

static int array(parser_t *p)
{
  p->i++; /* '[' */
  if (++p->depth > RM__JSON_MAX_DEPTH) return fail(p, "nested too deeply");
  ws(p);
  if (peek(p) == ']') goto close;
  for (;;) {
    if (value(p)) return -1;
    ws(p);
    if (peek(p) == ']') break;
    if (peek(p) != ',') return fail(p, "expected ',' or ']'");
    p->i++;
    ws(p);
  }
close:
  p->i++;
  p->depth--;
  return 0;
}

/* top: report members to cb. */
static int object(parser_t *p, rm__json_member_cb cb, void *ctx)
{
  p->i++; /* '{' */
  if (++p->depth > RM__JSON_MAX_DEPTH) return fail(p, "nested too deeply");
  ws(p);
  if (peek(p) == '}') goto close;
  for (;;) {
    size_t key = p->i, val;
    if (string(p)) return -1;
    size_t key_end = p->i;
    ws(p);
    if (peek(p) != ':') return fail(p, "expected ':'");
    p->i++;
    ws(p);
    val = p->i;
    if (value(p)) return -1;
    if (cb)
      cb(ctx, (const char *)p->s + key + 1, key_end - key - 2,
         (const char *)p->s + val, p->i - val);
    ws(p);
    if (peek(p) == '}') break;
    if (peek(p) != ',') return fail(p, "expected ',' or '}'");
    p->i++;
    ws(p);
  }
close:
  p->i++;
  p->depth--;
  return 0;
}

static int value(parser_t *p)
{
  int ch = peek(p);
  if (ch == '{') return object(p, NULL, NULL);
  if (ch == '[') return array(p);
  if (ch == '"') return string(p);
  if (ch == '-' || (ch >= '0' && ch <= '9')) return number(p);
  if (ch == 't') return literal(p, "true");
  if (ch == 'f') return literal(p, "false");
  if (ch == 'n') return literal(p, "null");
  return fail(p, ch < 0 ? "unexpected end" : "unexpected character");
}

int rm__json_check_object(const char *s, size_t n, rm__json_member_cb cb,
                          void *ctx, size_t *at, const char **why)
{
  parser_t p = {(const unsigned char *)s, n, 0, 0, NULL};
  int rc = -1;
  ws(&p);
  if (peek(&p) != '{') {
    fail(&p, "not a JSON object");
    goto exit;
  }
  if (object(&p, cb, ctx)) goto exit;
  ws(&p);
  if (p.i != p.n) {
    fail(&p, "text after the object");
    goto exit;
  }
  rc = 0;
exit:
  if (rc) {
    if (at) *at = p.i;
    if (why) *why = p.why;
  }
  return rc;
}
