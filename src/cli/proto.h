/* proto.h — the wire protocol between `weft serve` and its clients (`weft submit`), and the
 * listen/connect addresses both take. Specified for users in docs/cli.md ("The serve
 * protocol"); this is the code both ends share.
 *
 *   request   SUBMIT <length>\n            the first line; <length> bytes of .weft follow
 *             Name: <file name>\n          optional headers, one per line, names in any case
 *             Define: NAME=VALUE\n         (repeatable)
 *             Device: cuda:0\n
 *             Repeat: 3\n
 *             Format: json | text\n
 *             \n                           an empty line ends the header
 *             <length bytes of source>
 *
 *   response  RESULT <exit> <status> <out_length> <err_length>\n
 *             <out_length bytes: what `weft run` would print on standard output>
 *             <err_length bytes: what it would print on standard error>
 *
 * Lines end with "\n" or "\r\n". A connection carries any number of requests, one after the
 * other; each gets its response in order. */
#ifndef WEFT_CLI_PROTO_H
#define WEFT_CLI_PROTO_H

#include <stddef.h>

/* The most a request's header (first line and header lines) may take. */
#define CLI_PROTO_MAX_HEADER 65536
/* The most Define headers one request may carry. */
#define CLI_PROTO_MAX_DEFINES 256

typedef struct cli_request {
  size_t length;         /* bytes of source that follow the header */
  char *name;            /* Name, or NULL; points into the header buffer */
  const char *defines[CLI_PROTO_MAX_DEFINES];
  int ndefines;
  char *device;          /* Device, or NULL */
  long repeat;           /* Repeat, or 1 */
  int json;              /* Format: 1 json (the default), 0 text */
} cli_request;

/* Looks for a complete header at the start of buf[0..len). Returns:
 *   > 0  the header's size in bytes (the source starts there); *req is filled, with strings
 *        pointing into buf, which is modified (lines are NUL-terminated in place);
 *   0    not complete yet: read more (len is still below CLI_PROTO_MAX_HEADER);
 *   < 0  malformed: a message saying what is wrong is in err. */
long cli_proto_parse_request(char *buf, size_t len, cli_request *req, char *err,
                             size_t err_size);

/* Parses a response line "RESULT <exit> <status> <out> <err>" (without its newline). Returns
 * 0 or -1 if the line is not one. `status` receives at most status_size - 1 characters. */
int cli_proto_parse_result(const char *line, int *exit_code, char *status, size_t status_size,
                           size_t *out_len, size_t *err_len);

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

#endif
