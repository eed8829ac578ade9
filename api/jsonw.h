/*
 * jsonw.h - a small streaming JSON writer over rm__sbuf_t, for the hot
 * paths (job list and job get answer hundreds of objects per request:
 * building Jansson trees and dumping them cost more than everything else
 * together, mostly malloc/free).
 *
 * The caller writes the punctuation ('{', ',', ...) and these write values:
 *
 *   rm__jw_key(b, "id");  rm__jw_u64(b, 7);  sbuf_append(b, ",", 1); ...
 *
 * Strings are escaped as RFC 8259 requires ('"', '\\', control characters
 * as \b \f \n \r \t or \u00XX); UTF-8 is written as is. A string that is not
 * valid UTF-8 (overlong forms, surrogates, > U+10FFFF, truncated sequences)
 * is written with every byte >= 0x80 replaced by '?', as rm__json_str does
 * for Jansson, so any worker-supplied bytes still give valid JSON.
 */
#ifndef RM_API_JSONW_H
#define RM_API_JSONW_H

#include <stdint.h>

#include "sbuf.h"

/* "key": (key must need no escaping: a literal from our code). */
void rm__jw_key(rm__sbuf_t *b, const char *key);
/* A JSON string of s (NUL-terminated). */
void rm__jw_str(rm__sbuf_t *b, const char *s);
void rm__jw_u64(rm__sbuf_t *b, uint64_t v);
void rm__jw_i64(rm__sbuf_t *b, int64_t v);
/* 1 when s[0..n) is valid UTF-8 (what Jansson's json_string accepts). */
int rm__jw_utf8_valid(const char *s, size_t n);

#endif
