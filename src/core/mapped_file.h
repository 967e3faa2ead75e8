/* mapped_file.h — read-only view of a whole file: mmap, or a heap copy where mmap fails. */
#ifndef RF_MAPPED_FILE_H
#define RF_MAPPED_FILE_H

#include "rocmforge/core.h"

typedef struct rf_mapped_file {
    const void *data;
    size_t size;
    int is_mmap; /* 1: munmap on close; 0: free on close */
} rf_mapped_file;

/* Maps `path` read-only. Errors: RF_ERR_IO naming the path and the OS reason, RF_ERR_OOM.
 * An empty file maps to data == NULL, size == 0. */
rf_status rf_mapped_file_open(const char *path, rf_mapped_file *out);
void rf_mapped_file_close(rf_mapped_file *f);

#endif
