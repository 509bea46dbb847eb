/* http.h — what `weft serve` and `weft submit` share besides HTTP itself (the server parses
 * requests with http-parser, the client speaks through libcurl): the listen/connect addresses,
 * query strings and the reason phrase of a status code. The API is specified for users in
 * docs/cli.md ("The HTTP API"). Pure functions over buffers: no sockets, no allocation, so the
 * tests can feed them anything. */
#ifndef WEFT_CLI_HTTP_H
#define WEFT_CLI_HTTP_H

#include <stddef.h>

/* ---- addresses ---------------------------------------------------------------------------- */

typedef struct cli_addr {
  int is_unix;
  char host[64];  /* the literal address (no brackets), TCP only */
  int port;       /* TCP only; 0 lets the system choose (serve) */
  int ipv6;
  char path[108]; /* unix only */
} cli_addr;

/* Parses "HOST:PORT", "[IPv6]:PORT", "localhost:PORT" or "unix:/path". Returns 0, or -1 with
 * the reason in err. */
int cli_addr_parse(const char *text, cli_addr *out, char *err, size_t err_size);
/* 1 if the address is loopback (127.0.0.0/8, ::1) or a Unix socket. */
int cli_addr_is_local(const cli_addr *a);
/* Writes "127.0.0.1:7878", "[::1]:7878" or "unix:/path". */
void cli_addr_format(const cli_addr *a, char *buf, size_t size);

/* ---- query strings ------------------------------------------------------------------------ */

/* Reads the next KEY=VALUE pair of the query string at *q (after the '?', pairs separated by
 * '&'), percent-decoded ('+' is a space) into key and value (a pair without '=' has an empty
 * value), and advances *q. Returns 1 for a pair, 0 at the end, -1 for a malformed one (a bad
 * escape, a NUL, or a key or value longer than its buffer), with the reason in err. */
int cli_query_next(const char **q, const char *end, char *key, size_t key_size, char *value,
                   size_t value_size, char *err, size_t err_size);

/* The reason phrase of an HTTP status code ("OK", "Not Found", ...; "Unknown" otherwise). */
const char *cli_http_reason(int code);

#endif
