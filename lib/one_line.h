/* Error messages of one line: what they quote (paths, values, a file's text)
 * may hold any byte, so every control character of a message becomes '?'.
 * Used by the CLI (cpu/cli/io.c) and the trainer (experiments/trainer). */
#ifndef EXMY_ONE_LINE_H
#define EXMY_ONE_LINE_H

#include <stdarg.h>
#include <stdio.h>

/* Replaces each control character of s (below 0x20, and DEL) with '?'. */
static inline void exmy_one_line(char *s) {
  for (char *p = s; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
}

/* Prints "who: message" and a newline on stderr: the message formatted from
 * fmt and ap (at most 1023 bytes of it), as one line. */
static inline void exmy_vprint_line(const char *who, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static inline void exmy_vprint_line(const char *who, const char *fmt, va_list ap) {
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  exmy_one_line(msg);
  fprintf(stderr, "%s: %s\n", who, msg);
}

#endif /* EXMY_ONE_LINE_H */
