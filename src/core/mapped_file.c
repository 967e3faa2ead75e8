/* mapped_file.c — mmap a file read-only, falling back to read() into the heap
 * (pipes, filesystems without mmap). */
#define _GNU_SOURCE
#include "mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static rf_status rf_read_all(int fd, const char *path, rf_mapped_file *out) {
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    if (!buf) return rf_set_error(RF_ERR_OOM, "out of memory reading '%s'", path);
    for (;;) {
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return rf_set_error(RF_ERR_OOM, "out of memory reading '%s'", path);
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(buf);
            return rf_set_error(RF_ERR_IO, "cannot read '%s': %s", path, strerror(e));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    out->data = n ? buf : NULL;
    if (!n) free(buf);
    out->size = n;
    out->is_mmap = 0;
    return RF_OK;
}

rf_status rf_mapped_file_open(const char *path, rf_mapped_file *out) {
    memset(out, 0, sizeof *out);
    if (!path) return rf_set_error(RF_ERR_INVALID_ARG, "no file path given");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rf_set_error(RF_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return rf_set_error(RF_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return rf_set_error(RF_ERR_IO, "'%s' is a directory, not a file", path);
    }
    rf_status rc = RF_OK;
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p != MAP_FAILED) {
            out->data = p;
            out->size = (size_t)st.st_size;
            out->is_mmap = 1;
            close(fd);
            return RF_OK;
        }
    }
    rc = rf_read_all(fd, path, out);
    close(fd);
    return rc;
}

void rf_mapped_file_close(rf_mapped_file *f) {
    if (!f || !f->data) return;
    if (f->is_mmap) munmap((void *)f->data, f->size);
    else free((void *)f->data);
    f->data = NULL;
    f->size = 0;
}
