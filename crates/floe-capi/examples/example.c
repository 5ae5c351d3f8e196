/* floe from C: count words with the u64 map, look a batch of keys up at once, walk the map,
 * and keep names in the byte-string map.
 *
 *   bash crates/floe-capi/install.sh --prefix "$HOME/.local"
 *   export PKG_CONFIG_PATH="$HOME/.local/lib/pkgconfig"
 *   cc crates/floe-capi/examples/example.c $(pkg-config --cflags --libs floe) \
 *      -Wl,-rpath,"$HOME/.local/lib" -o example && ./example
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floe.h"

/* Every call answers a status; negative ones are errors. */
static void check(FloeStatus status, const char *what) {
    if (status < 0) {
        fprintf(stderr, "%s: %s\n", what, floe_status_message(status));
        exit(1);
    }
}

/* floe_map_for_each's callback: sums the values into *context; 0 means "go on". */
static int32_t add_value(void *context, uint64_t key, uint64_t value) {
    (void)key;
    *(uint64_t *)context += value;
    return 0;
}

int main(void) {
    /* Zeroed options are floe's defaults; set only what differs. */
    FloeOptions options = {0};
    options.capacity = 1 << 16;
    options.seed = 42; /* 0 would draw a random seed */

    FloeMap *counts = NULL;
    check(floe_map_new(&options, &counts), "floe_map_new");

    /* fetch_add inserts the delta when the key is absent (FLOE_STATUS_ABSENT). */
    const uint64_t words[] = {3, 5, 3, 3, 8, 5};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        check(floe_map_fetch_add(counts, words[i], 1, NULL), "floe_map_fetch_add");
    }

    uint64_t value = 0;
    if (floe_map_get(counts, 3, &value) == FLOE_STATUS_OK) {
        printf("word 3 seen %llu times\n", (unsigned long long)value);
    }
    /* insert never overwrites: it reports the present value instead. */
    if (floe_map_insert_new(counts, 8, 100, &value) == FLOE_STATUS_PRESENT) {
        printf("word 8 was already there with %llu\n", (unsigned long long)value);
    }
    /* compare-exchange: 5 -> 50 only if its count is still 2. */
    check(floe_map_compare_exchange(counts, 5, 2, 50, &value), "floe_map_compare_exchange");

    /* A batch of gets: the lines of the next keys are fetched while earlier ones are read. */
    const uint64_t keys[] = {3, 4, 5, 8};
    uint64_t values[4];
    bool found[4];
    check(floe_map_get_many(counts, keys, 4, values, found, 4), "floe_map_get_many");
    for (size_t i = 0; i < 4; i++) {
        if (found[i]) {
            printf("key %llu -> %llu\n", (unsigned long long)keys[i], (unsigned long long)values[i]);
        } else {
            printf("key %llu absent\n", (unsigned long long)keys[i]);
        }
    }

    uint64_t total = 0;
    check(floe_map_for_each(counts, add_value, &total), "floe_map_for_each");
    printf("sum of the values: %llu\n", (unsigned long long)total);

    /* Free, then forget the handle: a second free and later calls are then harmless
     * (freeing the same non-NULL handle twice would be undefined behaviour). */
    check(floe_map_free(counts), "floe_map_free");
    counts = NULL;
    check(floe_map_free(counts), "floe_map_free(NULL)");
    if (floe_map_get(counts, 3, &value) == FLOE_STATUS_NULL_ARGUMENT) {
        printf("after free: %s\n", floe_status_message(FLOE_STATUS_NULL_ARGUMENT));
    }

    /* Byte strings: keys and values are copied in; gets copy out into your buffer. */
    FloeBytesMap *names = NULL;
    check(floe_bytes_new(NULL, &names), "floe_bytes_new");
    const char *key = "floe";
    const char *name = "a concurrent hash map";
    check(floe_bytes_insert(names, (const uint8_t *)key, strlen(key), (const uint8_t *)name,
                            strlen(name)),
          "floe_bytes_insert");
    char buffer[64];
    size_t len = sizeof buffer - 1;
    if (floe_bytes_get(names, (const uint8_t *)key, strlen(key), (uint8_t *)buffer, &len) ==
        FLOE_STATUS_OK) {
        buffer[len] = '\0';
        printf("%s: %s\n", key, buffer);
    }
    check(floe_bytes_free(names), "floe_bytes_free");
    names = NULL;
    return 0;
}
