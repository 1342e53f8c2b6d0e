/*
 * UTF-8 encoding of a code point, for the parsers that decode escapes
 * (JSON's \u, XML's &#...;).
 */
#ifndef PRESTO_UTF8_H
#define PRESTO_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Writes cp (at most 0x10ffff, not a surrogate) as 1 to 4 bytes at out;
 * returns how many. */
static inline size_t utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

#endif
