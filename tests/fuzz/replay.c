/*
 * Runs a fuzz target over files without libFuzzer: every file named, and
 * every file inside each directory named (not recursive), in name order.
 * This is how the committed corpus - seeds and the reproducer of every
 * defect fuzzing found - runs in every build, with or without sanitizers.
 *
 * usage: fuzz_replay_<target> FILE_OR_DIR...
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        if (got == 0)
            break;
        len += got;
    }
    fclose(f);
    /* An exact-size copy, so that ASan sees a read past the input's end. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, len);
    free(buf);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    int files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            return 2;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad += run_file(argv[i]) != 0;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d)
            return 2;
        char **names = NULL;
        size_t n = 0, cap = 0;
        for (struct dirent *de; (de = readdir(d));) {
            if (de->d_name[0] == '.' || strcmp(de->d_name, "README.md") == 0)
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                char **nn = realloc(names, cap * sizeof *names);
                if (!nn)
                    return 2;
                names = nn;
            }
            size_t len = strlen(argv[i]) + strlen(de->d_name) + 2;
            names[n] = malloc(len);
            if (!names[n])
                return 2;
            snprintf(names[n], len, "%s/%s", argv[i], de->d_name);
            n++;
        }
        closedir(d);
        qsort(names, n, sizeof *names, by_name);
        for (size_t k = 0; k < n; k++) {
            if (stat(names[k], &st) == 0 && S_ISREG(st.st_mode)) {
                bad += run_file(names[k]) != 0;
                files++;
            }
            free(names[k]);
        }
        free(names);
    }
    printf("replay: %d files, %d unreadable\n", files, bad);
    return bad || files == 0 ? 1 : 0;
}
