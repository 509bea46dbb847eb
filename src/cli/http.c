/* http.c — addresses, query strings and reason phrases for `weft serve` and `weft submit`
 * (http.h). */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/http.h"

/* Strict unsigned decimal: digits only, no sign, no spaces, at most `max`. */
static int parse_size(const char *s, size_t max, size_t *out) {
  if (*s == '\0') return -1;
  size_t v = 0;
  for (; *s; s++) {
    if (!isdigit((unsigned char)*s)) return -1;
    size_t d = (size_t)(*s - '0');
    if (v > (max - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

/* ---- addresses ---------------------------------------------------------------------------- */

int cli_addr_parse(const char *text, cli_addr *out, char *err, size_t err_size) {
  memset(out, 0, sizeof *out);
  if (strncmp(text, "unix:", 5) == 0) {
    const char *path = text + 5;
    if (*path == '\0') {
      snprintf(err, err_size, "'%s': the Unix socket path is empty", text);
      return -1;
    }
    if (strlen(path) >= sizeof out->path) {
      snprintf(err, err_size, "'%s': a Unix socket path is at most %zu bytes", text,
               sizeof out->path - 1);
      return -1;
    }
    out->is_unix = 1;
    snprintf(out->path, sizeof out->path, "%s", path);
    return 0;
  }
  const char *colon = strrchr(text, ':');
  if (colon == NULL || colon == text) {
    snprintf(err, err_size, "'%s' is not an address: use HOST:PORT (127.0.0.1:7878) or unix:PATH",
             text);
    return -1;
  }
  size_t hl = (size_t)(colon - text);
  const char *host = text;
  if (text[0] == '[') {
    if (hl < 3 || text[hl - 1] != ']') {
      snprintf(err, err_size, "'%s': an IPv6 address is written [ADDR]:PORT", text);
      return -1;
    }
    host = text + 1;
    hl -= 2;
    out->ipv6 = 1;
  }
  if (hl >= sizeof out->host) {
    snprintf(err, err_size, "'%s': the host is too long", text);
    return -1;
  }
  memcpy(out->host, host, hl);
  out->host[hl] = '\0';
  size_t port;
  if (parse_size(colon + 1, 65535, &port) != 0) {
    snprintf(err, err_size, "'%s': the port must be a number from 0 to 65535", text);
    return -1;
  }
  out->port = (int)port;
  if (!out->ipv6 && strcmp(out->host, "localhost") == 0)
    snprintf(out->host, sizeof out->host, "127.0.0.1");
  unsigned char bin[16];
  if (inet_pton(out->ipv6 ? AF_INET6 : AF_INET, out->host, bin) != 1) {
    snprintf(err, err_size, "'%s': '%s' is not a numeric IP%s address (or localhost)", text,
             out->host, out->ipv6 ? "v6" : "v4");
    return -1;
  }
  return 0;
}

int cli_addr_is_local(const cli_addr *a) {
  if (a->is_unix) return 1;
  unsigned char bin[16];
  if (a->ipv6) {
    static const unsigned char loop6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return inet_pton(AF_INET6, a->host, bin) == 1 && memcmp(bin, loop6, 16) == 0;
  }
  return inet_pton(AF_INET, a->host, bin) == 1 && bin[0] == 127;
}

void cli_addr_format(const cli_addr *a, char *buf, size_t size) {
  if (a->is_unix)
    snprintf(buf, size, "unix:%s", a->path);
  else if (a->ipv6)
    snprintf(buf, size, "[%s]:%d", a->host, a->port);
  else
    snprintf(buf, size, "%s:%d", a->host, a->port);
}

/* ---- query strings ------------------------------------------------------------------------ */

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Decodes p[0..n) into out (size bytes with its NUL). Returns 0 or -1. */
static int decode(const char *p, size_t n, char *out, size_t size, const char *what, char *err, size_t err_size) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (c == '+') {
      c = ' ';
    } else if (c == '%') {
      int hi = i + 2 < n ? hexval(p[i + 1]) : -1, lo = i + 2 < n ? hexval(p[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        snprintf(err, err_size, "the query's %s '%.*s' has a bad %%-escape", what, (int)(n < 60 ? n : 60), p);
        return -1;
      }
      c = (char)(hi << 4 | lo);
      i += 2;
    }
    if (c == '\0') {
      snprintf(err, err_size, "the query's %s '%.*s' holds a NUL", what, (int)(n < 60 ? n : 60), p);
      return -1;
    }
    if (k + 1 >= size) {
      snprintf(err, err_size, "the query's %s '%.*s...' is longer than %zu bytes", what, 40, p, size - 1);
      return -1;
    }
    out[k++] = c;
  }
  out[k] = '\0';
  return 0;
}

int cli_query_next(const char **q, const char *end, char *key, size_t key_size, char *value,
                   size_t value_size, char *err, size_t err_size) {
  const char *p = *q;
  while (p < end && *p == '&') p++;
  if (p >= end) {
    *q = end;
    return 0;
  }
  const char *amp = memchr(p, '&', (size_t)(end - p));
  if (amp == NULL) amp = end;
  const char *eq = memchr(p, '=', (size_t)(amp - p));
  const char *kend = eq != NULL ? eq : amp;
  *q = amp;
  if (decode(p, (size_t)(kend - p), key, key_size, "key", err, err_size) != 0) return -1;
  if (eq == NULL) {
    value[0] = '\0';
    return 1;
  }
  return decode(eq + 1, (size_t)(amp - eq - 1), value, value_size, "value", err, err_size) == 0 ? 1 : -1;
}

const char *cli_http_reason(int code) {
  switch (code) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}
