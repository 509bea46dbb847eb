/* proto.c — parsing of the serve protocol's request header and response line, and of
 * addresses (see proto.h for the grammar). Pure functions over buffers: no sockets, no
 * allocation, so the server's event loop and the blocking client share them and the tests
 * can feed them anything. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/proto.h"

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

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
  return s;
}

long cli_proto_parse_request(char *buf, size_t len, cli_request *req, char *err,
                             size_t err_size) {
  /* Find the end of the header: an empty line. */
  size_t scan = len < CLI_PROTO_MAX_HEADER ? len : CLI_PROTO_MAX_HEADER;
  size_t end = 0;
  int found = 0;
  for (size_t i = 0; i < scan; i++) {
    if (buf[i] == '\0') {
      snprintf(err, err_size, "malformed request: a NUL byte in the header");
      return -1;
    }
    if (buf[i] != '\n') continue;
    if (i == 0) break; /* an empty first line: reported below */
    if (buf[i - 1] == '\n' || (buf[i - 1] == '\r' && i >= 2 && buf[i - 2] == '\n')) {
      end = i + 1;
      found = 1;
      break;
    }
  }
  /* Refuse a wrong first line as soon as enough bytes have come to tell (a newline or a NUL
   * among the first 7 bytes mismatches too). */
  if (strncmp(buf, "SUBMIT ", len < 7 ? len : 7) != 0) {
    snprintf(err, err_size, "malformed request: expected 'SUBMIT <length>' on the first line");
    return -1;
  }
  if (!found) {
    if (len >= CLI_PROTO_MAX_HEADER) {
      snprintf(err, err_size, "malformed request: the header is longer than %d bytes",
               CLI_PROTO_MAX_HEADER);
      return -1;
    }
    return 0;
  }
  memset(req, 0, sizeof *req);
  req->repeat = 1;
  req->json = 1;
  /* Split into NUL-terminated lines (dropping "\r"). */
  char *p = buf, *stop = buf + end;
  int lineno = 0;
  while (p < stop) {
    char *eol = memchr(p, '\n', (size_t)(stop - p));
    *eol = '\0';
    if (eol > p && eol[-1] == '\r') eol[-1] = '\0';
    char *line = p;
    p = eol + 1;
    lineno++;
    if (*line == '\0') break; /* the empty line */
    if (lineno == 1) {
      char *num = trim(line + 7);
      if (parse_size(num, (size_t)1 << 62, &req->length) != 0) {
        snprintf(err, err_size, "malformed request: '%.40s' is not a length in bytes", num);
        return -1;
      }
      continue;
    }
    char *colon = strchr(line, ':');
    if (colon == NULL) {
      snprintf(err, err_size, "malformed request: header line %d '%.60s' has no ':'", lineno,
               line);
      return -1;
    }
    *colon = '\0';
    char *key = trim(line), *val = trim(colon + 1);
    if (strcasecmp(key, "Name") == 0) {
      req->name = val;
    } else if (strcasecmp(key, "Define") == 0) {
      if (req->ndefines == CLI_PROTO_MAX_DEFINES) {
        snprintf(err, err_size, "malformed request: more than %d Define headers",
                 CLI_PROTO_MAX_DEFINES);
        return -1;
      }
      if (strchr(val, '=') == NULL || val[0] == '=') {
        snprintf(err, err_size, "malformed request: Define expects NAME=VALUE, not '%.60s'", val);
        return -1;
      }
      req->defines[req->ndefines++] = val;
    } else if (strcasecmp(key, "Device") == 0) {
      req->device = val;
    } else if (strcasecmp(key, "Repeat") == 0) {
      size_t r;
      if (parse_size(val, 1000000000, &r) != 0 || r == 0) {
        snprintf(err, err_size, "malformed request: Repeat expects a positive integer, not '%.40s'",
                 val);
        return -1;
      }
      req->repeat = (long)r;
    } else if (strcasecmp(key, "Format") == 0) {
      if (strcasecmp(val, "json") == 0)
        req->json = 1;
      else if (strcasecmp(val, "text") == 0)
        req->json = 0;
      else {
        snprintf(err, err_size, "malformed request: Format is json or text, not '%.40s'", val);
        return -1;
      }
    } else {
      snprintf(err, err_size, "malformed request: unknown header '%.40s'", key);
      return -1;
    }
  }
  return (long)end;
}

int cli_proto_parse_result(const char *line, int *exit_code, char *status, size_t status_size,
                           size_t *out_len, size_t *err_len) {
  char word[32], a[32], b[32];
  int code, used = 0;
  if (sscanf(line, "RESULT %d %31s %31s %31s%n", &code, word, a, b, &used) != 4) return -1;
  if (line[used] != '\0' || code < 0 || code > 255) return -1;
  if (parse_size(a, (size_t)1 << 40, out_len) != 0 || parse_size(b, (size_t)1 << 40, err_len) != 0)
    return -1;
  *exit_code = code;
  snprintf(status, status_size, "%s", word);
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
