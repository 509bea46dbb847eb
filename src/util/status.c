/* status.c — status codes (from the X-macro list in weft.h) and per-thread error messages.
 *
 * The message of the last failing call lives in a thread-local buffer, so concurrent callers
 * never see each other's errors and no lock is needed. */
#include <stdio.h>
#include <string.h>

#include "util/util.h"

/* 16 KiB: a .weft parse reports every error of a file in one message (each with its source
 * line and caret), which 1 KiB cut short after two or three. */
static _Thread_local char last_error[16384];

const char *weft_strerror(int status) {
  switch (status) {
#define WEFT_STATUS_MSG(name, value, msg) \
  case (value):                           \
    return msg;
    WEFT_STATUS_MAP(WEFT_STATUS_MSG)
#undef WEFT_STATUS_MSG
    default:
      return "unknown status";
  }
}

const char *weft_status_name(int status) {
  switch (status) {
#define WEFT_STATUS_NAME(name, value, msg) \
  case (value):                            \
    return #name;
    WEFT_STATUS_MAP(WEFT_STATUS_NAME)
#undef WEFT_STATUS_NAME
    default:
      return "UNKNOWN";
  }
}

const char *weft_last_error(void) { return last_error; }

void weft__set_last_error(const char *msg) {
  if (msg != last_error) snprintf(last_error, sizeof last_error, "%s", msg);
}

int weft__verr(int status, const char *fmt, va_list ap) {
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  return status;
}

int weft__err(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  weft__verr(status, fmt, ap);
  va_end(ap);
  return status;
}

int weft__oom(const char *what) {
  return weft__err(WEFT_ENOMEM, "out of host memory while allocating %s", what);
}
