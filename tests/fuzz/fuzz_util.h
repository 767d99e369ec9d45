/*
 * Shared by the fuzz targets and their seed generators: the model the entry
 * target decodes against, and writing seed files.
 */
#ifndef HY_FUZZ_UTIL_H
#define HY_FUZZ_UTIL_H

#include "hy_model.h"

#include <stddef.h>

/* The "tiny" preset generated with a fixed seed, so that every run (and the
 * committed entry seeds) sees the same checkpoint and fingerprint: written
 * into a fresh temporary directory, opened, and the files removed again.
 * Prints why and returns non-zero on failure. */
int fuzz_tiny_open(hy_model **out);

/* Writes len bytes to dir/name, creating dir if needed; prints why and
 * returns non-zero on failure. */
int fuzz_write_seed(const char *dir, const char *name, const void *buf, size_t len);

#endif
