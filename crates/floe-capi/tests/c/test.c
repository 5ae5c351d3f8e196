/* The C ABI from C: every entry point's answers, bad input answered with error codes, a
 * concurrent count from several threads, and the byte-string map. Built and run by
 * ci/capi.sh (with AddressSanitizer and UndefinedBehaviorSanitizer); prints one line per
 * failed check and "N passed, N failed" at the end, and exits nonzero on a failure. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floe.h"

static int passed, failed;

#define CHECK(condition)                                                       \
    do {                                                                       \
        if (condition) {                                                       \
            passed++;                                                          \
        } else {                                                               \
            failed++;                                                          \
            fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #condition); \
        }                                                                      \
    } while (0)

#define CHECK_STATUS(call, expected)                                           \
    do {                                                                       \
        FloeStatus got_ = (call);                                              \
        if (got_ == (expected)) {                                              \
            passed++;                                                          \
        } else {                                                               \
            failed++;                                                          \
            fprintf(stderr, "%s:%d: %s: got %d (%s), expected %s\n", __FILE__, __LINE__, \
                    #call, (int)got_, floe_status_message(got_), #expected);   \
        }                                                                      \
    } while (0)

static FloeMap *new_map(size_t capacity, uint64_t seed) {
    FloeOptions options = {0};
    options.capacity = capacity;
    options.seed = seed;
    FloeMap *map = NULL;
    CHECK_STATUS(floe_map_new(&options, &map), FLOE_STATUS_OK);
    CHECK(map != NULL);
    return map;
}

static void single_key_calls(void) {
    FloeMap *map = new_map(1024, 1);
    uint64_t v = 0;
    size_t len = 99;
    CHECK_STATUS(floe_map_len(map, &len), FLOE_STATUS_OK);
    CHECK(len == 0);
    CHECK_STATUS(floe_map_get(map, 1, &v), FLOE_STATUS_ABSENT);
    CHECK_STATUS(floe_map_insert_new(map, 1, 10, &v), FLOE_STATUS_OK);
    CHECK_STATUS(floe_map_insert_new(map, 1, 11, &v), FLOE_STATUS_PRESENT);
    CHECK(v == 10);
    CHECK_STATUS(floe_map_get(map, 1, &v), FLOE_STATUS_OK);
    CHECK(v == 10);
    CHECK_STATUS(floe_map_get(map, 1, NULL), FLOE_STATUS_OK);
    CHECK_STATUS(floe_map_insert(map, 1, 12, &v), FLOE_STATUS_OK);
    CHECK(v == 10);
    CHECK_STATUS(floe_map_insert(map, 2, 20, NULL), FLOE_STATUS_ABSENT);
    CHECK_STATUS(floe_map_put(map, 3, 30, &v), FLOE_STATUS_ABSENT);
    CHECK_STATUS(floe_map_get(map, 3, NULL), FLOE_STATUS_ABSENT);
    CHECK_STATUS(floe_map_put(map, 2, 21, &v), FLOE_STATUS_OK);
    CHECK(v == 20);
    CHECK_STATUS(floe_map_fetch_add(map, 4, 5, &v), FLOE_STATUS_ABSENT);
    CHECK_STATUS(floe_map_fetch_add(map, 4, UINT64_MAX, &v), FLOE_STATUS_OK);
    CHECK(v == 5);
    CHECK_STATUS(floe_map_get(map, 4, &v), FLOE_STATUS_OK);
    CHECK(v == 4); /* wrapped */
    CHECK_STATUS(floe_map_compare_exchange(map, 4, 3, 7, &v), FLOE_STATUS_MISMATCH);
    CHECK(v == 4);
    CHECK_STATUS(floe_map_compare_exchange(map, 4, 4, 7, &v), FLOE_STATUS_OK);
    CHECK_STATUS(floe_map_compare_exchange(map, 9, 0, 1, &v), FLOE_STATUS_ABSENT);
    CHECK_STATUS(floe_map_len(map, &len), FLOE_STATUS_OK);
    CHECK(len == 3);
    CHECK_STATUS(floe_map_remove(map, 4, &v), FLOE_STATUS_OK);
    CHECK(v == 7);
    CHECK_STATUS(floe_map_remove(map, 4, &v), FLOE_STATUS_ABSENT);
    /* Every 64-bit key is a key, 0 and UINT64_MAX included. */
    CHECK_STATUS(floe_map_insert_new(map, 0, 1, NULL), FLOE_STATUS_OK);
    CHECK_STATUS(floe_map_insert_new(map, UINT64_MAX, 2, NULL), FLOE_STATUS_OK);
    CHECK_STATUS(floe_map_get(map, UINT64_MAX, &v), FLOE_STATUS_OK);
    CHECK(v == 2);
    CHECK_STATUS(floe_map_free(map), FLOE_STATUS_OK);
}

static void bad_input(void) {
    FloeMap *none = NULL;
    uint64_t v = 0;
    size_t len = 0;
    CHECK_STATUS(floe_map_new(NULL, NULL), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_map_get(none, 1, &v), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_map_insert_new(none, 1, 1, NULL), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_map_insert(none, 1, 1, NULL), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_map_put(none, 1, 1, NULL), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_map_fetch_add(none, 1, 1, NULL), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_map_compare_exchange(none, 1, 1, 2, NULL), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_map_remove(none, 1, NULL), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_map_len(none, &len), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_map_free(NULL), FLOE_STATUS_OK);

    /* Options out of range leave a NULL handle. */
    FloeOptions options = {0};
    FloeMap *map = (FloeMap *)&options; /* any non-NULL pointer: it must be overwritten */
    options.backend = 42;
    CHECK_STATUS(floe_map_new(&options, &map), FLOE_STATUS_INVALID_OPTION);
    CHECK(map == NULL);
    options.backend = FLOE_BACKEND_AUTO;
    options.resize_mode = 7;
    CHECK_STATUS(floe_map_new(&options, &map), FLOE_STATUS_INVALID_OPTION);
    options.resize_mode = FLOE_RESIZE_MODE_BLOCKING;
    options.batch_depth = 1000;
    CHECK_STATUS(floe_map_new(&options, &map), FLOE_STATUS_INVALID_OPTION);
    options.batch_depth = 0;
    options.capacity = SIZE_MAX;
    CHECK_STATUS(floe_map_new(&options, &map), FLOE_STATUS_CAPACITY_OVERFLOW);
    CHECK(map == NULL);

    map = new_map(0, 0);
    CHECK_STATUS(floe_map_len(map, NULL), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_map_for_each(map, NULL, NULL), FLOE_STATUS_NULL_ARGUMENT);
    uint64_t keys[3] = {1, 2, 3}, values[3];
    bool found[3];
    CHECK_STATUS(floe_map_get_many(map, keys, 0, values, found, 0), FLOE_STATUS_EMPTY_BATCH);
    CHECK_STATUS(floe_map_get_many(map, NULL, 0, NULL, NULL, 0), FLOE_STATUS_EMPTY_BATCH);
    CHECK_STATUS(floe_map_get_many(map, keys, 3, values, found, 2), FLOE_STATUS_LENGTH_MISMATCH);
    CHECK_STATUS(floe_map_get_many(map, NULL, 3, values, found, 3), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_map_get_many(map, keys, 3, NULL, found, 3), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_map_get_many(map, keys, 3, values, NULL, 3), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_map_get_many(none, keys, 3, values, found, 3), FLOE_STATUS_NULL_ARGUMENT);
    FloeRequest requests[2] = {{FLOE_OP_INSERT_NEW, 1, 1}, {99, 2, 2}};
    FloeResponse responses[2];
    CHECK_STATUS(floe_map_run(map, requests, 0, responses, 0), FLOE_STATUS_EMPTY_BATCH);
    CHECK_STATUS(floe_map_run(map, requests, 2, responses, 1), FLOE_STATUS_LENGTH_MISMATCH);
    CHECK_STATUS(floe_map_run(map, requests, 2, NULL, 2), FLOE_STATUS_NULL_ARGUMENT);
    /* An unknown op refuses the whole batch before anything runs: key 1 stays absent. */
    CHECK_STATUS(floe_map_run(map, requests, 2, responses, 2), FLOE_STATUS_INVALID_ARGUMENT);
    CHECK_STATUS(floe_map_get(map, 1, NULL), FLOE_STATUS_ABSENT);

    /* The NULL-after-free pattern. */
    CHECK_STATUS(floe_map_free(map), FLOE_STATUS_OK);
    map = NULL;
    CHECK_STATUS(floe_map_free(map), FLOE_STATUS_OK);
    CHECK_STATUS(floe_map_get(map, 1, &v), FLOE_STATUS_NULL_ARGUMENT);

    /* Every code has words; unknown ones too. */
    for (int code = -12; code <= 4; code++) {
        CHECK(strcmp(floe_status_message(code), "unknown floe status") != 0);
    }
    CHECK(strcmp(floe_status_message(12345), "unknown floe status") == 0);
}

static void capped_map_answers_full(void) {
    FloeOptions options = {0};
    options.capacity = 64;
    options.max_bins = 1; /* no growth at all */
    FloeMap *map = NULL;
    CHECK_STATUS(floe_map_new(&options, &map), FLOE_STATUS_OK);
    size_t full = 0;
    int unexpected = 0;
    for (uint64_t key = 0; key < 10000; key++) {
        FloeStatus status = floe_map_insert_new(map, key, key, NULL);
        if (status == FLOE_STATUS_FULL) {
            full++;
        } else if (status != FLOE_STATUS_OK) {
            unexpected++;
        }
    }
    size_t len = 0;
    CHECK_STATUS(floe_map_len(map, &len), FLOE_STATUS_OK);
    CHECK(unexpected == 0);
    CHECK(full > 0);
    CHECK(len + full == 10000);
    CHECK_STATUS(floe_map_fetch_add(map, 1000000, 1, NULL), FLOE_STATUS_FULL);
    floe_map_free(map);
}

static void batches(void) {
    enum { N = 1000 };
    FloeMap *map = new_map(N, 3);
    static FloeRequest requests[2 * N];
    static FloeResponse responses[2 * N];
    for (uint64_t i = 0; i < N; i++) {
        requests[i] = (FloeRequest){FLOE_OP_INSERT_NEW, i, i * 3};
    }
    /* Then one request of every kind, round robin, on keys half of which are present. */
    const uint32_t ops[] = {FLOE_OP_GET, FLOE_OP_INSERT, FLOE_OP_PUT, FLOE_OP_FETCH_ADD,
                            FLOE_OP_REMOVE, FLOE_OP_INSERT_NEW};
    for (uint64_t i = 0; i < N; i++) {
        requests[N + i] = (FloeRequest){ops[i % 6], i + N / 2, 1};
    }
    CHECK_STATUS(floe_map_run(map, requests, 2 * N, responses, 2 * N), FLOE_STATUS_OK);
    int wrong = 0;
    for (uint64_t i = 0; i < N; i++) {
        wrong += responses[i].status != FLOE_STATUS_OK;
    }
    for (uint64_t i = 0; i < N; i++) {
        uint64_t key = i + N / 2;
        int present = key < N;
        FloeResponse r = responses[N + i];
        FloeStatus want;
        switch (ops[i % 6]) {
        case FLOE_OP_INSERT_NEW: want = present ? FLOE_STATUS_PRESENT : FLOE_STATUS_OK; break;
        default: want = present ? FLOE_STATUS_OK : FLOE_STATUS_ABSENT; break;
        }
        wrong += r.status != want;
        wrong += present && r.value != key * 3;
    }
    CHECK(wrong == 0);

    static uint64_t keys[2 * N], values[2 * N];
    static bool found[2 * N];
    for (uint64_t i = 0; i < 2 * N; i++) {
        keys[i] = i;
    }
    CHECK_STATUS(floe_map_get_many(map, keys, 2 * N, values, found, 2 * N), FLOE_STATUS_OK);
    wrong = 0;
    for (uint64_t i = 0; i < 2 * N; i++) {
        uint64_t v = 0;
        FloeStatus single = floe_map_get(map, i, &v);
        wrong += found[i] != (single == FLOE_STATUS_OK);
        wrong += found[i] && values[i] != v;
        wrong += !found[i] && values[i] != 0;
    }
    CHECK(wrong == 0);
    floe_map_free(map);
}

struct walk {
    uint64_t sum, visits, stop_after;
};

static int32_t walk_visit(void *context, uint64_t key, uint64_t value) {
    struct walk *walk = context;
    walk->sum += value - key;
    walk->visits++;
    return walk->visits == walk->stop_after;
}

static void iteration(void) {
    FloeMap *map = new_map(100, 4);
    for (uint64_t key = 0; key < 500; key++) {
        floe_map_insert_new(map, key, key + 1, NULL);
    }
    struct walk all = {0, 0, 0};
    CHECK_STATUS(floe_map_for_each(map, walk_visit, &all), FLOE_STATUS_OK);
    CHECK(all.visits == 500);
    CHECK(all.sum == 500);
    struct walk some = {0, 0, 10};
    CHECK_STATUS(floe_map_for_each(map, walk_visit, &some), FLOE_STATUS_OK);
    CHECK(some.visits == 10);
    floe_map_free(map);
}

enum { THREADS = 4, ROUNDS = 20000, COUNTERS = 64 };

static void *count(void *map) {
    for (uint64_t i = 0; i < ROUNDS; i++) {
        if (floe_map_fetch_add(map, i % COUNTERS, 1, NULL) < 0) {
            return (void *)1;
        }
        /* Churn beside the counters: keys of this thread's own, inserted and removed. */
        uint64_t own = (uint64_t)1 << 40 | (uint64_t)pthread_self() << 8 | (i % 256);
        floe_map_insert(map, own, i, NULL);
        floe_map_remove(map, own, NULL);
    }
    return NULL;
}

static void concurrent_counts(void) {
    /* Small on purpose, so the map grows while the threads count. */
    FloeMap *map = new_map(16, 5);
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        CHECK(pthread_create(&threads[t], NULL, count, map) == 0);
    }
    int errors = 0;
    for (int t = 0; t < THREADS; t++) {
        void *result = NULL;
        pthread_join(threads[t], &result);
        errors += result != NULL;
    }
    CHECK(errors == 0);
    uint64_t total = 0;
    for (uint64_t key = 0; key < COUNTERS; key++) {
        uint64_t v = 0;
        CHECK_STATUS(floe_map_get(map, key, &v), FLOE_STATUS_OK);
        total += v;
    }
    CHECK(total == (uint64_t)THREADS * ROUNDS);
    size_t len = 0;
    floe_map_len(map, &len);
    CHECK(len == COUNTERS);
    floe_map_free(map);
}

#define BYTES(s) (const uint8_t *)(s), strlen(s)

static FloeBytes lend(const char *s) {
    return (FloeBytes){(const uint8_t *)s, strlen(s)};
}

struct answers {
    size_t count, wrong;
    const char *const *expected; /* NULL entries: absent */
    const FloeStatus *statuses;
};

static void answer(void *context, size_t index, FloeStatus status, const uint8_t *value,
                   size_t value_len) {
    struct answers *a = context;
    const char *want = a->expected[index];
    a->wrong += index != a->count;
    a->wrong += status != a->statuses[index];
    if (want == NULL) {
        a->wrong += value != NULL || value_len != 0;
    } else {
        a->wrong += value_len != strlen(want) || memcmp(value, want, value_len) != 0;
    }
    a->count++;
}

static int32_t count_pairs(void *context, const uint8_t *key, size_t key_len,
                           const uint8_t *value, size_t value_len) {
    (void)key;
    (void)value;
    *(size_t *)context += key_len + value_len;
    return 0;
}

static void byte_strings(void) {
    FloeBytesMap *map = NULL;
    CHECK_STATUS(floe_bytes_new(NULL, &map), FLOE_STATUS_OK);
    CHECK_STATUS(floe_bytes_insert_new(map, BYTES("apple"), BYTES("red")), FLOE_STATUS_OK);
    CHECK_STATUS(floe_bytes_insert_new(map, BYTES("apple"), BYTES("green")), FLOE_STATUS_PRESENT);
    CHECK_STATUS(floe_bytes_insert(map, BYTES("pear"), BYTES("yellow")), FLOE_STATUS_ABSENT);
    CHECK_STATUS(floe_bytes_insert(map, BYTES("pear"), BYTES("green")), FLOE_STATUS_OK);
    CHECK_STATUS(floe_bytes_put(map, BYTES("plum"), BYTES("blue")), FLOE_STATUS_ABSENT);
    CHECK_STATUS(floe_bytes_insert_new(map, NULL, 0, NULL, 0), FLOE_STATUS_OK); /* "" -> "" */

    char buffer[8];
    size_t len = sizeof buffer;
    CHECK_STATUS(floe_bytes_get(map, BYTES("apple"), (uint8_t *)buffer, &len), FLOE_STATUS_OK);
    CHECK(len == 3 && memcmp(buffer, "red", 3) == 0);
    len = 2;
    CHECK_STATUS(floe_bytes_get(map, BYTES("pear"), (uint8_t *)buffer, &len),
                 FLOE_STATUS_BUFFER_TOO_SMALL);
    CHECK(len == 5);
    len = 0;
    CHECK_STATUS(floe_bytes_get(map, BYTES("pear"), NULL, &len), FLOE_STATUS_BUFFER_TOO_SMALL);
    CHECK(len == 5);
    len = 0;
    CHECK_STATUS(floe_bytes_get(map, NULL, 0, NULL, &len), FLOE_STATUS_OK);
    CHECK(len == 0);
    len = 4;
    CHECK_STATUS(floe_bytes_get(map, BYTES("plum"), (uint8_t *)buffer, &len), FLOE_STATUS_ABSENT);
    CHECK(len == 0);

    CHECK_STATUS(floe_bytes_compare_exchange(map, lend("apple"), lend("green"), lend("x")),
                 FLOE_STATUS_MISMATCH);
    CHECK_STATUS(floe_bytes_compare_exchange(map, lend("apple"), lend("red"), lend("crimson")),
                 FLOE_STATUS_OK);
    CHECK_STATUS(floe_bytes_compare_exchange(map, lend("kiwi"), lend(""), lend("")),
                 FLOE_STATUS_ABSENT);

    const char *keys_text[] = {"apple", "kiwi", "pear", ""};
    const char *expected[] = {"crimson", NULL, "green", ""};
    const FloeStatus statuses[] = {FLOE_STATUS_OK, FLOE_STATUS_ABSENT, FLOE_STATUS_OK,
                                   FLOE_STATUS_OK};
    FloeBytes keys[4];
    for (int i = 0; i < 4; i++) {
        keys[i] = lend(keys_text[i]);
    }
    struct answers got = {0, 0, expected, statuses};
    CHECK_STATUS(floe_bytes_get_many(map, keys, 4, answer, &got), FLOE_STATUS_OK);
    CHECK(got.count == 4 && got.wrong == 0);

    FloeBytesRequest requests[] = {
        {FLOE_OP_PUT, lend("pear"), lend("ripe")},
        {FLOE_OP_GET, lend("pear"), lend("")},
        {FLOE_OP_INSERT_NEW, lend("pear"), lend("no")},
        {FLOE_OP_REMOVE, lend("apple"), lend("")},
        {FLOE_OP_INSERT, lend("kiwi"), lend("brown")},
    };
    const char *run_expected[] = {"green", "ripe", "ripe", "crimson", NULL};
    const FloeStatus run_statuses[] = {FLOE_STATUS_OK, FLOE_STATUS_OK, FLOE_STATUS_PRESENT,
                                       FLOE_STATUS_OK, FLOE_STATUS_ABSENT};
    struct answers ran = {0, 0, run_expected, run_statuses};
    CHECK_STATUS(floe_bytes_run(map, requests, 5, answer, &ran), FLOE_STATUS_OK);
    CHECK(ran.count == 5 && ran.wrong == 0);

    size_t bytes = 0;
    CHECK_STATUS(floe_bytes_for_each(map, count_pairs, &bytes), FLOE_STATUS_OK);
    /* pear ripe, plum absent, "" "", kiwi brown */
    CHECK(bytes == strlen("pearripe") + strlen("kiwibrown"));
    CHECK_STATUS(floe_bytes_len(map, &len), FLOE_STATUS_OK);
    CHECK(len == 3);
    CHECK_STATUS(floe_bytes_remove(map, BYTES("kiwi")), FLOE_STATUS_OK);
    CHECK_STATUS(floe_bytes_remove(map, BYTES("kiwi")), FLOE_STATUS_ABSENT);

    /* Bad input. */
    FloeBytesMap *none = NULL;
    CHECK_STATUS(floe_bytes_new(NULL, NULL), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_bytes_get(none, BYTES("a"), NULL, &len), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_bytes_get(map, NULL, 3, NULL, &len), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_bytes_get(map, BYTES("pear"), NULL, NULL), FLOE_STATUS_NULL_ARGUMENT);
    len = sizeof buffer;
    CHECK_STATUS(floe_bytes_get(map, BYTES("pear"), NULL, &len), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_bytes_insert_new(map, BYTES("a"), NULL, 5), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_bytes_insert(none, BYTES("a"), BYTES("b")), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_bytes_put(map, NULL, 1, BYTES("b")), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_bytes_remove(none, BYTES("a")), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_bytes_len(map, NULL), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_bytes_for_each(map, NULL, NULL), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_bytes_get_many(map, keys, 0, answer, &got), FLOE_STATUS_EMPTY_BATCH);
    CHECK_STATUS(floe_bytes_get_many(map, keys, 4, NULL, &got), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_bytes_get_many(map, NULL, 4, answer, &got), FLOE_STATUS_NULL_ARGUMENT);
    FloeBytesRequest bad[] = {{FLOE_OP_FETCH_ADD, lend("a"), lend("b")}};
    CHECK_STATUS(floe_bytes_run(map, bad, 1, answer, &ran), FLOE_STATUS_INVALID_ARGUMENT);
    bad[0] = (FloeBytesRequest){FLOE_OP_INSERT_NEW, {NULL, 2}, lend("b")};
    CHECK_STATUS(floe_bytes_run(map, bad, 1, answer, &ran), FLOE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(floe_bytes_run(map, bad, 0, answer, &ran), FLOE_STATUS_EMPTY_BATCH);
    CHECK(ran.count == 5); /* no answer from any refused batch */

    CHECK_STATUS(floe_bytes_free(map), FLOE_STATUS_OK);
    map = NULL;
    CHECK_STATUS(floe_bytes_free(map), FLOE_STATUS_OK);
    CHECK_STATUS(floe_bytes_len(map, &len), FLOE_STATUS_NULL_ARGUMENT);
}

int main(void) {
    single_key_calls();
    bad_input();
    capped_map_answers_full();
    batches();
    iteration();
    concurrent_counts();
    byte_strings();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
